"""The journal's fsync, shared by every event of one turn of the loop and run in the pool.

An event is written at once (a kill -9 of the supervisor loses nothing written); its fsync is shared by every
event of this turn of the loop (a restart journals four: one sync, not four) and runs in the pool, one at a
time: the loop goes on meanwhile (a restart does not wait for the disk).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..rundir.journal import Journal


class JournalSync:
    """The run's journal with its fsyncs: due this turn of the loop, in flight, wanted once more after it."""

    def __init__(self, journal: Journal, loop: asyncio.AbstractEventLoop) -> None:
        self.journal = journal
        self.loop = loop
        self._scheduled = False  # the fsync of this turn of the loop is due
        self._syncing: asyncio.Future[None] | None = None  # the fsync in flight (in the pool)
        self._again = False  # events were written while it was: one more fsync once it is done

    def append(self, e: dict[str, Any], *, sync: bool) -> None:
        """Write ``e``; with ``sync``, its fsync follows in this turn of the loop (shared, in the pool)."""
        if not sync or self.loop.is_closed():
            self.journal.append(e, sync=sync)
            return
        self.journal.append(e, sync=False)
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._sync)

    def _sync(self) -> None:
        self._scheduled = False
        self.journal.flush(sync=False)  # what waits for a disk that refused it, first
        if self._syncing is not None:  # one fsync at a time: another once the one in flight is done
            self._again = True
            return
        try:
            self._syncing = self.loop.run_in_executor(None, self.journal.sync)
        except RuntimeError:  # the pool is shut down (the run is ending): here, then
            self.journal.sync()
            return
        self._syncing.add_done_callback(self._synced)

    def _synced(self, fut: asyncio.Future[None]) -> None:
        self._syncing = None
        if self._again:
            self._again = False
            self._sync()
