"""The run's step: one pure function from what the run has seen and a trigger to what the run does next.

:func:`step` takes a :class:`View` (a frozen snapshot of the run), a :data:`Trigger` and the config, and
returns the :data:`Effect` s to carry out. It never acts, reads a file or looks at a clock: the rules
themselves are in :mod:`~rlsup.supervisor.rules.detectors`, and :class:`~rlsup.supervisor.run.run.Run`
builds the view, calls the step and carries out the answer. So every run-level rule is tested with
a fake clock and no process (tests/supervisor/rules/test_runstep.py), as the lifecycle's are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

from ..config.model import Config
from ..records import events as ev
from . import detectors
from . import lifecycle as lc
from .detectors import Consumer, Outcome, Seen

# ---------------------------------------------------------------------- what the run has seen


@dataclass(frozen=True)
class StallView:
    """What the stall judgement may know of a running component with ``progress.stall_after``."""

    stall_after: float
    stalled: bool  # a stall episode is under way
    deps: Mapping[str, str] = field(default_factory=dict)  # its dependencies' states, for the evidence
    watches: Sequence[tuple[str, str, dict[str, Any]]] = ()  # (path, owner, newest artefact)
    last_line: Callable[[], str | None] = lambda: None  # the attempt's last line; read only for a stall


@dataclass(frozen=True)
class View:
    """A snapshot of the run for one step."""

    seen: Mapping[str, Seen]
    shutting_down: bool = False
    ended: bool = False  # the end was decided (or asked for) already
    run_seq: int | None = None  # the seq of this run's run_started: the cause of first starts
    awake_since: float = 0.0  # when the supervisor last woke from a pause of its own
    wall_time: float = 0.0  # for the age of artefacts in a stall's evidence
    caught_up: bool = False  # the logs were read just now: a stall seen is a stall
    stall: Mapping[str, StallView] = field(default_factory=dict)
    consumers: Sequence[Consumer] = ()
    flagged: frozenset[str] = frozenset()  # consumers with a dependency_down flag raised
    down_since: Mapping[str, float] = field(default_factory=dict)  # of the dependency watch
    down_for: Mapping[str, float] = field(default_factory=dict)
    active: int | None = None  # components in lc.ACTIVE, where the run counted them (None: count from seen)


# ---------------------------------------------------------------------- triggers


@dataclass(frozen=True)
class Restarted:
    """A ``restart_scheduled`` was journaled (the event as written)."""

    event: Mapping[str, Any]


@dataclass(frozen=True)
class RestartCommand:
    """A component was restarted by a command (or by rlsup for it)."""

    name: str
    cause: lc.Cause | None = None


@dataclass(frozen=True)
class Pending:
    """A pending component that wants to run and is not being spawned: may it start?
    ``again``: it completed in the run a resumed run continues, and starts again for a changed config."""

    name: str
    again: bool = False


@dataclass(frozen=True)
class Settled:
    """Components changed and the pending ones were judged: has the run ended?"""


@dataclass(frozen=True)
class StallTick:
    """The tick's stall check."""


@dataclass(frozen=True)
class DependencyTick:
    """The tick's dependency_down check, the consumers' side."""


@dataclass(frozen=True)
class DependencyVerdict:
    """What a dependency watch said of ``dep`` (``restart_dependency``, ``stop_consumers``, ...), and
    the consumers failing to reach it."""

    dep: str
    act: str | None
    failing: tuple[str, ...] = ()


Trigger = Restarted | RestartCommand | Pending | Settled | StallTick | DependencyTick | DependencyVerdict


# ---------------------------------------------------------------------- effects


@dataclass(frozen=True)
class Feed:
    """Tell ``component``'s lifecycle ``input``."""

    component: str
    input: lc.Input


@dataclass(frozen=True)
class Say:
    """Journal ``event``; then feed ``then``, whose causes take the event's seq (what triggered them)."""

    event: ev.Event
    then: tuple[Feed, ...] = ()


@dataclass(frozen=True)
class End:
    """The run has ended, and how."""

    outcome: Outcome


@dataclass(frozen=True)
class CatchUp:
    """Read every log to its end, then step again with ``caught_up``: the steps a component wrote while
    the run was paused or busy are in its log, and a stall must not be called on stale progress."""


@dataclass(frozen=True)
class Flagged:
    """The consumers flagged for dependency_down from now on."""

    consumers: frozenset[str]


@dataclass(frozen=True)
class Track:
    """Tell the dependency watch whether ``dep`` is down and consumers are failing on it; its answer
    comes back as a :class:`DependencyVerdict`."""

    dep: str
    down: bool
    failing: tuple[str, ...]


Effect = Feed | Say | End | CatchUp | Flagged | Track


def with_seq(inp: lc.Input, seq: int | None) -> lc.Input:
    """``inp`` with its cause pointing at the event of ``seq`` (a start, stop or restart the step asked
    for after an event it had journaled, when its cause has no seq yet)."""
    if isinstance(inp, lc.Start | lc.Stop | lc.Restart) and inp.cause is not None and inp.cause.seq is None \
            and seq is not None:
        return replace(inp, cause=replace(inp.cause, seq=seq))
    return inp


# ---------------------------------------------------------------------- the step


