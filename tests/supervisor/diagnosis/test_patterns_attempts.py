"""Cross-attempt pattern detectors, on attempt records built here (time is the records' own)."""

from __future__ import annotations

from rlsup.supervisor.diagnosis import AttemptRecord, Diagnosis, detect_attempt_patterns

ATTR = Diagnosis("python_exception", "AttributeError: 'Namespace' object has no attribute 'model_id' at train.py:1636",
                 "AttributeError: 'Namespace' object has no attribute 'model_id'", "/w/train.py:1636", None,
                 ("AttributeError: 'Namespace' object has no attribute 'model_id'",))
OOM = Diagnosis("cuda_oom", "torch.OutOfMemoryError: CUDA out of memory at model.py:88",
                "torch.OutOfMemoryError: CUDA out of memory", "/w/model.py:88", 57,
                ("Step 57/100 | loss 0.31", "torch.OutOfMemoryError: CUDA out of memory"))
KILLED = Diagnosis("killed", "killed by SIGKILL (exit code 137); no kernel OOM evidence")
CLEAN = Diagnosis("none", "exited normally (exit code 0)")
REFUSED = Diagnosis("connection_refused", "httpx.ConnectError: All connection attempts failed",
                    "httpx.ConnectError: All connection attempts failed", None)


def rec(n: int, start: float, up: float, d: Diagnosis, *, ready: bool = True, code: int | None = 1,
        sig: str | None = None, step: int | None = None, resumed: int | None = None) -> AttemptRecord:
    return AttemptRecord(n, start, start + up, ready, code, sig, step, resumed, d)


def types(flags) -> list[str]:
    return [f.type for f in flags]


def test_no_history_no_flags() -> None:
    assert detect_attempt_patterns([], total=None) == []


def test_repeated_error_is_fatal_on_second_identical_failure() -> None:
    h = [rec(1, 0, 100, ATTR)]
    assert "repeated_error" not in types(detect_attempt_patterns(h, total=None))
    h.append(rec(2, 110, 100, ATTR))
    flags = detect_attempt_patterns(h, total=None)
    f = next(f for f in flags if f.type == "repeated_error")
    assert f.fatal
    assert f.message.startswith("AttributeError at train.py:1636 on 2 consecutive attempts")
    assert ATTR.summary in f.evidence


def test_a_full_disk_twice_stops_restarts_without_calling_itself_deterministic() -> None:
    """Walked with the demo on a run dir filled mid-run: the orchestrator's two ENOSPC exits stopped it as
    "a deterministic failure", which sends a user to the code; the disk is what stays full."""
    enospc = Diagnosis("disk_full", "OSError: [Errno 28] No space left on device at rollouts.py:50",
                       "OSError: [Errno 28] No space left on device", "/w/rollouts.py:50")
    h = [rec(1, 0, 10, enospc), rec(2, 11, 0.3, enospc)]
    f = next(f for f in detect_attempt_patterns(h, total=None) if f.type == "repeated_error")
    assert f.fatal and "deterministic" not in f.message, f.message
    assert f.message.endswith("the disk is still full: automatic restarts stopped"), f.message


def test_repeated_error_needs_consecutive_same_signature() -> None:
    other = Diagnosis("python_exception", "s", "AttributeError: other message", "/w/train.py:99")
    h = [rec(1, 0, 100, ATTR), rec(2, 110, 100, other), rec(3, 220, 100, ATTR)]
    assert "repeated_error" not in types(detect_attempt_patterns(h, total=None))
    # Same type and location, different message: still the same deterministic bug.
    same = Diagnosis("python_exception", "s", "AttributeError: 'Namespace' object has no attribute 'lr'",
                     "/w/train.py:1636")
    h = [rec(1, 0, 100, ATTR), rec(2, 110, 100, same)]
    assert "repeated_error" in types(detect_attempt_patterns(h, total=None))


