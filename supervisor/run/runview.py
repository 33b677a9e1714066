"""How the run's components look to its step: the snapshots :mod:`.runstep` decides on, built from
the live components and the run's state, and the plan of the run's next tick.

Nothing here decides anything: it reads the components as they are now into the frozen values
(:class:`~.detectors.Seen`, :class:`~.runstep.StallView`, :class:`~.detectors.Consumer`) that the
pure rules take, so that the rules can be tested with a fake clock and no processes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any

from ..rules import runstep
from ..rules.detectors import Consumer, Seen, dependency_state, stall_due
from .component import Component

POSITIONS_WRITE_S = 5.0  # log positions reach state.json at least this often while they move


def seen_one(c: Component, state: Mapping[str, Any], ended_at: float | None) -> Seen:
    """What the run's rules may know of ``c`` (``state``: its entry in the run's state)."""
    return Seen(c.name, c.state, c.attempt, reason=state.get("reason"), cause=c.life.cause,
                ended_at=ended_at, started_at=c.life.started_at,
                ready_at=c.life.ready_at, last_step_at=c.progress.last_change_at,
                gave_up_by=c.life.gave_up.by if c.life.gave_up is not None else None,
                step=c.progress.step, was_ready=c.life.ready_at is not None or state.get("ready_at") is not None)


class SeenNow(Mapping[str, Seen]):
    """Every component as the run's rules may know it, each read the first time a rule asks for it (then
    kept): gating a component without dependencies, or planning the tick, reads a few of thousands, not all.
    ``forget(name)``: that component moved; the next look reads it again."""

    def __init__(self, components: Mapping[str, Component], states: Mapping[str, Any],
                 final_at: Mapping[str, float]):
        self._components = components
        self._states = states
        self._final_at = final_at
        self._read: dict[str, Seen] = {}

    def __getitem__(self, name: str) -> Seen:
        got = self._read.get(name)
        if got is None:
            c = self._components[name]
            got = self._read[name] = seen_one(c, self._states.get(name, {}), self._final_at.get(name))
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self._components)

    def __len__(self) -> int:
        return len(self._components)

    def __contains__(self, name: object) -> bool:
        return name in self._components

    def forget(self, name: str) -> None:
        self._read.pop(name, None)


def stall_watch(c: Component, components: Mapping[str, Component]) -> runstep.StallView:
    """What the stall judgement may know of ``c``: its dependencies, the artefacts it and they
    write, and (read only when a stall is called) its attempt's last line."""
    assert c.cfg.progress is not None and c.cfg.progress.stall_after
    owners = [c] + [components[d] for d in c.cfg.depends_on]
    return runstep.StallView(
        c.cfg.progress.stall_after, "stall" in c.life.episode,
        deps={d: components[d].state for d in c.cfg.depends_on},
        watches=[(path, o.name, w) for o in owners for path, w in o.watch_info.items()],
        last_line=lambda: next(iter(c.attempt_tail(1)), None))  # the attempt's, never an earlier one's


def stall_watched(components: Mapping[str, Component]) -> dict[str, Component]:
    """The components a stall can be called on: running, with ``progress.stall_after``."""
    return {n: c for n, c in components.items()
            if c.state == "running" and c.cfg.progress and c.cfg.progress.stall_after}


def consumers(components: Mapping[str, Component], states: Mapping[str, Any]) -> list[Consumer]:
    """Every live component that depends on others, as dependency_down sees it (with its latest exit's category)."""
    return [Consumer(n, c.state, tuple(c.cfg.depends_on),
                     str(((states[n].get("last_exit") or {}).get("diagnosis") or {}).get("category", "")),
                     partial(c.attempt_tail, 200), frozenset(d for d, cond in c.cfg.depends_on.items() if cond != "ready"))
            for n, c in components.items()
            if c.cfg.depends_on and c.state in ("starting", "running", "backoff", "pending")]


def tick_due(components: Mapping[str, Component], seen: Mapping[str, Seen], now: float, *, awake_since: float,
             positions_written: float, resources_due: float) -> tuple[bool, list[float | None]]:
    """Whether the run's tick must come every second, and if not, when each thing is next due (a
    stall to call, log positions to save, resources to sample)."""
    due: list[float | None] = []
    sampled = False
    for n, c in components.items():
        # Starting, in backoff, stopping, pending or stalled, or running on a dependency that is not
        # (dependency_down looks at its consumers every second).
        if c.state not in ("running", "stopped", "fatal", "completed") or "stall" in c.life.episode or (
                c.state == "running" and any(dependency_state(seen[d], now) != "running" for d in c.cfg.depends_on)):
            return True, []
        if c.state == "running" and c.cfg.progress and c.cfg.progress.stall_after:
            due.append(stall_due(seen[n], c.cfg.progress.stall_after, awake_since=awake_since))
        if c.moved:
            due.append(positions_written + POSITIONS_WRITE_S)
        sampled = sampled or c.current is not None
    if sampled:
        due.append(resources_due)
    return False, due
