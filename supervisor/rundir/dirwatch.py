"""The newest step in a directory (``rollouts/step_12``, ``checkpoints/global_step_40``), watched on
the supervisor's loop.

One inotify descriptor serves every watched directory of the run, read from the loop like the log
watches (:mod:`~rlsup.supervisor.rundir.inotify`): no thread per directory and no periodic wake-up, so a
run that watches nothing new costs nothing. A change is debounced (``DEBOUNCE_S``), then the
directory is scanned (:func:`~rlsup.supervisor.rundir.artifacts.scan_newest`) on one thread of its own (a
hung network file system stalls the watches, never the loop or the run's other blocking work) and
``on_change(step, mtime)`` is called on the loop when the newest (step, mtime) differs from the
last one reported.

Only a directory's own entries are watched (not recursively). A directory that does not exist yet
is found through its nearest existing ancestor; one that is removed reports ``(None, None)`` and
is looked for again the same way; one replaced by another (a new inode) is watched anew. Where
inotify is unavailable or its limits are reached, that directory is scanned every ``POLL_S``
instead, and :attr:`DirWatch.error` says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from .artifacts import compile_step_pattern, scan_newest
from .inotify import (
    IN_ATTRIB,
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_Q_OVERFLOW,
    Inotify,
)

log = logging.getLogger(__name__)

DEBOUNCE_S = 0.3  # a burst of changes (a checkpoint's files landing) is one scan
POLL_S = 5.0  # where inotify cannot watch a directory
MASK = (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF
        | IN_MOVE_SELF)

OnChange = Callable[[int | None, float | None], None]
Identity = tuple[tuple[Path, ...], tuple[int, int] | None]
Looked = tuple[tuple[int | None, float | None], Identity]


class DirWatch:
    """One watched directory: what to watch for it now, which events concern it, the last value."""

    def __init__(self, path: str | Path, pattern: str = r"(?P<step>\d+)", on_change: OnChange | None = None):
        self.path = Path(path).expanduser().absolute()
        self.rx = compile_step_pattern(pattern)
        self.on_change = on_change
        self.newest: tuple[int | None, float | None] = (None, None)
        self.reported = False
        self.error: str | None = None  # why it is polled instead of watched (inotify limits, permissions)
        self.setup: Identity = ((), None)

    def identity(self) -> Identity:
        """What to watch now: the directory and its parent (where its own removal or replacement shows),
        or else its nearest existing ancestor; and the directory's inode (a replacement is a new one)."""
        with contextlib.suppress(OSError):
            st = self.path.stat()
            if stat.S_ISDIR(st.st_mode):
                parent = self.path.parent
                return ((self.path, parent) if parent != self.path else (self.path,)), (st.st_dev, st.st_ino)
        anc = self.path.parent
        while not anc.is_dir() and anc != anc.parent:
            anc = anc.parent
        return (anc,), None

    def concerns(self, directory: str, name: bytes) -> bool:
        """Whether an event in ``directory`` on entry ``name`` can change the answer: an entry of the
        directory, the directory itself, or a directory on the way to it."""
        if directory == str(self.path):
            return True
        entry = Path(directory) / os.fsdecode(name) if name else Path(directory)
        return entry == self.path or entry in self.path.parents

    def report(self, value: tuple[int | None, float | None]) -> None:
        """Record a scan's answer; tell ``on_change`` when it is new (errors are logged, not raised)."""
        if self.reported and value == self.newest:
            return
        self.newest, self.reported = value, True
        if self.on_change is not None:
            try:
                self.on_change(*value)
            except Exception:  # a broken consumer must not end the watch
                log.exception("on_change for %s failed", self.path)


