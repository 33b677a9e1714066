"""What the run remembers for its step (:mod:`~rlsup.supervisor.rules.runstep`) beyond its components' lives."""

from __future__ import annotations

from typing import Any

from .dependencydown import DependencyDown


class StepMemory:
    """``run_seq``: the seq of this run's ``run_started`` (the cause of first starts); ``final_at``: when each
    component reached a final state (monotonic); ``again``: the completed components a resumed run starts again,
    each with its attempt then (its next start says so, until it has started); ``triggers``: journaled events other
    components react to (``restart_scheduled``: restart_with), acted on once the step that emitted them is done;
    ``order``: the components in dependency order, once asked for; ``deps``: the dependency_down detector's
    episodes (:class:`~.dependencydown.DependencyDown`)."""

    def __init__(self, deps: DependencyDown) -> None:
        self.deps = deps
        self.run_seq: int | None = None
        self.final_at: dict[str, float] = {}
        self.again: dict[str, int] = {}
        self.triggers: list[dict[str, Any]] = []
        self.order: list[str] | None = None

    def starts_again(self, name: str, attempt: int) -> bool:
        """Whether ``name`` at ``attempt`` is a completed component that the resumed run starts again."""
        return name in self.again and attempt == self.again[name]
