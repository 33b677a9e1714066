"""What the run remembers for its step (:mod:`~rlsup.supervisor.rules.runstep`) beyond its components' lives."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..diagnosis import DependencyTracker


class StepMemory:
    """``run_seq``: the seq of this run's ``run_started`` (the cause of first starts); ``final_at``: when each
    component reached a final state (monotonic); ``again``: the completed components a resumed run starts again,
    each with its attempt then (its next start says so, until it has started); ``triggers``: journaled events other
    components react to (``restart_scheduled``: restart_with), acted on once the step that emitted them is done;
    ``order``: the components in dependency order, once asked for. The run's side of ``dependency_down``:
    ``tracker`` (:class:`~rlsup.supervisor.diagnosis.DependencyTracker`), each dependency's down episode and what
    was done about it; ``flagged``: the consumers flagged as failing to reach a dependency that is down."""

    def __init__(self, *, budget_s: float, clock: Callable[[], float]) -> None:
        from ..diagnosis import DependencyTracker  # at first use, as the run always did

        self.tracker: DependencyTracker = DependencyTracker(budget_s=budget_s, clock=clock)
        self.flagged: set[str] = set()
        self.run_seq: int | None = None
        self.final_at: dict[str, float] = {}
        self.again: dict[str, int] = {}
        self.triggers: list[dict[str, Any]] = []
        self.order: list[str] | None = None

    def starts_again(self, name: str, attempt: int) -> bool:
        """Whether ``name`` at ``attempt`` is a completed component that the resumed run starts again."""
        return name in self.again and attempt == self.again[name]
