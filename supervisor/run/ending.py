"""The run's end, as it is decided and carried out."""

from __future__ import annotations

import asyncio
from typing import Any


class Ending:
    """Whether and how the run ends: ``decided`` once its end is decided (an asyncio.Event, made when the loop
    runs), ``stopping`` while its components are being stopped, ``handover`` for an exit that leaves them running
    for the next supervisor, ``requeue`` to requeue the Slurm job once stopped (a preemption on Slurm's notice),
    and ``before``: for a preemption, each asked component's newest checkpoint when it was asked."""

    def __init__(self) -> None:
        self.decided: asyncio.Event | None = None
        self.stopping = False
        self.handover = False
        self.requeue = False
        self.before: dict[str, Any] = {}

    @property
    def over(self) -> bool:
        """No run to decide about: its end is decided, or its loop has not begun."""
        return self.decided is None or self.decided.is_set()

    def decide(self) -> None:
        if self.decided is not None:
            self.decided.set()