class DirWatches:
    """Every :class:`DirWatch` of a run, on one event loop and one inotify descriptor."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.watches: list[DirWatch] = []
        self._ino: Inotify | None = None
        self._ino_error: str | None = None
        self._queue: queue.SimpleQueue[DirWatch | None] | None = None  # the scanning thread's, once it runs
        self._due: dict[int, asyncio.TimerHandle] = {}  # id(watch) -> its debounced scan
        self._scanning: set[int] = set()
        self._again: set[int] = set()  # changed while being scanned: scan once more after
        self._closed = False

    def add(self, watch: DirWatch) -> DirWatch:
        """Watch ``watch.path`` from now on; its first value is reported after a first scan (the
        directory is looked at on the scanning thread only, never on the loop)."""
        self.watches.append(watch)
        self._scan_soon(watch, 0.0)
        return watch

    def close(self) -> None:
        self._closed = True
        for h in self._due.values():
            h.cancel()
        self._due.clear()
        if self._ino is not None:
            with contextlib.suppress(ValueError, RuntimeError):
                self.loop.remove_reader(self._ino.fd)
            self._ino.close()
            self._ino = None
        if self._queue is not None:
            self._queue.put(None)

    # -- inotify

    def _inotify(self) -> Inotify | None:
        if self._ino is None and self._ino_error is None:
            try:
                self._ino = Inotify()
            except OSError as e:
                self._ino_error = str(e)
                return None
            self.loop.add_reader(self._ino.fd, self._on_events)
        return self._ino

    def _arm(self, watch: DirWatch, identity: Identity) -> None:
        """Watch what ``watch`` needs now (a directory already watched for another keeps its watch)."""
        watch.setup = identity
        ino = self._inotify()
        try:
            if ino is None:
                raise OSError(self._ino_error or "inotify unavailable")
            for p in watch.setup[0]:
                ino.watch(str(p), MASK)
            watch.error = None
        except OSError as e:
            if watch.error is None:
                log.warning("watching %s failed (%s); scanning it every %gs", watch.path, e, POLL_S)
            watch.error = str(e)

    def _on_events(self) -> None:
        assert self._ino is not None
        events = list(self._ino.read())
        for w in self.watches:
            if any(mask & IN_Q_OVERFLOW or w.concerns(directory, name) for directory, mask, name in events):
                self._scan_soon(w, DEBOUNCE_S)

    # -- scans

    def _scan_soon(self, watch: DirWatch, delay: float) -> None:
        key = id(watch)
        if self._closed or key in self._due:
            return
        if key in self._scanning:
            self._again.add(key)
            return
        self._due[key] = self.loop.call_later(delay, self._scan, watch)

    def _scan(self, watch: DirWatch) -> None:
        key = id(watch)
        self._due.pop(key, None)
        self._scanning.add(key)
        if self._queue is None:
            self._queue = queue.SimpleQueue()
            threading.Thread(target=_scan_thread, args=(self.loop, self._queue, self._scanned), name="rlsup-dirscan",
                             daemon=True).start()
        self._queue.put(watch)

    def _scanned(self, watch: DirWatch, looked: Looked | None) -> None:
        key = id(watch)
        self._scanning.discard(key)
        if self._closed:
            return
        value, identity = looked if looked is not None else ((None, None), watch.setup)
        if identity != watch.setup:
            # First seen, or created, removed or replaced since: watch what is there now, and look
            # again (what appeared between the scan and the new watch would otherwise be missed).
            self._arm(watch, identity)
            self._again.add(key)
        watch.report(value)
        if key in self._again:
            self._again.discard(key)
            self._scan_soon(watch, 0.0)
        elif watch.error is not None:
            self._scan_soon(watch, POLL_S)


def _scan_thread(loop: asyncio.AbstractEventLoop, todo: queue.SimpleQueue[DirWatch | None],
                 done: Callable[[DirWatch, Looked | None], None]) -> None:
    """The scanning thread (a daemon: a hung file system holds it, never the process's exit)."""
    while (watch := todo.get()) is not None:
        try:  # the newest step, and what to watch for it
            looked: Looked | None = (scan_newest(watch.path, watch.rx), watch.identity())
        except Exception:  # noqa: BLE001 - reported as "nothing there"
            looked = None
        try:
            loop.call_soon_threadsafe(done, watch, looked)
        except RuntimeError:  # the loop is closed: the run is over
            return
