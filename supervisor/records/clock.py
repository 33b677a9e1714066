"""Time for the core: one injectable clock.

Decisions (deadlines, windows, backoff, uptime, stalls) use :meth:`Clock.monotonic`, which an NTP
step or a changed time zone cannot move; wall time (:meth:`Clock.time`) is only for timestamps
shown to people and written to the journal. Tests pass a clock of their own and advance it.
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

