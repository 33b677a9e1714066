"""The reference stack under `rlsup up --headless`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import free_port, kinds

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.slow
def test_demo_runs_to_completion(tmp_path, headless):
    env = {"RLSUP_DEMO_PORT": str(free_port()), "RLSUP_DEMO_STEPS": "30"}
    h = headless(CONFIGS / "demo.yaml", env=env)
    assert h.wait(240) == 0, h.output
    ev = h.events()
    assert kinds(ev, "trainer")[-1] == "completed"
    ready = next(e for e in ev if e["kind"] == "ready" and e["component"] == "inference")
    assert all(e["ts"] >= ready["ts"] for e in ev if e["kind"] == "started" and e["component"] != "inference")
    exited = next(e for e in ev if e["kind"] == "exited" and e["component"] == "trainer")
    assert exited["step"] == 30 and exited["exit_code"] == 0


@pytest.mark.slow
def test_chaos_demo_is_diagnosed_resumed_and_completes(tmp_path, headless):
    """Three real faults: the server dies, the orchestrator is OOM-killed, the trainer raises after a
    checkpoint. rlsup names each, restarts it, resumes the trainer from its latest complete
    checkpoint, and the run still completes."""
    env = {"RLSUP_DEMO_PORT": str(free_port()), "RLSUP_DEMO_STEPS": "80",
           "RLSUP_CHAOS_INFERENCE": "die@6s", "RLSUP_CHAOS_ORCHESTRATOR": "oom@45",
           "RLSUP_CHAOS_TRAINER": "crash@35"}
    h = headless(CONFIGS / "demo-chaos.yaml", env=env)
    assert h.wait(300) == 0, h.output
    ev = h.events()
    assert kinds(ev, "trainer")[-1] == "completed"

    crash = next(e for e in ev if e["kind"] == "exited" and e["component"] == "trainer" and e["exit_code"])
    d = crash["diagnosis"]
    assert d["category"] == "python_exception" and d["location"] and d["step"] in (34, 35)
    starts = [e for e in ev if e["kind"] == "started" and e["component"] == "trainer"]
    resumed = [s for s in starts if s["resume"]]
    assert resumed, "the trainer was restarted without resuming"
    r = resumed[0]["resume"]
    assert r["step"] == 30 and r["checkpoint"].endswith("step_30")  # latest complete before the crash
    assert "--resume-step" in resumed[0]["command"] and "30" in resumed[0]["command"]
    # Progress continued from the resumed step, not from 0.
    after = [e for e in ev if e["kind"] == "exited" and e["component"] == "trainer"][-1]
    assert after["step"] == 80

    oom = next(e for e in ev if e["kind"] == "exited" and e["component"] == "orchestrator" and e["signal"])
    assert oom["signal"] == "SIGKILL" and oom["diagnosis"]["category"] in ("host_oom", "killed")
    server = [e for e in ev if e["kind"] == "exited" and e["component"] == "inference"]
    assert server and server[0]["exit_code"] not in (0, None) or server[0]["signal"]
    assert len([e for e in ev if e["kind"] == "started" and e["component"] == "inference"]) >= 2
    # Nothing deterministic happened, so no restart was refused.
    assert not any(e["kind"] == "fatal" for e in ev)


@pytest.mark.slow
def test_manual_resume_from_a_chosen_checkpoint(tmp_path, headless):
    from tests.conftest import rlsup, wait_for

    # From step 41 every step takes 30 s more: the trainer keeps three checkpoints, and on a loaded machine
    # it pruned step 20 (at step 50) before the test resumed from it; now that takes five minutes.
    env = {"RLSUP_DEMO_PORT": str(free_port()), "RLSUP_DEMO_STEPS": "3000", "RLSUP_CHAOS_TRAINER": "slow@41:30",
           "RLSUP_CHAOS_INFERENCE": "none", "RLSUP_CHAOS_ORCHESTRATOR": "none"}
    h = headless(CONFIGS / "demo-chaos.yaml", env=env)
    run = ["--run-dir", str(h.run_dir)]
    import json

    def ckpt() -> int:
        st = rlsup("status", "--json", *run)
        if st.returncode:
            return 0
        c = json.loads(st.stdout)["components"]["trainer"]["checkpoint"] or {}
        return c.get("step") or 0

    wait_for(lambda: ckpt() >= 40, timeout=120, what="a checkpoint at step 40 in status")
    bad = rlsup("resume", "trainer", "--step", "7", *run)
    assert bad.returncode == 1 and "no complete checkpoint at step 7" in bad.stderr and "20" in bad.stderr
    ok = rlsup("resume", "trainer", "--step", "20", *run)
    assert ok.returncode == 0 and "from step 20" in ok.stdout
    started = h.wait_event(lambda e: e["kind"] == "started" and e["component"] == "trainer" and e["resume"],
                           what="the resumed start")
    assert started["resume"]["step"] == 20
    prog = wait_for(lambda: json.loads(rlsup("status", "--json", *run).stdout)["components"]["trainer"]["step"],
                    what="progress after the resume")
    assert 20 <= prog < 60  # continues from 20, not from where it was
    assert rlsup("down", *run).returncode == 0
    assert h.wait(60) == 0
