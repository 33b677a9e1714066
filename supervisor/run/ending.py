"""The run's end, as it is decided and carried out."""

from __future__ import annotations

import asyncio
from typing import Any

from ..records import events as ev
from ..rules import lifecycle as lc
from ..rules.detectors import Outcome


class Ending:
    """Whether and how the run ends: ``decided`` once its end is decided (an asyncio.Event, made when the loop
    runs), ``stopping`` while its components are being stopped, ``handover`` for an exit that leaves them running
    for the next supervisor, ``requeue`` to requeue the Slurm job once stopped (a preemption on Slurm's notice),
    and ``before``: for a preemption, each asked component's newest checkpoint when it was asked.

    What the ``run_ended`` event says: ``exit_code``, ``outcome`` (events.RUN_OUTCOMES, once the end is decided),
    ``reason``, ``root`` (whose failure ended the run); ``refused``: a check before any start failed (a node blind
    to the run dir): the run journals it and starts nothing."""

    def __init__(self) -> None:
        self.decided: asyncio.Event | None = None
        self.stopping = False
        self.handover = False
        self.requeue = False
        self.before: dict[str, Any] = {}
        self.exit_code = 0
        self.outcome = ""
        self.reason = ""
        self.root: dict[str, Any] | None = None
        self.refused = ""

    @property
    def over(self) -> bool:
        """No run to decide about: its end is decided, or its loop has not begun."""
        return self.decided is None or self.decided.is_set()

    @property
    def ended(self) -> bool:
        """The run decided to end (it may still be stopping); not so for a hand-over."""
        return self.decided is not None and self.decided.is_set() and not self.handover

    def decide(self) -> None:
        if self.decided is not None:
            self.decided.set()

    def request(self, reason: str, *, by_user: bool, preempted: bool) -> None:
        """The end asked for: stopped by a person (``by_user``), failed, or ``preempted``."""
        if by_user or preempted:
            self.exit_code = 0
        self.outcome = "preempted" if preempted else "stopped" if by_user else "failed"
        self.reason = reason

    def reached(self, out: Outcome) -> None:
        """The end the run's step found (every component final, or a failure that ends the run)."""
        self.exit_code, self.outcome, self.reason = out.exit_code, out.how, out.reason
        self.root = {"component": out.root, "reason": out.root_reason} if out.root else None

    def refuse(self) -> ev.RunEnded:
        """The ``run_ended`` of a run refused before any start."""
        self.exit_code, self.reason = 1, self.refused
        return ev.RunEnded(None, exit_code=1, reason=self.refused, outcome="failed")

    def cause(self, reason: str) -> lc.Cause:
        """Why the components are stopped now: the platform's preemption, or the run's shutdown."""
        by: lc.CauseBy = "preemption" if self.outcome == "preempted" else "shutdown"
        return lc.Cause(by, f"the run is ending: {reason}" if reason else "the run is ending")

    def run_ended(self, left: list[str], checkpoints: dict[str, Any] | None) -> ev.RunEnded:
        return ev.RunEnded(None, exit_code=self.exit_code, reason=self.reason, root=self.root, left=left,
                           outcome=self.outcome or ("completed" if self.exit_code == 0 else "failed"),
                           checkpoints=checkpoints)
