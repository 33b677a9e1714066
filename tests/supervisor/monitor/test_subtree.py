"""An attempt's processes are found from the monitor's subtree, through the kernel's lists of children, without a
pass over every process of the machine (issue 44 item 3); the pass stays where the kernel keeps no such lists."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from rlsup.supervisor.monitor import process, shim
from rlsup.supervisor.monitor.process import AttemptProcesses
from tests.conftest import PATIENCE


def _no_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    def scan() -> dict[int, list[int]]:
        raise AssertionError("a pass over every process of the machine")

    monkeypatch.setattr(shim, "_children_map", scan)
    monkeypatch.setattr(process, "_children", (-1e9, {}))


@pytest.fixture
def tree():
    """A child of this process started from another thread (the kernel lists children per thread), with two
    grandchildren; their pids once all are there."""
    if shim.children_of(os.getpid()) is None:
        pytest.skip("this kernel keeps no lists of children")
    procs: list[subprocess.Popen] = []
    t = threading.Thread(target=lambda: procs.append(subprocess.Popen(
        ["sh", "-c", "sleep 60 & sleep 60 & wait"], start_new_session=True)))
    t.start()
    t.join()
    p = procs[0]
    deadline = time.monotonic() + PATIENCE
    while len(shim.descendants(p.pid, shim._children_map())) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    yield p, {p.pid, *shim.descendants(p.pid, shim._children_map())}
    os.killpg(p.pid, 9)
    p.wait()


def test_descendants_are_found_without_scanning_the_machine(tree, monkeypatch: pytest.MonkeyPatch) -> None:
    p, pids = tree
    _no_scan(monkeypatch)
    assert len(pids) == 3
    assert set(shim.descendants(os.getpid())) >= pids


def test_an_attempts_members_are_found_without_scanning_the_machine(tree, monkeypatch: pytest.MonkeyPatch) -> None:
    p, pids = tree
    _no_scan(monkeypatch)
    att = AttemptProcesses("a", 1, pid=p.pid, monitor_pid=os.getpid(), record_path=Path("/nonexistent"))
    assert set(att.members()) >= pids


def test_without_the_kernels_lists_the_machine_is_scanned(tree, monkeypatch: pytest.MonkeyPatch) -> None:
    p, pids = tree
    monkeypatch.setattr(shim, "HAS_CHILDREN_FILE", False)
    assert shim.children_of(os.getpid()) is None
    assert set(shim.descendants(os.getpid())) >= pids
    att = AttemptProcesses("a", 1, pid=p.pid, monitor_pid=os.getpid(), record_path=Path("/nonexistent"))
    assert set(att.members()) >= pids
