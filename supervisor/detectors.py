"""Run-level decisions as pure functions of the components' states and the time.

Each function here looks at a snapshot (:class:`Seen`, one per component) and returns what the
lifecycle should be told, never acting itself: which pending component may start (dependency
gating), which one has stalled, whether the run has ended and what its root cause is. The run
calls them on changes and on its tick, and feeds the answers to
:func:`~rlsup.supervisor.lifecycle.step` as inputs. ``dependency_down`` and memory growth live in
:mod:`~rlsup.supervisor.diagnosis` (also pure) and are wired the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from . import lifecycle as lc
from .config import Config

MAX_NAMED = 5  # components named in a run's end reason; the rest are counted


@dataclass(frozen=True)
class Seen:
    """What a detector may know about a component."""

    name: str
    state: str
    attempt: int = 0
    reason: str | None = None  # of the latest fatal
    cause: str | None = None  # the component its failure follows from
    ended_at: float | None = None  # when it became final (monotonic), for the root cause
    started_at: float | None = None
    ready_at: float | None = None
    last_step_at: float | None = None


def gate(name: str, cfg: Config, seen: Mapping[str, Seen]) -> lc.DepsMet | lc.DepsWaiting | lc.DepsBlocked:
    """Whether ``name``'s dependencies let it start."""
    waiting = []
    for dep, cond in cfg.components[name].depends_on.items():
        d = seen[dep]
        if d.state == "fatal" and (cond != "started" or d.attempt == 0):
            return lc.DepsBlocked(f"dependency {dep} is fatal; {name} never started", cause=d.cause or dep)
        if cond == "completed":
            ok = d.state == "completed"
        elif cond == "ready":
            ok = d.state == "running"
        else:  # started: its process exists (not merely being spawned), so its `started` comes first
            ok = d.state == "running" or (d.state == "starting" and d.started_at is not None)
        if not ok:
            waiting.append(f"{dep} ({cond}; now {d.state})")
    return lc.DepsWaiting(tuple(waiting)) if waiting else lc.DepsMet()


def stalled(c: Seen, stall_after: float | None, now: float, *, awake_since: float) -> float | None:
    """Seconds without a new step if ``c`` counts as stalled, else None.

    Time starts at the latest of: the last new step, readiness, the start, and the moment the
    supervisor itself last woke from a pause (SIGSTOP, a swap storm): what happened while it could
    not look is unknown, so it is not counted against the component.
    """
    if not stall_after or c.state != "running":
        return None
    idle = now - _stall_clock_since(c, awake_since)
    return idle if idle >= stall_after else None


def stall_due(c: Seen, stall_after: float | None, *, awake_since: float) -> float | None:
    """When ``c`` will count as stalled unless a new step comes first (None: it cannot stall now)."""
    if not stall_after or c.state != "running":
        return None
    return _stall_clock_since(c, awake_since) + stall_after


def _stall_clock_since(c: Seen, awake_since: float) -> float:
    return max(x for x in (c.last_step_at, c.ready_at, c.started_at, awake_since) if x is not None)


def next_tick(last_tick: float, *, busy: bool, due: Sequence[float | None], tick_s: float, idle_max_s: float) -> float:
    """When the run's tick should come next: ``tick_s`` after the last one while something needs
    looking at every second (a component starting, in backoff or stalled, a dependency down, a
    journal write the disk refused), else at the earliest of ``due`` (the next resources sample, a
    stall deadline, a log position to record), never sooner than ``tick_s`` and never later than
    ``idle_max_s`` after the last tick. An idle run has no periodic work with nothing to do."""
    if busy:
        return last_tick + tick_s
    at = min((d for d in due if d is not None), default=last_tick + idle_max_s)
    return min(max(at, last_tick + tick_s), last_tick + idle_max_s)


@dataclass(frozen=True)
class Outcome:
    """The end of a run: its exit code, the reason in words, and the root of a failure."""

    exit_code: int
    reason: str
    root: str | None = None
    root_reason: str | None = None
    victims: tuple[str, ...] = field(default_factory=tuple)


def outcome(cfg: Config, seen: Mapping[str, Seen]) -> Outcome | None:
    """Whether the run has ended, and how; None while it goes on.

    It ends when a component with ``exit_on_end`` is completed or fatal, or when nothing is active
    any more (unless everything was stopped by hand: a start command may follow). The root is the
    first component whose failure made the others stop or never start, not the last one to end.
    """
    trigger = next((n for n in cfg.topo_order()
                    if cfg.components[n].exit_on_end and seen[n].state in ("completed", "fatal")), None)
    if trigger is None:
        states = [c.state for c in seen.values()]
        if any(s in lc.ACTIVE for s in states):
            return None
        if all(s == "stopped" for s in states):
            return None
    failed = [c for c in seen.values() if c.state == "fatal"]
    if trigger is not None and seen[trigger].state == "completed":
        return Outcome(0, f"{trigger} completed (exit_on_end)")
    if not failed:
        return Outcome(0, "every component completed" if trigger is None else f"{trigger} ended")
    root = _root(failed, seen)
    victims = tuple(c.name for c in failed if c.name != root.name)
    why = root.reason or "fatal"
    reason = f"{root.name} fatal: {why}"
    for v in victims[:MAX_NAMED]:
        cause = seen[v].cause
        reason += f"; {v} " + ("never started" if seen[v].attempt == 0 else "fatal") + (
            f" (dependency {cause})" if cause else "")
    if len(victims) > MAX_NAMED:
        reason += f"; and {len(victims) - MAX_NAMED} more fatal"
    return Outcome(1, reason, root=root.name, root_reason=why, victims=victims)


def _root(failed: Sequence[Seen], seen: Mapping[str, Seen]) -> Seen:
    """Follow ``cause`` links to a component that failed on its own; the earliest such failure."""
    roots = []
    for c in failed:
        hops, cur = 0, c
        while cur.cause and cur.cause in seen and hops < len(seen):
            cur = seen[cur.cause]
            hops += 1
        roots.append(cur)
    return min(roots, key=lambda c: (c.ended_at if c.ended_at is not None else float("inf"), c.name))
