"""rlsup report on recorded run directories (tests/fixtures/report, from real runs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlsup.supervisor.render.report import build_report
from rlsup.supervisor.rundir.layout import RunLock, RunPaths

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "report"
WANDB_KEY = "wk-live-8f3a9c21d7"


def copy_run(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(FIX / name, dst)
    return dst


def rewrite_events(run: Path, fn) -> None:
    p = run / "events.jsonl"
    events = [json.loads(x) for x in p.read_text().splitlines()]
    events = fn(events)
    p.write_text("".join(json.dumps(e) + "\n" for e in events))


def test_repeated_error_report_reads_like_an_incident(tmp_path: Path) -> None:
    md = build_report(FIX / "repeated", now=0, env={}, config_path=FIX / "repeated" / "config.yaml")
    assert md.startswith("# Incident report: gsm8k-grpo\n")
    assert "- Status: **ended** 2026-11-22 04:25:46 UTC: trainer fatal (exit_on_end), exit code 1" in md
    assert ("Trainer crashed twice with the same AttributeError at train.py:12; stopped restarting "
            "(repeated_error)") in md
    assert "### repeated_error on trainer at 04:25:46" in md and "### step_crash on trainer" in md
    assert "Action: stopped automatic restarts (state fatal); fix the cause, then `rlsup start trainer`" in md
    assert "| trainer | fatal | 2 | 2 | 5/100 | exit 1 after 1.2s |" in md
    assert "- Location: `/tmp/repgen/train.py:12`" in md
    assert "**Attempt 2**: the same failure as attempt 1 (AttributeError at train.py:12)." in md
    assert "AttributeError: 'Batch' object has no attribute 'rewards'\n```" in md
    assert "- **trainer** (repeated_error): The same error on consecutive attempts is a deterministic bug: " \
           "fix the code at `/tmp/repgen/train.py:12`, then `rlsup start trainer`" in md
    assert "(python_exception)" not in md  # the flag's advice covers it
    assert "| 04:25:44 | 1.4 | trainer | exit 1 after 1.3s at step 5: AttributeError" in md
    assert "- Host: CPU 2.0% of 2 cores, memory 0.4 / 23.5 GiB, load 0.51" in md
    assert build_report(FIX / "repeated", now=0, env={}, config_path=FIX / "repeated" / "config.yaml") == md


def test_no_secret_in_report(tmp_path: Path) -> None:
    run = copy_run(tmp_path, "repeated")

    def leak(events: list[dict]) -> list[dict]:
        # evidence echoing a token from the env, and one from the caller's environment
        for e in events:
            if e["kind"] == "exited" and e["component"] == "trainer":
                e["diagnosis"]["evidence"].append(f"using api key {WANDB_KEY}")
                e["diagnosis"]["evidence"].append("hf_callerSecret99 rejected")
        return events

    rewrite_events(run, leak)
    md = build_report(run, now=0, env={"HF_TOKEN": "hf_callerSecret99"}, config_path=run / "config.yaml")
    for secret in (WANDB_KEY, "sk-test-123456", "hf_callerSecret99"):
        assert secret not in md
    assert "Command: `python train.py --api-key *** --steps 100`" in md
    assert "using api key ***" in md
    # without the config, the env value is unknown but the argv pattern still masks the key
    md2 = build_report(run, now=0, env={}, config_path=tmp_path / "missing.yaml")
    assert "sk-test-123456" not in md2 and WANDB_KEY in md2


def test_one_name_two_secrets_both_masked(tmp_path: Path) -> None:
    """The run's env and a component's give WANDB_API_KEY two values: each run masked both, so does the report."""
    run = copy_run(tmp_path, "repeated")
    other = "wk-live-5e6f7a8b9c"
    cfg = run / "config.yaml"
    cfg.write_text(cfg.read_text().replace('command: python server.py',
                                           f'command: python server.py\n    env: {{WANDB_API_KEY: {other}}}'))

    def leak(events: list[dict]) -> list[dict]:
        for e in events:
            if e["kind"] == "exited" and e["component"] == "trainer":
                e["diagnosis"]["evidence"] += [f"run key {WANDB_KEY}", f"server key {other}"]
        return events

    rewrite_events(run, leak)
    md = build_report(run, now=0, env={}, config_path=cfg)
    assert "run key ***" in md and "server key ***" in md
    assert WANDB_KEY not in md and other not in md


def test_chaos_run_recovered_everywhere() -> None:
    md = build_report(FIX / "chaos", now=0, env={}, config_path=FIX / "missing.yaml")
    assert ("Inference crashed once with inference_engine_dead; recovered; orchestrator was killed once by "
            "SIGKILL; recovered (completed); trainer crashed once with rlsup.trainer.chaos.ChaosCrash at "
            "chaos.py:115; recovered (completed); the run ended: trainer completed (exit_on_end) (exit code 0).") in md
    for comp in ("inference (stopped)", "orchestrator (completed)", "trainer (completed)"):
        assert f"### {comp}" in md
    assert "## Flags\n\nNone raised." in md
    assert "- Then: restarting in 1.1s (attempt 2; exited with code 1)" in md
    assert "- **orchestrator** (killed): recovered by restarting; to keep it from recurring: Killed by a signal" in md
    assert "rlsup.trainer.chaos.ChaosCrash: injected failure at step 60 (chaos crash@60)\n```" in md


def test_crash_loop_is_collapsed() -> None:
    md = build_report(FIX / "crash_loop", now=0, env={}, config_path=FIX / "missing.yaml")
    assert "Inference crashed 6 times with the same no recognised error (exit 1), each time before becoming ready" in md
    assert "orchestrator, trainer never started (a dependency was fatal)" in md
    assert md.count("### crash_loop on inference") == 1
    assert "_Raised 4 times, first at 04:23:57; the latest:_" in md
    assert "**Attempts 2-6**: the same failure as attempt 1" in md
    assert "No module named 'rlsup'" in md
    assert "- **inference** (crash_loop):" in md and "(unknown)" not in md


def test_checkpoint_found_on_disk_and_resources_at_exit(tmp_path: Path) -> None:
    run = copy_run(tmp_path, "chaos")
    for step in (50, 60):
        d = run / "work" / "checkpoints" / f"step_{step}"
        d.mkdir(parents=True)
        (d / "model.pt").write_bytes(b"x")
        (d / "STABLE").write_text("")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("name: demo-chaos\ncomponents:\n  trainer:\n    command: x\n    resume:\n"
                   "      checkpoints: ${RLSUP_RUN_DIR}/work/checkpoints\n      layout: prime-rl\n")

    def with_resources(events: list[dict]) -> list[dict]:
        for e in events:
            if e["kind"] == "exited" and e["component"] == "orchestrator" and e.get("signal"):
                e["resources"] = {"rss_mb": 61500.0, "host_mem_used_pct": 97.5}
        return events

    rewrite_events(run, with_resources)
    md = build_report(run, now=0, env={}, config_path=cfg)
    assert f"- trainer: step 60 at `{run}/work/checkpoints/step_60` (found on disk)" in md
    assert "- Resources at exit: rss_mb 61500.0, host_mem_used_pct 97.5" in md
    assert "- orchestrator attempt 1 at 04:25:06: rss_mb 61500.0, host_mem_used_pct 97.5" in md


def test_dead_and_live_runs_without_run_ended(tmp_path: Path) -> None:
    run = copy_run(tmp_path, "repeated")
    (run / "state.json").unlink()
    # the supervisor died mid-run: the journal stops after the first crash, its last line torn
    rewrite_events(run, lambda ev: ev[:8])
    with open(run / "events.jsonl", "a") as f:
        f.write('{"ts": 1795321545.4, "seq": 9, "kind": "sta')
    md = build_report(run, now=1795321600.0, env={})
    assert "- Status: **supervisor gone** without ending the run (last event 2026-11-22 04:25:44 UTC)" in md
    assert "Trainer crashed once with AttributeError at train.py:12; now backoff; the run is still going." in md
    lock = RunLock(RunPaths(run))
    lock.acquire({"name": "gsm8k-grpo"})
    try:
        md = build_report(run, now=1795321600.0, env={})
    finally:
        lock.release()
    assert "- Status: **running** (report taken 2026-11-22 04:26:40 UTC)" in md
    assert "duration 56.9s" in md


def test_not_a_run_dir(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        build_report(tmp_path, now=0, env={})


def test_long_timeline_is_cut(tmp_path: Path) -> None:
    run = copy_run(tmp_path, "repeated")

    def many(events: list[dict]) -> list[dict]:
        extra = [{"ts": events[-1]["ts"] + i, "seq": 100 + i, "kind": "command", "component": "trainer",
                  "command": "restart", "by": "user"} for i in range(300)]
        return events + extra

    rewrite_events(run, many)
    md = build_report(run, now=0, env={})
    timeline = md.split("## Timeline", 1)[1]
    assert "| ... | | | 118 more events in events.jsonl |" in timeline
    assert timeline.count("\n| ") == 2 + 200 + 1  # header and separator, 200 events, the cut row


def test_an_exit_of_unknown_status_reads_exit_question_mark(tmp_path: Path) -> None:
    """One exit text everywhere (phrases.describe_exit): the report said 'exit None' where the
    journal says 'exit ?' (an exit whose status no one could read)."""
    run = copy_run(tmp_path, "repeated")

    def unknown(events):
        for e in events:
            if e.get("kind") == "exited":
                e["exit_code"] = None
        return events

    rewrite_events(run, unknown)
    md = build_report(run, now=0, env={}, config_path=run / "config.yaml")
    assert "exit None" not in md
    assert "| exit ? after 1.2s |" in md
