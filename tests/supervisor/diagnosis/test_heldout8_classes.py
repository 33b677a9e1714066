"""heldout8's four missed classes, fixed by class after it was measured once (each from a real run)."""

from __future__ import annotations

from pathlib import Path

from rlsup.supervisor.diagnosis.engine import diagnose
from rlsup.supervisor.diagnosis.offline import diagnose_file, read_tail

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "diagnosis"


def _lines(name: str) -> list[str]:
    return read_tail(FIXTURES / name)[1:]


def test_ray_task_retried_after_its_worker_died_then_progress_is_no_failure() -> None:
    assert diagnose_file(FIXTURES / "h8_local_ray_benign_actor_restart.log").category == "none"
    # the same real log cut right after Ray's retry note: nothing says the run carried on
    lines = _lines("h8_local_ray_benign_actor_restart.log")
    cut = lines[:6]
    assert diagnose(cut).category == "ray_actor_died"


def test_logged_traceback_followed_by_a_later_step_is_handled_but_not_without_one() -> None:
    assert diagnose_file(FIXTURES / "h8_local_torch_benign_logged_exception.log").category == "none"
    lines = _lines("h8_local_torch_benign_logged_exception.log")
    until_traceback = lines[: lines.index("KeyError: 'pass@1'") + 1]
    d = diagnose(until_traceback)
    assert d.category == "python_exception" and d.exception_type == "KeyError"


def test_faulthandler_timeout_dump_is_a_hang_at_the_main_threads_frame() -> None:
    d = diagnose_file(FIXTURES / "h8_local_torch_hang_faulthandler.log")
    assert d.category == "watchdog_timeout" and d.location and d.location.endswith("h8_torch.py:99")
    # a real run (python 3.11, a worker thread asleep, faulthandler.dump_traceback_later(1, exit=True)):
    # faulthandler lists the newest thread first; the main thread, listed last, is where it waited
    dump = [
        "Timeout (0:00:01)!",
        "Thread 0x00007ffb0169c6c0 (most recent call first):",
        '  File "/tmp/diag2_fh.py", line 3 in worker',
        '  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 982 in run',
        '  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 1045 in _bootstrap_inner',
        '  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 1002 in _bootstrap',
        "",
        "Thread 0x00007ffb023ffb80 (most recent call first):",
        '  File "/tmp/diag2_fh.py", line 6 in <module>',
    ]
    d = diagnose(dump)
    assert d.category == "watchdog_timeout" and d.location == "/tmp/diag2_fh.py:6"
    # a periodic dump (repeat=True, exit=False) that training progress follows is no failure
    assert diagnose(["step 1 | loss 0.5", *dump, "step 2 | loss 0.4"]).category == "none"


def test_two_unprefixed_tracebacks_printed_at_once_keep_the_users_frame() -> None:
    d = diagnose_file(FIXTURES / "h8_local_torchrun_nccl_on_cpu.log")
    assert d.category == "python_exception" and d.exception_type == "RuntimeError"
    assert d.location and d.location.endswith("h8_torch.py:170")
