"""configs/presets/prime-rl.yaml under `rlsup up -d`: the trainer and the orchestrator restart together and
resume from the same step, with the rollouts and broadcasts past that step deleted before either starts
(prime-rl's `rl` stops everything on any failure and a resumed `rl` cleans those directories first:
src/prime_rl/entrypoints/rl.py rl_local, src/prime_rl/utils/pathing.py clean_future_steps, at 559b447).

The preset is used as shipped (restart_with, resume, clean, depends_on, probes, paths); only each command
runs through tests/presets/prime_rl_standin.py with the preset's own argv after it, and the restart timings
are shortened. prime-rl itself needs GPUs; its real entry points are run by .ci/presets.sh."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import yaml
from conftest import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
PRESET = ROOT / "configs" / "presets" / "prime-rl.yaml"
STANDIN = Path(__file__).with_name("prime_rl_standin.py")
ROLES = {"configs": "configs", "inference": "inference", "env-reverse-text": "env-server",
         "orchestrator": "orchestrator", "trainer": "trainer"}


def standin_config(tmp_path: Path) -> Path:
    doc = yaml.safe_load(PRESET.read_text())
    for name, comp in doc["components"].items():
        comp["command"] = [sys.executable, str(STANDIN), ROLES[name], *shlex.split(comp["command"])]
        comp["stop"] = {"signal": "SIGTERM", "timeout": 5}
        comp["cwd"] = str(tmp_path)
        if "ready" in comp:
            comp["ready"].update(interval=0.2, timeout=60)
        if "alive" in comp:
            comp["alive"].update(interval=5)
    # The trainer waits longer before its own restart than the orchestrator takes to stop and start again,
    # so the orchestrator's new attempt is writing its next batch when the trainer starts.
    doc["components"]["trainer"]["restart"]["backoff"] = {"initial": 6, "factor": 1, "max": 6}
    doc["components"]["orchestrator"]["restart"]["backoff"] = {"initial": 0.5, "factor": 1, "max": 0.5}
    path = tmp_path / "prime-rl.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def starts(run_dir: Path) -> list[dict]:
    p = run_dir / "starts.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


def test_a_trainer_crash_restarts_the_orchestrator_and_both_resume_from_one_cleaned_step(tmp_path, daemon):
    config = standin_config(tmp_path)
    env = {"PRIME_OUTPUT_DIR": str(tmp_path / "outputs"), "PRIME_RUN_NAME": "t1", "PRIME_PORT": str(free_port())}
    run_dir = tmp_path / "outputs" / "t1"  # --output-dir / --run.name, as `rl` resolves it
    d = daemon(config, env=env)
    try:
        wait_for(lambda: [s for s in starts(run_dir) if s["role"] == "trainer" and s["attempt"] == "2"],
                 timeout=90, what="the trainer's second start")
        ev = d.events()
        seen = starts(run_dir)
        orch = [s for s in seen if s["role"] == "orchestrator"]
        trainer = [s for s in seen if s["role"] == "trainer"]
        # The crash of the trainer stopped the orchestrator (restart_with), which started again.
        stopping = [e for e in ev if e["kind"] == "stopping" and e["component"] == "orchestrator"]
        assert stopping and stopping[0]["by"] == "restart_with trainer", stopping
        assert [s["attempt"] for s in orch][:2] == ["1", "2"], orch
        # Both resumed from the same step, the newest with both parts (step_N/trainer/.metadata and
        # step_N/orchestrator/progress.pt), and the same step rlsup reported.
        step = int(orch[1]["resume"])
        assert trainer[1]["resume"] == orch[1]["resume"] and step >= 2 and step % 2 == 0
        resumed = {e["component"]: e["resume"]["step"] for e in ev
                   if e["kind"] == "started" and e.get("resume")}
        assert resumed == {"orchestrator": step, "trainer": step}, resumed
        # What the first attempts wrote past that step was gone before the orchestrator started again ...
        assert max(orch[1]["rollouts"]) <= step and max(orch[1]["broadcasts"]) <= step, orch[1]
        cleaned = [e for e in ev if e["kind"] == "cleaned"]
        assert len(cleaned) == 1 and cleaned[0]["component"] == "orchestrator" and cleaned[0]["step"] == step
        removed = {Path(p).parent.name + "/" + Path(p).name for p in cleaned[0]["paths"]}
        assert f"broadcasts/step_{step + 1}" in removed and f"rollouts/step_{step + 1}" in removed, removed
        # ... and the trainer, starting after it, found the new orchestrator's next batch and no stale broadcast:
        # its own clean did not run (the orchestrator of this restart was already writing).
        assert max(trainer[1]["broadcasts"]) <= step, trainer[1]
        assert step + 1 in trainer[1]["rollouts"], trainer[1]
        writer = (run_dir / "rollouts" / f"step_{step + 1}" / "writer").read_text()
        assert writer == "orchestrator attempt 2\n"
        # The configs step resolved the same run dir the others read (no `outputs/configs`, no random name).
        assert (run_dir / "configs" / "trainer.json").is_file() and not (tmp_path / "outputs" / "configs").exists()
        # The inference server and the env server were left running.
        assert [s["role"] for s in seen].count("inference") == 1
        assert [s["role"] for s in seen].count("env-server") == 1
    finally:
        d.cli("down", timeout=120)


def test_an_orchestrator_crash_restarts_the_trainer(tmp_path, daemon):
    """The other direction: `rlsup restart orchestrator` (as any orchestrator restart) takes the trainer along."""
    config = standin_config(tmp_path)
    env = {"PRIME_OUTPUT_DIR": str(tmp_path / "outputs"), "PRIME_RUN_NAME": "t2", "PRIME_PORT": str(free_port())}
    run_dir = tmp_path / "outputs" / "t2"
    d = daemon(config, env=env)
    try:
        wait_for(lambda: [s for s in starts(run_dir) if s["role"] == "trainer" and s["attempt"] == "2"],
                 timeout=90, what="the trainer's restart after its crash")
        wait_for(lambda: [s for s in starts(run_dir) if s["role"] == "orchestrator" and s["attempt"] == "2"],
                 timeout=30, what="the orchestrator's second start")
        d.cli("restart", "orchestrator", check=True)
        wait_for(lambda: [s for s in starts(run_dir) if s["role"] == "trainer" and s["attempt"] == "3"],
                 timeout=60, what="the trainer following the orchestrator's restart")
        ev = d.events()
        assert any(e["kind"] == "stopping" and e["component"] == "trainer" and e["by"] == "restart_with orchestrator"
                   for e in ev)
    finally:
        d.cli("down", timeout=120)