def step(view: View, trigger: Trigger, now: float, cfg: Config) -> tuple[Effect, ...]:
    """What the run does about ``trigger``, given ``view`` at monotonic time ``now``."""
    match trigger:  # one handler per trigger class; mypy checks each arm's type and that none is missing
        case Restarted():  # restart_with: a journaled restart takes its followers along, with its cause
            why = detectors.restart_trigger(trigger.event)
            return () if why is None else _follow(view, cfg, str(trigger.event["component"]), why)
        case RestartCommand():
            return _follow(view, cfg, trigger.name, trigger.cause or lc.Cause("user", f"{trigger.name} was restarted"))
        case Pending():
            return _pending(view, trigger, now, cfg)
        case Settled():
            return _settled(view, trigger, now, cfg)
        case StallTick():
            return _stall_tick(view, trigger, now, cfg)
        case DependencyTick():
            return _dependency_tick(view, trigger, now, cfg)
        case DependencyVerdict():
            return _dependency_verdict(view, trigger, now, cfg)
        case _:
            _not_a_trigger(trigger)


def _not_a_trigger(t: NoReturn) -> NoReturn:
    """Where mypy proves no trigger class was left out (a new one without an arm fails the type check)."""
    raise TypeError(f"not a run trigger: {t!r}")


def _follow(view: View, cfg: Config, leader: str, why: lc.Cause) -> tuple[Effect, ...]:
    return tuple(Feed(n, inp) for n, inp in detectors.followers(cfg, view.seen, leader, why))


def _pending(view: View, t: Pending, now: float, cfg: Config) -> tuple[Effect, ...]:
    """Dependency gating: whether a pending component may start, and why it does."""
    if view.shutting_down:
        return ()
    verdict = detectors.gate(t.name, cfg, view.seen)
    if isinstance(verdict, lc.DepsMet):
        verdict = lc.DepsMet(detectors.gate_cause(t.name, cfg, view.seen, view.run_seq, again=t.again))
    return (Feed(t.name, verdict),)


def _settled(view: View, t: Settled, now: float, cfg: Config) -> tuple[Effect, ...]:
    """The run's end: once, never while it shuts down."""
    if view.shutting_down or view.ended:
        return ()
    out = detectors.outcome(cfg, view.seen, active=view.active)
    return (End(out),) if out is not None else ()


def _stall_tick(view: View, t: StallTick, now: float, cfg: Config) -> tuple[Effect, ...]:
    """Stalls: a running component without a new step for ``stall_after`` gets :class:`~.lifecycle.Stalled`
    with its evidence (every tick while it lasts: the lifecycle flags it once and restarts it if so
    configured); one that makes progress again gets :class:`~.lifecycle.Unstalled`."""
    out: list[Effect] = []
    for n, w in view.stall.items():
        s = view.seen[n]
        idle = detectors.stalled(s, w.stall_after, now, awake_since=view.awake_since)
        if idle is None:
            if w.stalled:
                out.append(Feed(n, lc.Unstalled(f"progress again at step {s.step}")))
            continue
        if not view.caught_up and not w.stalled:
            return (CatchUp(),)  # a stall seen on stale progress is no stall: read the logs first
        evidence = detectors.stall_evidence(w.last_line(), s.step, w.deps, w.watches, view.wall_time)
        out.append(Feed(n, detectors.stall_input(s, w.stall_after, idle, evidence)))
    return tuple(out)


def _dependency_tick(view: View, t: DependencyTick, now: float, cfg: Config) -> tuple[Effect, ...]:
    """dependency_down, the consumers' side: flags raised or cleared, then each dependency that is down
    or failing its consumers shown to the watch."""
    if not view.consumers and not view.down_since and not view.flagged:
        return ()
    failing, events, flagged = detectors.consumers_failing(
        view.consumers, view.seen, now, flagged=view.flagged, down_since=view.down_since, down_for=view.down_for,
        budget=cfg.dependency_budget, flag_after_s=15.0)  # a dependency restarting for less is not flagged
    out: list[Effect] = [Flagged(flagged)]
    out += [Say(e) for e in events]
    for d in sorted(set(view.down_since) | set(failing)):
        down = detectors.dependency_state(view.seen[d], now) != "running"
        out.append(Track(d, down, tuple(failing.get(d, ()))))
    return tuple(out)


def _dependency_verdict(view: View, t: DependencyVerdict, now: float, cfg: Config) -> tuple[Effect, ...]:
    """dependency_down's remedies: restart a dead dependency (never one that fails deterministically),
    and past the budget stop its consumers instead of letting them retry for hours; nothing once the run ends."""
    if view.shutting_down or view.ended:
        return ()
    d = view.seen[t.dep]
    if t.act == "restart_dependency":
        start = detectors.restart_dependency(d, list(t.failing), None)
        if start is None:
            return ()
        return (Say(ev.CommandReceived(t.dep, command="start", by="rlsup", client="dependency_down"),
                    then=(Feed(t.dep, start),)),)
    if t.act == "stop_consumers":
        budget = cfg.dependency_budget
        victims = [n for n in t.failing if view.seen[n].state in lc.ACTIVE]
        names = ", ".join(victims) or "nothing"
        flag = ev.FlagRaised(
            t.dep, type="dependency_down",
            message=f"{t.dep} has been down for {budget:g}s; stopping {names} instead of letting them retry for hours",
            evidence=[f"{t.dep}: {d.state}"], action=f"stopped {names}; `rlsup start` them once {t.dep} is back")
        return (Say(flag, then=tuple(Feed(n, stop) for n, stop in detectors.stop_consumers(t.dep, victims, budget, None))),)
    return ()

