"""The end of an attempt waits for its monitor's exit on a pidfd (issue 44 item 3): the next attempt starts the
moment the monitor is gone, not at the next tick of a poll."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from rlsup.supervisor.monitor.process import AttemptProcesses
from tests.conftest import PATIENCE


def _attempt(monitor_pid: int) -> AttemptProcesses:
    return AttemptProcesses("a", 1, pid=monitor_pid, monitor_pid=monitor_pid, record_path=Path("/nonexistent"))


def _no_polling(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    real = asyncio.sleep

    async def sleep(delay: float, *a: object, **kw: object) -> object:
        slept.append(delay)
        return await real(delay, *a, **kw)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return slept


def test_the_wait_ends_when_the_monitor_exits_without_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    slept = _no_polling(monkeypatch)

    async def main() -> bool:
        asyncio.get_running_loop().call_later(0.1, p.kill)  # a zombie until reaped: gone all the same
        return await _attempt(p.pid).wait_monitor_gone(PATIENCE)

    try:
        assert asyncio.run(main()) is True
        assert slept == [], "the wait polled instead of waiting on the monitor's pidfd"
    finally:
        p.kill()
        p.wait()


def test_a_monitor_that_does_not_exit_is_reported_alive_at_the_deadline() -> None:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        att = _attempt(p.pid)
        assert asyncio.run(att.wait_monitor_gone(0.05)) is False
        assert not att.monitor_gone
    finally:
        p.kill()
        p.wait()


def test_a_monitor_already_gone_is_not_waited_for() -> None:
    p = subprocess.Popen(["true"])
    p.wait()
    att = _attempt(p.pid)
    assert asyncio.run(att.wait_monitor_gone(PATIENCE)) is True
    assert att.monitor_gone
