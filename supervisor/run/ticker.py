"""The run's tick, planned: a loop that sleeps until the next tick is due, and can be woken to plan again.

The run says when its next tick is due (:func:`~.detectors.next_tick`: every second while something
needs watching, else only when something is due) and what a tick does; a change (a component's
state, the clients watching) pokes the nap so that the tick is planned again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..records.clock import Clock


class Ticker:
    """The tick's plan and nap, and the times (the clock's monotonic) the run's tick keeps: when it last ran
    (``last``), since when the supervisor has been awake (``awake_since``: a pause of its own is not the
    components' fault), when its health sweep is due next (``health_due``) and when log positions were last
    written (``positions_written``)."""

    def __init__(self, clock: Clock, plan: Callable[[], float], tick: Callable[[float], None]):
        self.clock = clock
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
            if wait > 0 and await self._sleep(wait):
                continue  # woken early by a change: plan again
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
