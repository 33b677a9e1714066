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
