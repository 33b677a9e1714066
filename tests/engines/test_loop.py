"""rlsup's real orchestrator and trainer against a real vLLM and a real SGLang: configs/a40-vllm.yaml and
configs/a40.yaml under `rlsup up -d` (see loop.py for the CPU changes), four published steps (three while the engine lives) loaded while
completions run, the greedy output following the weights, the engine's core killed mid-run and the run finishing."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
from conftest import engine_python
from harness import kill_engine_core, wait_for
from loop import STEPS, Greedy, LoopRun, hf_greedy, keep_published

from rlsup.trainer import rollouts

CORE = {"vllm": ("EngineCore",), "sglang": ("sglang::scheduler", "scheduler")}


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_orchestrator_and_trainer_against_the_real_engine(kind: str, tmp_path: Path) -> None:
    run = LoopRun(tmp_path, kind, engine_python(kind))
    kept = tmp_path / "published"
    kept.mkdir()
    stop = threading.Event()
    copier = threading.Thread(target=keep_published, args=(run, kept, stop), daemon=True)
    copier.start()
    run.up()
    greedy: Greedy | None = None
    try:
        run.wait_ready(1)
        greedy = Greedy(run)
        # Engine death mid-run: once the server has loaded step 1, its engine core is killed. rlsup restarts the
        # server (vLLM's API server exits 0 then: still a failure) and the orchestrator with it (restart_with).
        wait_for("the server to load weights step 1", lambda: 1 in run.loaded_steps(), 600)
        killed_at = time.time()
        kill_engine_core(run, CORE[kind])
        run.wait_ready(2)
        back_at = time.time()
        ended = wait_for("the run to end (the trainer has exit_on_end)", run.run_ended, 900, every=2)
    finally:
        results = greedy.finish() if greedy else []
        stop.set()
        copier.join(10)
        run.down()
    logs = {c: run.log(c) for c in ("inference", "orchestrator", "trainer")}
    tails = "\n".join(f"--- {c}\n" + "\n".join(t.splitlines()[-25:]) for c, t in logs.items())

    # The run finished its steps: the trainer completed (exit 0) and ended the run, after a restart of the engine.
    assert ended["exit_code"] == 0 and ended.get("root") is None, (ended, tails)
    trainer_exit = run.component_events("trainer", "exited")
    assert [e["exit_code"] for e in trainer_exit] == [0], (trainer_exit, tails)
    assert f"Step {STEPS}/{STEPS}" in logs["trainer"] and f"Training finished: {STEPS} steps" in logs["trainer"], tails
    inf_exits = run.component_events("inference", "exited")
    assert inf_exits and inf_exits[0]["diagnosis"]["category"] == "inference_engine_dead", (inf_exits, tails)
    assert len(run.component_events("inference", "ready")) >= 2
    assert len(run.component_events("orchestrator", "started")) >= 2, "the orchestrator was not restarted with it"

    # Every step's weights reached the server through its real update route (the trainer logs each load).
    loaded = run.loaded_steps()
    assert set(range(0, STEPS + 1)) <= set(loaded), (loaded, tails)
    latest = json.loads((run.weights / "latest.json").read_text())
    assert latest["step"] == STEPS and latest["engine"].startswith(kind), latest
    assert not list(run.weights.glob("*/REJECTED")), "good weights marked REJECTED: " + tails

    # The orchestrator sampled from the engine: rollouts with the engine's own token ids, for every step.
    for step in range(1, STEPS + 1):
        samples, meta = rollouts.read_step(run.run_dir / "work", step)
        assert samples and all(s.completion_ids for s in samples), (step, samples[:1])
        assert any(s.reward > 0 for s in samples) and any(s.reward == 0 for s in samples), step

    # Completions ran while each step was pushed, and the greedy output followed the weights: what transformers
    # computes from each published step's files is what the engine answered while it served that step.
    ok = [r for r in results if r["status"] == 200]
    stopped_at = trainer_exit[0]["ts"]  # the run then stops the server: later failures are expected
    bad = [r for r in results if r["status"] != 200 and r["t1"] < stopped_at
           and not (killed_at - 1 <= r["t1"] and r["t0"] <= back_at + 1)]
    assert not bad, f"completions failed outside the engine's death: {bad[:3]}"
    pushes = [(s, (kept / f"step_{s}" / "STABLE").stat().st_mtime) for s in range(1, STEPS + 1)]
    live = [(s, t) for s, t in pushes if not killed_at <= t <= back_at]  # not pushed to the dead engine
    assert len(live) >= 3, (pushes, killed_at, back_at)
    for s, t in live:
        assert any(r["t0"] <= t <= r["t1"] for r in ok), f"no completion in flight when step {s} was published"
    want = {s: hf_greedy(kept / f"step_{s}") for s in range(0, STEPS + 1)}
    want["base"] = hf_greedy(run.base)
    served = [r["text"] for r in ok]
    trained = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"Step (\d+)/\d+ \|.*?\| trained (\d+)",
                                                                      logs["trainer"])}
    assert sorted(trained) == list(range(1, STEPS + 1)) and trained[1] > 0, trained
    for s in range(1, STEPS + 1):  # a step whose groups all scored alike has no gradient: its weights stay
        assert trained[s] == 0 or want[s] != want[s - 1], (
            f"greedy output of step {s} vs {s - 1}: {want} (samples trained per step: {trained})")
    assert served[-1] == want[STEPS], (served[-5:], want)
    for s in range(1, STEPS + 1):
        assert want[s] in served, f"the engine never served step {s}'s greedy output {want[s]!r}: {want}, {served}"
    print(f"== loop {kind}: loaded {sorted(loaded)}; greedy per step {want}; {len(ok)} greedy completions, "
          f"{len(results) - len(ok)} failed during the restart ({back_at - killed_at:.0f} s)")
