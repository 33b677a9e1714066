"""The run's health sweep: its pure parts (what a monitor's state means, how often to look, what a
failing write says); the sweep itself runs in tests/faults/test_read_only_run_dir.py and test_stopped_monitor.py."""

from __future__ import annotations

import errno
from pathlib import Path

from rlsup.supervisor.run import health


def test_a_stopped_or_wedged_monitor_is_named_and_a_running_one_is_not() -> None:
    assert health.stuck_reason("T", 0) == "is stopped (SIGSTOP)"
    assert health.stuck_reason("t", 0) == "is stopped by a debugger"
    assert health.stuck_reason("D", health.WEDGED_S - 1) is None  # a slow write is not a wedge
    assert "uninterruptible sleep for 12 s" in (health.stuck_reason("D", 12.0) or "")
    for state in ("R", "S", "Z", ""):
        assert health.stuck_reason(state, 100.0) is None


def test_the_sweep_costs_at_most_its_budget_of_proc_reads() -> None:
    assert health.sweep_every(0) == health.sweep_every(300) == health.HEALTH_S
    assert health.sweep_every(10_000) * health.SWEEP_PER_S >= 2 * 10_000


def test_what_the_run_dir_refuses_is_said_with_its_cause(tmp_path: Path) -> None:
    assert health.disk_trouble(tmp_path, [None, None]) is None
    assert health.disk_trouble(tmp_path, [OSError(errno.ENOSPC, "No space left on device")]) is None  # its own path
    said = health.disk_trouble(tmp_path, [None, OSError(errno.EIO, "Input/output error")])
    assert said is not None and "fails (EIO: Input/output error)" in said and str(tmp_path) in said
    said = health.disk_trouble(tmp_path, [OSError(errno.EROFS, "Read-only file system")])
    assert said is not None and "is read-only (EROFS" in said
    assert health.disk_trouble(tmp_path / "gone", []) is None  # a run dir removed is not a disk fault
