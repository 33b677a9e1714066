"""The run's side of ``dependency_down``: how long each dependency has been down, and who is flagged for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..diagnosis import DependencyTracker


class DependencyDown:
    """``tracker`` (:class:`~rlsup.supervisor.diagnosis.DependencyTracker`): each dependency's down episode and
    what was done about it; ``flagged``: the consumers flagged as failing to reach a dependency that is down."""

    def __init__(self, *, budget_s: float, clock: Callable[[], float]) -> None:
        from ..diagnosis import DependencyTracker  # at first use, as the run always did

        self.tracker: DependencyTracker = DependencyTracker(budget_s=budget_s, clock=clock)
        self.flagged: set[str] = set()

    @property
    def watched(self) -> bool:
        """Whether a dependency is down or a consumer flagged (the run ticks every second meanwhile)."""
        return bool(self.flagged) or bool(self.tracker.down_since())