def test_repeated_error_ignores_killed_and_unknown_and_is_not_fatal_for_transient() -> None:
    h = [rec(1, 0, 100, KILLED, sig="SIGKILL", code=None), rec(2, 110, 100, KILLED, sig="SIGKILL", code=None)]
    assert "repeated_error" not in types(detect_attempt_patterns(h, total=None))
    h = [rec(1, 0, 100, REFUSED), rec(2, 110, 100, REFUSED)]
    f = next(f for f in detect_attempt_patterns(h, total=None) if f.type == "repeated_error")
    assert not f.fatal


def test_crash_loop_names_the_period() -> None:
    h = [rec(i + 1, i * 17.0, 3.0, KILLED if i % 2 else ATTR, ready=False) for i in range(3)]
    flags = detect_attempt_patterns(h, total=None)
    f = next(f for f in flags if f.type == "crash_loop")
    assert not f.fatal
    assert "3 consecutive attempts died before becoming ready" in f.message
    assert "every ~17 s" in f.message
    assert len(f.evidence) == 3


def test_crash_loop_not_for_long_healthy_attempts() -> None:
    h = [rec(1, 0, 5, ATTR, ready=False), rec(2, 20, 5, ATTR, ready=False), rec(3, 40, 3600, ATTR)]
    assert "crash_loop" not in types(detect_attempt_patterns(h, total=None))
    # ready but died within the uptime threshold counts
    h = [rec(i + 1, i * 40.0, 10.0, KILLED, ready=True, sig="SIGKILL", code=None) for i in range(4)]
    f = next(f for f in detect_attempt_patterns(h, total=None) if f.type == "crash_loop")
    assert "within 30 s" in f.message and "every ~40 s" in f.message


def test_step_crash_after_resume() -> None:
    h = [rec(1, 0, 900, OOM, step=57), rec(2, 1000, 300, OOM, step=58, resumed=50)]
    f = next(f for f in detect_attempt_patterns(h, total=100) if f.type == "step_crash")
    assert f.fatal
    assert "steps 57-58" in f.message and "resumed from step 50" in f.message
    assert "Step 57/100 | loss 0.31" in f.evidence
    assert f.evidence[0] == "last lines before step 58:"


def test_step_crash_outside_window_or_single() -> None:
    h = [rec(1, 0, 900, OOM, step=57)]
    assert "step_crash" not in types(detect_attempt_patterns(h, total=100))
    h = [rec(1, 0, 900, OOM, step=40), rec(2, 1000, 300, OOM, step=57, resumed=30)]
    assert "step_crash" not in types(detect_attempt_patterns(h, total=100))
    h = [rec(1, 0, 900, OOM, step=57), rec(2, 1000, 300, OOM, step=60, resumed=50)]
    assert "step_crash" not in types(detect_attempt_patterns(h, total=100, step_window=2))
    assert "step_crash" in types(detect_attempt_patterns(h, total=100, step_window=3))


def test_false_success_only_latest_and_only_before_total() -> None:
    early = rec(1, 0, 600, CLEAN, code=0, step=40)
    f = next(f for f in detect_attempt_patterns([early], total=100) if f.type == "false_success")
    assert not f.fatal and "step 40 of 100" in f.message
    done = rec(2, 700, 600, CLEAN, code=0, step=100)
    assert "false_success" not in types(detect_attempt_patterns([early, done], total=100))
    assert "false_success" not in types(detect_attempt_patterns([early], total=None))
    zero_based_last = rec(1, 0, 600, CLEAN, code=0, step=99)
    assert detect_attempt_patterns([zero_based_last], total=100) == []
    no_steps = rec(1, 0, 600, CLEAN, code=0, step=None)
    assert "no step" in detect_attempt_patterns([no_steps], total=100)[0].message


def test_clean_single_attempt_has_no_flags() -> None:
    assert detect_attempt_patterns([rec(1, 0, 3600, CLEAN, code=0, step=100)], total=100) == []
