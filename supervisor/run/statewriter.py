"""What the run writes into its run dir: each event into the journal at once (its fsync shared by the turn of the
loop), and state.json kept up to date: the run's state as of now, written in place, often but
never too often.

A change marks the state dirty; the write follows at most twice a second and never takes more than
about a tenth of the loop's time (a thousand components make one write cost tens of milliseconds).
Each write also retries what the journal could not write while the disk was full, says how many
events were lost once it has room again, and puts back the spare monitor records a full disk used. Whether the
run dir takes writes at all (a read-only or failing file system) is checked on the run's health sweep
(:meth:`StateWriter.check_writable`), flagged when it changes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from ..records import events as ev
from ..rundir.journal import Journal, StateFile, keep_spare_records
from ..rundir.layout import RunPaths
from . import health


def encode(state: dict[str, Any]) -> bytes:
    """state.json's text: one line per component (and per other top-level key), each by json's C encoder;
    ``indent=`` makes json encode in Python, about 5 times slower (a second a write at 2,000 components)."""
    def line(key: str, value: Any) -> str:
        return f"{json.dumps(key)}: {json.dumps(value, default=str)}"
    parts = []
    for k, v in state.items():
        if k == "components" and isinstance(v, dict):
            inner = ",\n".join(f"  {line(n, c)}" for n, c in v.items())
            parts.append(f"{json.dumps(k)}: {{\n{inner}\n }}" if v else line(k, v))
        else:
            parts.append(line(k, v))
    return ("{\n " + ",\n ".join(parts) + "\n}\n").encode()


class StateWriter:
    def __init__(self, paths: RunPaths, snapshot: Callable[[], dict[str, Any]],
                 emit: Callable[[ev.Event], object]):
        self.paths = paths
        self.snapshot = snapshot  # the state to write (with each component's log position)
        self.emit = emit
        self.file = StateFile(paths.state)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.journal: Journal | None = None
        self._sync_due = False  # the journal's fsync of this turn of the loop is due
        self._syncing: asyncio.Future[None] | None = None  # the fsync in flight (in the pool)
        self._sync_again = False  # events were written while it was: one more fsync once it is done
        self.spares_wanted = 2  # spare monitor records kept for a full disk
        self.dirty = False
        self._written_at = 0.0
        self._cost = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.error: OSError | None = None  # the last write's, None once one worked
        self.trouble: str | None = None  # why the run dir takes no writes (health.disk_trouble)

    def begin(self, loop: asyncio.AbstractEventLoop, journal: Journal) -> Journal:
        """The run's loop has begun, and its journal is open."""
        self.loop, self.journal = loop, journal
        return journal

    def append(self, e: dict[str, Any], *, sync: bool) -> None:
        """``e`` written to the journal now; with ``sync``, its fsync follows in this turn of the loop (shared, in
        the pool)."""
        assert self.journal is not None and self.loop is not None  # the run emits to the journal once begun
        if not sync or self.loop.is_closed():
            self.journal.append(e, sync=sync)
            return
        self.journal.append(e, sync=False)
        if not self._sync_due:
            self._sync_due = True
            self.loop.call_soon(self._sync)

    def _sync(self) -> None:
        assert self.journal is not None and self.loop is not None
        self._sync_due = False
        self.journal.flush(sync=False)  # what waits for a disk that refused it, first
        if self._syncing is not None:  # one fsync at a time: another once the one in flight is done
            self._sync_again = True
            return
        try:
            self._syncing = self.loop.run_in_executor(None, self.journal.sync)
        except RuntimeError:  # the pool is shut down (the run is ending): here, then
            self.journal.sync()
            return
        self._syncing.add_done_callback(self._synced)

    def _synced(self, fut: asyncio.Future[None]) -> None:
        self._syncing = None
        if self._sync_again:
            self._sync_again = False
            self._sync()

    def mark_dirty(self) -> None:
        self.dirty = True
        if self._timer is None and self.loop is not None:
            every = max(0.5, 10 * self._cost)
            delay = max(0.0, every - (time.monotonic() - self._written_at))
            self._timer = self.loop.call_later(delay, self.write)

    def write(self, force: bool = False) -> None:
        self._timer = None
        if not self.dirty and not force:
            return
        self.dirty = False
        t0 = self._written_at = time.monotonic()
        self._catch_up_journal()
        try:
            self.file.write(encode(self.snapshot()))
            self.error = None
        except OSError as e:
            self.error = e  # disk trouble is flagged (the monitors, the run's health sweep); state.json catches up later
        keep_spare_records(self.paths.monitors, self.spares_wanted)  # those used on a full disk, again
        self._cost = time.monotonic() - t0

    def check_writable(self) -> None:
        """Whether the run dir takes writes (:func:`health.disk_trouble`): flagged when that changes."""
        trouble = health.disk_trouble(self.paths.root, [self.journal.error if self.journal else None, self.error])
        if trouble == self.trouble:
            return
        was, self.trouble = self.trouble, trouble
        if trouble is not None:
            self.emit(ev.FlagRaised(None, type="disk_unwritable", message=trouble, evidence=[trouble],
                                    action=health.FLAG_ACTION))
        elif was is not None:
            self.emit(ev.FlagCleared(None, type="disk_unwritable",
                                     message=f"{self.paths.root} takes writes again; what waited was written"))

    def _catch_up_journal(self) -> None:
        """A disk that had no room may have room again: write what waited, and say what was lost."""
        j = self.journal
        if j is None:
            return
        if j.pending:
            j.flush()
        if not j.pending and j.unsaid:
            n = j.take_unsaid()
            self.emit(ev.FlagRaised(None, type="journal_gap", message=(
                f"{n} events could not be written to {self.paths.events} while the disk was full (the "
                "oldest pending ones were dropped); their effect is in state.json")))
