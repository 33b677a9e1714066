"""When the run judges every component again (dependencies, the end): one evaluation looks at every component, so
a burst of changes (a thousand components starting or ending one after the other) is judged in batches, not once
per change, and evaluations take at most about a fifth of the loop's time. The components' progress is batched
the same way: folded into the state every :data:`PROGRESS_FLUSH_S`, not once per line that moved it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

EVALUATE_EVERY_S = 0.05  # at most this often, the run re-judges every component (dependencies, the end)
PROGRESS_FLUSH_S = 0.25


class EvaluationPacing:
    """Whether an evaluation is planned, and when the last one ended and what it cost; the components whose
    progress waits to be folded in (``flush_progress`` folds them)."""

    def __init__(self, evaluate: Callable[[], None], flush_progress: Callable[[set[str]], None]) -> None:
        self.evaluate = evaluate
        self.scheduled = False
        self._at = -1e9  # the loop's time when the last evaluation ended
        self._cost = 0.0  # the seconds it took
        self._flush_progress = flush_progress
        self._progress: set[str] = set()

    def progress_moved(self, name: str, loop: asyncio.AbstractEventLoop | None) -> None:
        """``name``'s progress moved: folded in with the others' within :data:`PROGRESS_FLUSH_S`."""
        if not self._progress and loop is not None:
            loop.call_later(PROGRESS_FLUSH_S, self._flush)
        self._progress.add(name)

    def _flush(self) -> None:
        names, self._progress = self._progress, set()
        self._flush_progress(names)

    def schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        """An evaluation at the earliest its pace allows (none more while one is planned)."""
        if self.scheduled:
            return
        self.scheduled = True
        every = max(EVALUATE_EVERY_S, 5 * self._cost)  # at most ~20% of the loop's time
        wait = every - (loop.time() - self._at)
        if wait > 0:
            loop.call_later(wait, self.evaluate)
        else:
            loop.call_soon(self.evaluate)

    def done(self, *, cost: float, at: float) -> None:
        """An evaluation ended at loop time ``at``, after ``cost`` seconds."""
        self._cost = cost
        self._at = at
