"""The run's tick, planned, and its evaluations paced.

The tick: a loop that sleeps until the next tick is due, and can be woken to plan again. The run says when
its next tick is due (:func:`~.detectors.next_tick`: every second while something needs watching, else
only when something is due) and what a tick does; a change (a component's state, the clients watching)
pokes the nap so that the tick is planned again.

The evaluations (:class:`EvaluationPacing`), when the run judges every component again (dependencies, the
end): one evaluation looks at every component, so a burst of changes (a thousand components starting or
ending one after the other) is judged in batches, not once per change, and evaluations take at most about
a fifth of the loop's time. The components' progress is batched the same way: folded into the state every
:data:`PROGRESS_FLUSH_S`, not once per line that moved it.

How late (:class:`Lateness`): each of that scheduled work (the tick, an evaluation, a round of log reads after its
pause) says how long after its due time it ran; over the last :data:`LATE_OVER_S` that is the supervisor's own lag,
which ``rlsup status --json`` shows as ``run.ticks`` (a component's output waits for the supervisor that long).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from ..records.clock import Clock

EVALUATE_EVERY_S = 0.05  # at most this often, the run re-judges every component (dependencies, the end)
PROGRESS_FLUSH_S = 0.25
LATE_OVER_S = 30.0  # run.ticks: the lateness of what ran over the last this many seconds
LATE_KEPT = 4096  # at most this many of them (a round of log reads runs up to ~60 times a second)


class Lateness:
    """How late the run's scheduled work ran against its due time, the last :data:`LATE_KEPT` times (``clock``: the
    run's, whose monotonic time says when each ran)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._ran: deque[tuple[float, float]] = deque(maxlen=LATE_KEPT)  # (when, seconds late)

    def ran(self, late: float) -> None:
        """Something due ran ``late`` seconds after its due time (on its own clock; below zero: on time)."""
        self._ran.append((self.clock.monotonic(), max(0.0, late)))

    def summary(self) -> dict[str, float | int]:
        """Over the last :data:`LATE_OVER_S`: how many ran, and the median, 90th percentile and most late (ms)."""
        since = self.clock.monotonic() - LATE_OVER_S
        return late_summary([late for at, late in self._ran if at >= since])


def late_summary(late: list[float]) -> dict[str, float | int]:
    """``{"count", "over_s", "late_p50_ms", "late_p90_ms", "late_max_ms"}`` of ``late`` (seconds; 0s when empty)."""
    xs = sorted(late)
    n = len(xs)

    def ms(x: float) -> float:
        return round(1000.0 * x, 1)

    return {"count": n, "over_s": LATE_OVER_S, "late_p50_ms": ms(xs[n // 2]) if n else 0.0,
            "late_p90_ms": ms(xs[min(n - 1, n * 9 // 10)]) if n else 0.0, "late_max_ms": ms(xs[-1]) if n else 0.0}


class Ticker:
    """The tick's plan and nap, and the times (the clock's monotonic) the run's tick keeps: when it last ran
    (``last``), since when the supervisor has been awake (``awake_since``: a pause of its own is not the
    components' fault), when its health sweep is due next (``health_due``) and when log positions were last
    written (``positions_written``); the pace of the run's evaluations (``pacing``); how late it all ran
    (``late``, shared with the pacing and the log reads)."""

    def __init__(self, clock: Clock, plan: Callable[[], float], tick: Callable[[float], None],
                 pacing: EvaluationPacing):
        self.clock = clock
        self.pacing = pacing
        self.late = pacing.late
        self.plan = plan  # when the next tick is due (the clock's monotonic time)
        self.tick = tick  # called with the time it was planned for
        self.nap_until = 0.0  # when the ticker plans to wake
        self.last = 0.0
        self.awake_since = 0.0
        self.health_due = 0.0
        self.positions_written = 0.0
        self._nap: asyncio.Future[bool] | None = None

    async def run(self) -> None:
        while True:
            planned = self.plan()
            wait = planned - self.clock.monotonic()
            self.nap_until = planned
            if wait > 0:
                if await self._sleep(wait):
                    continue  # woken early by a change: plan again
                self.late.ran(self.clock.monotonic() - planned)  # (not a tick planned again into the past)
            self.tick(planned)

    async def _sleep(self, seconds: float) -> bool:
        """Sleep ``seconds``; True when :meth:`poke` ended the nap early."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self._nap = fut
        timer = loop.call_later(seconds, lambda: None if fut.done() else fut.set_result(False))
        try:
            return await fut
        finally:
            timer.cancel()
            self._nap = None

    def poke(self, earliest: float) -> None:
        """Plan the next tick again, unless it is already due at ``earliest`` (it can come no sooner)."""
        fut = self._nap
        if fut is not None and not fut.done() and self.nap_until > earliest:
            fut.set_result(True)


class EvaluationPacing:
    """Whether an evaluation is planned, and when the last one ended and what it cost; the components whose
    progress waits to be folded in (``flush_progress`` folds them); how late the run's work ran (``late``, on the
    run's ``clock``)."""

    def __init__(self, evaluate: Callable[[], None], flush_progress: Callable[[set[str]], None], clock: Clock) -> None:
        self.evaluate = evaluate
        self.late = Lateness(clock)
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
        delay = max(0.0, every - (loop.time() - self._at))
        loop.call_later(delay, self._evaluate, loop.time() + delay, loop)

    def _evaluate(self, due: float, loop: asyncio.AbstractEventLoop) -> None:
        self.late.ran(loop.time() - due)
        self.evaluate()

    def done(self, *, cost: float, at: float) -> None:
        """An evaluation ended at loop time ``at``, after ``cost`` seconds."""
        self._cost = cost
        self._at = at
