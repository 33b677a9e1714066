"""Watching the run dir's files: component logs to read, monitor records that changed; :class:`Watching`, all the
run's watches together.

inotify on ``logs/`` and ``monitors/`` where it can (one read of the kernel's queue serves every
component), polling every ``POLL_S`` where it cannot (``RLSUP_INOTIFY=off``, no inotify). After a
productive read, output is let pile up for ``READ_PAUSE_S`` before the next: with many chatty
components one wakeup then serves them all (fewer, larger reads). The monitors drain the pipes
meanwhile, so this delays only what clients see, by less than the TUI's 20 Hz redraw; exits are read
at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..rundir.inotify import IN_CLOSE_WRITE, IN_CREATE, IN_MODIFY, IN_MOVED_TO, IN_Q_OVERFLOW, Inotify
from ..rundir.layout import RunPaths
from .daemonlog import say
from .monitorwatch import MonitorWatch

if TYPE_CHECKING:
    from .component import Component
    from .ticker import Lateness

POLL_S = 0.5  # where inotify is unavailable
READ_PAUSE_S = 0.015


class FileWatch:
    def __init__(self, loop: asyncio.AbstractEventLoop, paths: RunPaths, components: Mapping[str, Component],
                 monitors: MonitorWatch, late: Lateness | None = None):
        self.loop = loop
        self.late = late  # told how late each round of reads after a pause ran
        self.paths = paths
        self.components = components
        self.monitors = monitors
        self._inotify: Inotify | None = None
        self._read_pending: set[str] = set()
        self._read_paused = False
        self._dirs = (str(paths.logs), str(paths.monitors))  # compared on every batch of events
        self._log_names = {os.fsencode(paths.log(n).name): n for n in components}

    def start(self) -> None:
        try:
            ino = Inotify()
            ino.watch(str(self.paths.logs), IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE)
            ino.watch(str(self.paths.monitors), IN_MODIFY | IN_MOVED_TO | IN_CLOSE_WRITE)
        except OSError as e:
            say(f"rlsup: inotify unavailable ({e}); polling logs every {POLL_S:g}s")
            self.loop.call_later(POLL_S, self._poll)
            return
        self._inotify = ino
        for c in self.components.values():
            c.follower.rotation_events = True  # inotify says when a log is created anew: no stat per read
        self.loop.add_reader(ino.fd, self._on_inotify)
        self._read_pending.update(self.components)
        self.loop.call_soon(self._read_logs)

    def _poll(self) -> None:
        self._read_pending.update(self.components)
        self._read_logs()
        for name in self.monitors.records():
            self.monitors.record_changed(name)
        if self._inotify is None and not self.loop.is_closed():  # polling lasts as long as the run
            self.loop.call_later(POLL_S, self._poll)

    def _on_inotify(self) -> None:
        assert self._inotify is not None
        records_changed: set[str] = set()
        for d, mask, raw in self._inotify.read():
            if mask & IN_Q_OVERFLOW:
                self._read_pending.update(self.components)
                records_changed.update(self.monitors.records())
            elif d == self._dirs[0]:
                self._log_changed(raw, mask)
            elif d == self._dirs[1]:
                records_changed.add(os.fsdecode(raw))
        for name in records_changed:
            self.monitors.record_changed(name)
        if self._read_pending and not self._read_paused:
            self._read_logs()

    def _log_changed(self, raw: bytes, mask: int) -> None:
        comp = self._log_names.get(raw)
        if comp is None:  # X.log.1 (a rotation) or a file of no component
            comp = os.fsdecode(raw).split(".log", 1)[0]
            if comp not in self.components:
                return
        self._read_pending.add(comp)
        if not mask & IN_MODIFY:  # created or renamed: the log may have rotated
            self.components[comp].follower.maybe_rotated = True

    def _read_logs(self) -> None:
        pending, self._read_pending = self._read_pending, set()
        for n in pending:
            c = self.components.get(n)
            if c is not None and c.read_output():
                self._read_pending.add(n)  # more than one round's budget waiting: again after the pause
        if pending:  # a productive round: let output pile up briefly, then read it in one go
            self._read_paused = True
            if self._inotify is not None:  # events queue in the kernel meanwhile: one read gets them all
                self.loop.remove_reader(self._inotify.fd)
            self.loop.call_later(READ_PAUSE_S, self._resume_reading, self.loop.time() + READ_PAUSE_S)

    def _resume_reading(self, due: float) -> None:
        if self.late is not None:
            self.late.ran(self.loop.time() - due)
        self._read_paused = False
        if self._inotify is not None and self._inotify.fd >= 0:
            self.loop.add_reader(self._inotify.fd, self._on_inotify)
            self._on_inotify()  # what queued during the pause
        elif self._read_pending:
            self._read_logs()

    def close(self) -> None:
        if self._inotify is not None:
            with contextlib.suppress(ValueError, RuntimeError):
                self.loop.remove_reader(self._inotify.fd)
            self._inotify.close()


class Watching:
    """The run's watches: ``monitors`` from the start, ``files`` and ``artefacts`` once :meth:`start` ran."""

    def __init__(self) -> None:
        self.monitors = MonitorWatch()
        self.files: FileWatch | None = None
        self.artefacts: Any = None  # rundir.watches.Watches

    def start(self, loop: asyncio.AbstractEventLoop, paths: RunPaths, components: Mapping[str, Component],
              late: Lateness | None = None) -> None:
        self.files = FileWatch(loop, paths, components, self.monitors, late)
        self.files.start()
        from ..rundir.watches import Watches

        self.artefacts = Watches(components, loop)
        self.artefacts.start()

    def close(self) -> None:
        """The log and record watches and the monitors' pidfds closed."""
        if self.files is not None:
            self.files.close()
        self.monitors.close()


def read_all(components: Mapping[str, Component]) -> None:
    """Read every component's log to its end."""
    for c in components.values():
        while c.read_output():
            pass
