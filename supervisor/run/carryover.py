"""What a run carries over from its run dir's past: the journal replayed, each component's life and gauges.

A run taken over (``adopted``) or continued after its supervisor died keeps every final state; a
finished run resumed (``--resume``) starts again what had failed or was stopped, not what completed
(unless its config changed since: it completed what the config asked then). The gauges a journal
does not hold (progress, log positions, chart history, latest metrics) come from the last
``state.json``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from ..config.model import Config
from ..records.progress import Observation, ProgressTracker
from ..rules import lifecycle as lc
from ..rundir.layout import RunPaths
from ..rundir.replay import read_run
from .adoption import Found


def replay(paths: RunPaths, cfg: Config) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The previous state of this run dir (the journal folded through the reducer; None if it has no
    events) and the last ``state.json`` (``{}`` if unreadable): the one replay of a run dir
    (:func:`.replay.read_run`), as the report and the archive read it."""
    rp = read_run(paths, cfg.topo_order())
    if not rp.records:
        return None, {}
    return rp.journal_state, rp.saved


def how(adopting: bool, replayed: bool, asked: str) -> str:
    """How this run relates to its run dir's past: ``adopted`` (live monitors taken over),
    ``continued`` (its supervisor died mid-way), else what was asked (``new``, ``resumed``)."""
    if adopting:
        return "adopted"
    return "continued" if replayed and asked == "new" else asked


def life(name: str, prev: Mapping[str, Any], cfg: Config, how: str) -> tuple[lc.Life, int | None]:
    """The life ``name`` goes on with, and (for a completed component a resumed run starts again because
    its config changed) the attempt it had then: its next start says so."""
    keep = {"adopted": lc.FINAL, "continued": lc.FINAL, "resumed": {"completed"}}.get(how, set())
    attempt = int(prev.get("attempt") or 0)
    was = prev.get("state")
    again = None
    if was == "completed" and how == "resumed" and prev.get("config_hash") not in (
            None, cfg.components[name].fingerprint(cfg.env)):
        was, again = None, attempt
    out = lc.Life(name, attempt=attempt)
    if was in keep:
        out = lc.Life(name, state=cast(lc.State, was), attempt=attempt, want="stop" if was == "stopped" else "run")
    if any(f.get("type") == "stall" for f in prev.get("flags") or []) and how in ("adopted", "continued"):
        out = dataclasses.replace(out, episode=out.episode | {"stall"})  # the attempt goes on: so does its stall
    return out, again


def restore_gauges(progress: ProgressTracker, saved: Mapping[str, Any], st: dict[str, Any], now: float) -> None:
    """A component's progress, chart history and latest metrics as ``state.json`` had them; ``st``:
    its entry in the run's state, which shows them."""
    if saved.get("total") is not None and progress.total is None:
        progress.total = int(saved["total"])
    if saved.get("step") is not None:  # an adopted attempt's progress continues from here, reached at a time
        progress.observe_all([Observation(int(saved["step"]), None, {})], now)  # unknown: no rate
    if isinstance(saved.get("history"), dict) and saved["history"]:  # the charts go on with the whole run
        progress.seed_history(saved["history"])
        st["history"] = {k: h.wire() for k, h in progress.full_history.items()}
    if isinstance(saved.get("metrics"), dict) and saved["metrics"]:  # ... and with the latest values
        progress.metrics.update({k: v for k, v in saved["metrics"].items() if isinstance(v, int | float)})
        st["metrics"] = dict(progress.metrics)
        st["metric"] = saved.get("metric")


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
        return how(bool(self.found.live), self.replayed is not None, self.asked)

    @property
    def saved_components(self) -> dict[str, Any]:
        """Each component's part of the saved state.json (its log position, gauges)."""
        return self.saved.get("components") or {}
