"""What the run dir held when this supervisor came (read once, by :meth:`Run.prepare`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import carryover
from .adoption import Found


@dataclass
class Past:
    """The run dir's past: what a previous supervisor left (``found``: attempts to adopt, leftovers), the
    state its journal replays to (``replayed``; None: no journal yet), the state.json it saved (``saved``) and
    the journal's damage (``damage``: a note for each kind of damaged line skipped); ``asked``: what the user
    asked of it (``new``, or ``resumed``: `up --resume`)."""

    found: Found = field(default_factory=Found)
    replayed: dict[str, Any] | None = None
    saved: dict[str, Any] = field(default_factory=dict)
    damage: list[str] = field(default_factory=list)
    asked: str = "new"

    @property
    def how(self) -> str:
        """How this run relates to it (``run_started.how``: :func:`.carryover.how`)."""
        return carryover.how(bool(self.found.live), self.replayed is not None, self.asked)

    @property
    def saved_components(self) -> dict[str, Any]:
        """Each component's part of the saved state.json (its log position, gauges)."""
        return (self.saved.get("components") or {}) if self.saved else {}
