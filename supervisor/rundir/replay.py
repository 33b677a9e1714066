"""A run dir read back: its journal once, as typed records, folded through the reducer.

One reading serves every reader of a run dir that no one is writing to from here: the report, the
archive (an ended run served read-only, ``how_it_ended``) and a supervisor taking a run dir over.
The journal decides lifecycle fields; ``state.json`` supplies only what the journal does not hold
(gauges: progress, checkpoint, GPU and host samples), so a ``state.json`` a crash left behind
cannot contradict it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..records import state as state_mod
from ..records.events import Record, RunEnded, RunStarted, SupervisorExited, parse
from .journal import last_event, read_records
from .layout import RunPaths, read_json_object

# Gauges that state.json holds and the journal does not (progress is latest-wins, never journaled).
GAUGE_KEYS = (*state_mod.PROGRESS_KEYS, "resources", "history")
HOST_KEYS = ("gpus", "host", "gpu_backend", "gpu_reason")


def handing_over(path: Path, now: float, within_s: float) -> bool:
    """Whether the journal's newest event is a supervisor handing the run over (``rlsup restart-supervisor``:
    ``supervisor_exited``, the components left running) less than ``within_s`` ago: its successor is starting,
    though for a moment no supervisor holds the run dir."""
    newest = last_event(path)
    rec = parse(newest) if newest is not None else None
    return rec is not None and isinstance(rec.event, SupervisorExited) and now - rec.ts < within_s


@dataclass
class Replay:
    """What a run dir holds: its records in order, the journal's state, ``state.json``."""

    paths: RunPaths
    records: list[Record]
    journal_state: dict[str, Any]  # the journal through the reducer, nothing else
    saved: dict[str, Any] = field(default_factory=dict)

    @property
    def seq(self) -> int:
        return max((r.seq for r in self.records), default=0)

    @property
    def last_run(self) -> tuple[Record | None, Record | None]:
        """The last ``run_started`` and the ``run_ended`` after it (None: it goes on, or its
        supervisor died, or it was handed over to its monitors)."""
        start: Record | None = None
        end: Record | None = None
        for r in self.records:
            if isinstance(r.event, RunStarted):
                start, end = r, None
            elif isinstance(r.event, RunEnded):
                end = r
            elif isinstance(r.event, SupervisorExited):
                end = None  # the run goes on under its monitors
        return start, end

    def final_state(self, *, keep_rates: bool = False) -> dict[str, Any]:
        """The run's state as it stood at the end of what was written: the journal's state with the
        gauges of ``state.json`` (a copy). ``keep_rates``: keep the last rate and ETA (a live run's
        report); without, they go (no supervisor measures them any more)."""
        st = copy.deepcopy(self.journal_state)
        comps = self.saved.get("components")
        for name, c in (comps if isinstance(comps, dict) else {}).items():
            if isinstance(c, dict):
                _merge_gauges(st["components"].setdefault(name, state_mod.new_component()), c, bool(self.records))
        if not keep_rates:
            for c in st["components"].values():
                c.update(rate=None, eta_s=None)
        st.update({k: self.saved[k] for k in HOST_KEYS if self.saved.get(k) is not None})
        return st


def _merge_gauges(mine: dict[str, Any], saved: dict[str, Any], journaled: bool) -> None:
    """One component's gauges from ``state.json``; an exit seen later than the last state write
    still counts for the step. With no journal at all, ``state.json`` is all there is."""
    mine.update({k: saved[k] for k in GAUGE_KEYS if saved.get(k) is not None})
    last_exit_step = (mine.get("last_exit") or {}).get("step")
    if last_exit_step is not None and (mine.get("step") is None or last_exit_step > mine["step"]):
        mine["step"] = last_exit_step
    if not journaled:
        mine.update({k: v for k, v in saved.items() if k in mine})


def read_run(paths: RunPaths, components: Iterable[str] | None = None) -> Replay:
    """Read ``paths``' journal once. The state starts from ``components`` (a config's order) or,
    without, the components and run fields of ``state.json``."""
    saved = read_json_object(paths.state) or {}  # state.json as the last supervisor wrote it
    if components is None:
        saved_comps = saved.get("components")
        names = list(saved_comps) if isinstance(saved_comps, dict) else []
        run = saved.get("run")
        st = state_mod.initial(dict(run) if isinstance(run, dict) else {}, names)
    else:
        st = state_mod.initial({}, list(components))
    records = list(read_records(paths.events))
    for r in records:
        state_mod.apply(st, r)
    return Replay(paths, records, st, saved)
