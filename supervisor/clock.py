"""Time for the core: one injectable clock.

Decisions (deadlines, windows, backoff, uptime, stalls) use :meth:`Clock.monotonic`, which an NTP
step or a changed time zone cannot move; wall time (:meth:`Clock.time`) is only for timestamps
shown to people and written to the journal. Tests pass a :class:`FakeClock` and advance it.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def time(self) -> float: ...


class SystemClock:
    """The machine's clocks. ``monotonic`` is CLOCK_MONOTONIC, shared by every process of the boot,
    so a monitor's recorded start time means the same to the next supervisor."""

    monotonic = staticmethod(time.monotonic)
    time = staticmethod(time.time)


class FakeClock:
    """A clock that moves only when told to (both readings move together)."""

    def __init__(self, start: float = 1000.0, wall: float = 1_790_000_000.0):
        self._mono = start
        self._wall = wall

    def monotonic(self) -> float:
        return self._mono

    def time(self) -> float:
        return self._wall

    def advance(self, seconds: float) -> None:
        self._mono += seconds
        self._wall += seconds

    def step_wall(self, seconds: float) -> None:
        """An NTP step: wall time jumps, monotonic time does not."""
        self._wall += seconds
