"""Watching the monitors: each attempt's monitor process (a pidfd on the loop) and its record file.

A monitor that exits, or whose record changes, is reported to its component
(:meth:`~rlsup.supervisor.run.component.Component.monitor_changed`); the run only says which record
file changed (inotify or polling, :mod:`~rlsup.supervisor.run.filewatch`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from ..monitor.process import AttemptProcesses, pid_alive
from .tracking import reap_held

if TYPE_CHECKING:
    from .component import Component


class MonitorWatch:
    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None  # the run's, once it runs
        self._by_pidfd: dict[int, tuple[Component, AttemptProcesses]] = {}
        self._by_record: dict[str, tuple[Component, AttemptProcesses]] = {}

    def records(self) -> list[str]:
        """The names of the record files watched."""
        return list(self._by_record)

    def watch(self, comp: Component, att: AttemptProcesses) -> None:
        assert self.loop is not None
        self._by_record[att.record_path.name] = (comp, att)
        fd = att.open_pidfd()
        if fd is not None:
            self._by_pidfd[fd] = (comp, att)
            self.loop.add_reader(fd, self._exited, fd)
        elif not pid_alive(att.monitor_pid):
            self.loop.call_soon(comp.monitor_changed, att, True)
        # The record may have changed before the watch existed (a very short command).
        self.loop.call_soon(self.record_changed, att.record_path.name)

    def unwatch(self, att: AttemptProcesses) -> None:
        """Forget an attempt's monitor before its pidfd is closed (a reused fd number must not be taken
        for it later)."""
        self._by_record.pop(att.record_path.name, None)
        if att.pidfd is not None and self._by_pidfd.pop(att.pidfd, None) is not None:
            self._remove_reader(att.pidfd)

    def _exited(self, fd: int) -> None:
        comp, att = self._by_pidfd.pop(fd)
        self._remove_reader(fd)
        reap_held(att.monitor_pid)  # the monitor (our child: we are its subreaper), and whoever else has ended
        att.monitor_gone = True
        self._by_record.pop(att.record_path.name, None)
        if att.exit is None:
            comp.monitor_changed(att, gone=True)

    def record_changed(self, name: str) -> None:
        if (hit := self._by_record.get(name)) is not None:
            hit[0].monitor_changed(hit[1])

    def close(self) -> None:
        for fd in list(self._by_pidfd):
            self._remove_reader(fd)

    def _remove_reader(self, fd: int) -> None:
        if self.loop is not None:
            with contextlib.suppress(ValueError, RuntimeError):
                self.loop.remove_reader(fd)
