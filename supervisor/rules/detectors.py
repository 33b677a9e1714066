"""The run's step: run-level decisions as pure functions of what was seen, the trigger, the time and the config.

Each function here looks at a snapshot (:class:`Seen`, one per component) and returns what the
lifecycle should be told (inputs, each with its typed :class:`~rlsup.supervisor.records.events.Cause`)
and what the journal should say (events), never acting itself: which pending component may start
(dependency gating), which components follow a restart (``restart_with``), which one has stalled and
on what evidence, how a dependency counts for ``dependency_down`` and whether its failure is
deterministic (from the typed cause of its ``fatal``, never from the words of a reason), whether the
run has ended and what its root cause is. The run's step (:mod:`.runstep`) calls them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config.model import Config
from ..records import events as ev
from . import lifecycle as lc

MAX_NAMED = 5  # components named in a run's end reason; the rest are counted
# How long an exit 0 waits before it is judged: a platform that takes the machine (a Slurm requeue or
# preemption, a VM's shutdown) signals every process at once, and a program that exits 0 on SIGTERM can be
# seen to end before the supervisor's own SIGTERM is handled.
EXIT_HOLD_S = 1.0


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
    gave_up_by: str | None = None  # the ``by`` of the cause of its latest fatal (``pattern``: deterministic)
    step: int | None = None
    was_ready: bool = False  # its latest attempt became ready (kept once it has ended)


def gate_cause(name: str, cfg: Config, seen: Mapping[str, Seen], since: int | None = None,
               again: bool = False) -> lc.Cause:
    """Why a pending component's first start happens: the run started it, its dependencies met.
    ``again``: it had completed, and a resumed run starts it again because its config changed."""
    deps = cfg.components[name].depends_on
    head = "started again with the resumed run (it had completed; its config changed since)" if again else (
        "started with the run")
    if not deps:
        return lc.Cause("run", f"{head} (no dependencies)" if not again else head, seq=since)
    met = ", ".join(f"{d} {seen[d].state if cond != 'ready' else 'ready'}" for d, cond in deps.items())
    return lc.Cause("run", f"{head} once its dependencies were met ({met})", seq=since)


def gate(name: str, cfg: Config, seen: Mapping[str, Seen]) -> lc.DepsMet | lc.DepsWaiting | lc.DepsBlocked:
    """Whether ``name``'s dependencies let it start."""
    waiting = []
    for dep, cond in cfg.components[name].depends_on.items():
        d = seen[dep]
        if d.state == "fatal" and (cond != "started" or d.attempt == 0):
            return lc.DepsBlocked(f"dependency {dep} is fatal; {name} never started", cause=d.cause or dep)
        if cond == "ready" and d.state == "completed" and not d.was_ready:
            return lc.DepsBlocked(f"dependency {dep} completed without ever becoming ready; {name} never started",
                                  cause=dep)
        if cond == "completed":
            ok = d.state == "completed"
        elif cond == "ready":  # ready, or ready and then done: what it was waited for has happened
            ok = d.state in ("running", "completed")
        else:  # started: its process exists (not merely being spawned), so its `started` comes first; or it
            # ran and completed already
            ok = d.state in ("running", "completed") or (d.state == "starting" and d.started_at is not None)
        if not ok:
            waiting.append(f"{dep} ({cond}; now {d.state})")
    return lc.DepsWaiting(tuple(waiting)) if waiting else lc.DepsMet()


def followers(cfg: Config, seen: Mapping[str, Seen], leader: str, trigger: lc.Cause) -> list[tuple[str, lc.Restart]]:
    """``restart_with``: the components that restart because ``leader`` restarts (a running or starting
    one only: one in backoff or final is left as it is), each with the leader's restart as its cause."""
    why = lc.Cause("dependency", f"{leader} restarts (restart_with: {leader}); it was restarted because "
                                 f"{trigger.by}: {trigger.reason}", seq=trigger.seq, component=leader)
    return [(n, lc.Restart(f"restart_with {leader}", reason=f"{leader} restarts", cause=why))
            for n, c in cfg.components.items() if leader in c.restart_with and seen[n].state in ("starting", "running")]


def restart_trigger(e: Mapping[str, Any]) -> lc.Cause | None:
    """The cause a journaled ``restart_scheduled`` passes on to the components that follow it."""
    if e.get("kind") != "restart_scheduled" or not e.get("component"):
        return None
    c = e.get("cause") or {}
    return lc.Cause(c.get("by") or "exit", str(c.get("reason") or e.get("reason") or "an exit"), seq=e.get("seq"))


def exit_hold(exit_code: int | None, signal: str | None, *, shutting_down: bool, forced: bool = False) -> float:
    """Seconds to wait before judging an exit (0: judge it now). An exit 0 or a death by SIGTERM (killed, or
    143 from a shell) nobody asked for is held :data:`EXIT_HOLD_S`: if the run is stopped meanwhile, it was the
    platform's stop reaching the component first, a stop: never a completion that a resumed run would skip,
    nor a failure restarted and then blamed for the run. ``forced``: rlsup itself ended the attempt (a failed
    liveness probe, a readiness timeout): its SIGTERM, a failure judged at once."""
    sigterm = signal == "SIGTERM" or (exit_code == 128 + 15 and not signal)
    held = (exit_code == 0 and not signal) or (sigterm and not forced)
    return EXIT_HOLD_S if held and not shutting_down else 0.0


# A checkpoint as the preemption's wait compares them: (step, the newest mtime in it).
Mark = tuple[int, float]


def checkpoint_waited(*, asked_at: float, wait: float, now: float, before: Mark | None, latest: Mark | None,
                      exited: bool) -> str | None:
    """Whether a component asked to checkpoint on a preemption (``checkpoint_requested`` at ``asked_at``) has been
    waited for: ``"written"`` once a complete checkpoint newer than ``before`` (the newest when it was asked) is
    there, ``"exited"`` once its attempt has ended, ``"timed out"`` after ``wait`` seconds; None while the wait goes
    on. A checkpoint of the same step written again counts as new (a trainer asked right after its periodic save)."""
    if latest is not None and (before is None or latest > before):
        return "written"
    if exited:
        return "exited"
    return "timed out" if now - asked_at >= wait else None


def dependency_state(d: Seen, now: float) -> str:
    """A dependency's state for dependency_down: ``running`` only once it has stayed up 10 s, so a server
    that dies seconds after each start is still down (no restart flapping)."""
    if d.state == "running" and d.ready_at is not None and now - d.ready_at < 10.0:
        return "starting"
    return d.state


def deterministic(d: Seen) -> bool:
    """Whether ``d`` went fatal on a crash pattern (repeated_error, step_crash): restarting it for its
    consumers cannot help. Decided from the typed cause of its fatal, not from the words of its reason."""
    return d.state == "fatal" and d.gave_up_by == "pattern"


def dependency_action(consumer: str, d: Seen, budget: float) -> str:
    """What rlsup does about ``consumer``'s dead dependency ``d``, in words (the flag's ``action``)."""
    dep = d.name
    then = f"{consumer} is stopped if {dep} is not back within {budget:g}s"
    if deterministic(d):
        return f"not restarting {dep} (it fails deterministically; fix it, then `rlsup start {dep}`); {then}"
    if d.state in ("fatal", "completed"):
        return f"restarting {dep}, not {consumer}; {then}"
    if d.state == "stopped":
        return f"{dep} was stopped by hand, so it is left stopped; {then}"
    return f"{dep} is restarting ({d.state}); {consumer} is left alone; {then}"


@dataclass(frozen=True)
class Consumer:
    """What dependency_down may know of a component that depends on others."""

    name: str
    state: str
    depends_on: tuple[str, ...]
    last_category: str = ""  # of its latest exit
    # The latest attempt's own output, its tail; a function, read only when a dependency is down.
    lines: Callable[[], Sequence[str]] = tuple
    # The dependencies it needs no more of than their start or their end (not ``ready``): see :func:`_done`.
    ends_ok: frozenset[str] = frozenset()


def consumers_failing(consumers: Sequence[Consumer], seen: Mapping[str, Seen], now: float, *, flagged: frozenset[str],
                      down_since: Mapping[str, float], down_for: Mapping[str, float], budget: float,
                      flag_after_s: float) -> tuple[dict[str, list[str]], list[ev.Event], frozenset[str]]:
    """dependency_down, the consumers' side: which dependencies consumers are failing to reach (dependency ->
    consumers), the flags to raise or clear, and the consumers flagged now. A consumer is flagged once
    the dependency is final or has been down ``flag_after_s`` (a restart of a few seconds is not news)."""
    from ..diagnosis import dependency_down

    failing: dict[str, list[str]] = {}
    events: list[ev.Event] = []
    now_flagged = set(flagged)
    for c in consumers:
        if not c.depends_on or c.state not in ("starting", "running", "backoff", "pending"):
            continue
        mine = seen[c.name].started_at if c.name in seen else None
        deps = {d: dependency_state(seen[d], now) for d in c.depends_on if not _done(seen[d], d in c.ends_ok, mine)}
        if all(st == "running" for st in deps.values()):
            if c.name in now_flagged:
                now_flagged.discard(c.name)
                events.append(ev.FlagCleared(c.name, type="dependency_down", message="its dependencies are up again"))
            continue
        flag = dependency_down(c.name, categories=[c.last_category], lines=list(c.lines()), deps=deps,
                               down_since=dict(down_since), now=now)
        if flag is None:
            continue
        for d in flag.dependencies:
            failing.setdefault(d, []).append(c.name)
        lasting = [d for d in flag.dependencies
                   if seen[d].state in ("fatal", "stopped", "completed") or down_for.get(d, 0.0) >= flag_after_s]
        if lasting and c.name not in now_flagged:
            now_flagged.add(c.name)
            events.append(ev.FlagRaised(c.name, type="dependency_down", message=flag.message,
                                        evidence=list(flag.evidence),
                                        action=dependency_action(c.name, seen[lasting[0]], budget)))
    return failing, events, frozenset(now_flagged)


def _done(d: Seen, ends_ok: bool, since: float | None) -> bool:
    """A dependency that completed is done, not down, where its consumer needs no more of it than its start or
    its end (``ends_ok``), or where it had completed before the consumer's attempt began (``since``) or before
    this supervisor (an ended_at of None: a resumed run's consumers, pending, show their last run's lines): it
    is not what the consumer fails to reach."""
    return d.state == "completed" and (ends_ok or d.ended_at is None or since is not None and d.ended_at <= since)


def restart_dependency(d: Seen, consumers: Sequence[str], trigger_seq: int | None) -> lc.Start | None:
    """dependency_down's remedy: start a dead dependency again (never one that fails deterministically,
    never one that is only restarting or was stopped by hand)."""
    if d.state not in ("fatal", "completed") or deterministic(d):
        return None
    why = lc.Cause("dependency", f"dependency_down: {', '.join(consumers) or 'its consumers'} cannot reach "
                                 f"{d.name}, which is {d.state}", seq=trigger_seq,
                   component=consumers[0] if consumers else None)
    return lc.Start("rlsup (dependency_down)", cause=why)


def stop_consumers(dep: str, victims: Sequence[str], budget: float, trigger_seq: int | None) -> list[tuple[str, lc.Stop]]:
    """dependency_down past its budget: stop the consumers instead of letting them retry for hours."""
    why = lc.Cause("dependency", f"dependency_down: {dep} has been down for {budget:g}s", seq=trigger_seq,
                   component=dep)
    return [(n, lc.Stop("dependency_down", why)) for n in victims]


def stall_evidence(last_line: str | None, step: int | None, deps: Mapping[str, str],
                   watches: Sequence[tuple[str, str, dict[str, Any]]], wall_now: float) -> tuple[str, ...]:
    """What a ``stall`` flag shows: the attempt's last line (never an earlier attempt's), the states of
    its dependencies, the newest artefact of each watched path (``watches``: (path, owner, info))."""
    out = [f"last line: {last_line}" if last_line is not None else "no output yet from this attempt"]
    out += [f"{d} is {st}" for d, st in deps.items()]
    for path, owner, w in watches:
        age = f", written {wall_now - w['mtime']:.0f}s ago" if w.get("mtime") else ""
        out.append(f"newest in {path} ({owner}): step {w.get('step')}{age}")
    return tuple(out)


def stall_input(c: Seen, stall_after: float, idle: float, evidence: tuple[str, ...]) -> lc.Stalled:
    """The lifecycle input for a stall of ``idle`` seconds, with its words and typed cause."""
    last = f"last step {c.step}" if c.step is not None else "no step yet"
    msg = f"no new step for {idle:.0f}s ({last}, stall_after {stall_after:g}s)"
    return lc.Stalled(msg, evidence)


def stalled(c: Seen, stall_after: float | None, now: float, *, awake_since: float) -> float | None:
    """Seconds without a new step if ``c`` counts as stalled, else None.

    Time starts at the latest of: the last new step, readiness, the start, and the moment the
    supervisor itself last woke from a pause (SIGSTOP, a swap storm): what happened while it could
    not look is unknown, so it is not counted against the component.
    """
    due = stall_due(c, stall_after, awake_since=awake_since)
    return None if due is None or now < due else now - due + (stall_after or 0.0)


def stall_due(c: Seen, stall_after: float | None, *, awake_since: float) -> float | None:
    """When ``c`` will count as stalled unless a new step comes first (None: it cannot stall now)."""
    if not stall_after or c.state != "running":
        return None
    return max(x for x in (c.last_step_at, c.ready_at, c.started_at, awake_since) if x is not None) + stall_after


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
    how: str = "completed"  # the run's outcome (events.RUN_OUTCOMES)


def outcome(cfg: Config, seen: Mapping[str, Seen], active: int | None = None) -> Outcome | None:
    """Whether the run has ended, and how; None while it goes on.

    It ends when a component with ``exit_on_end`` is completed or fatal, or when nothing is active
    any more (unless everything was stopped by hand: a start command may follow). It failed where any
    component is fatal, even where the ``exit_on_end`` one completed after that. The root is the
    first component whose failure made the others stop or never start, not the last one to end.
    ``active``: how many components are in ``lc.ACTIVE``, where the caller counted them (then, while any
    is, only the ``exit_on_end`` components are looked at: thousands of components, judged many times a
    second while they start); None: counted here.
    """
    trigger = _end_trigger(cfg, seen)
    if trigger is None and (active or any(c.state in lc.ACTIVE for c in seen.values())
                            or all(c.state == "stopped" for c in seen.values())):
        return None
    failed = [c for c in seen.values() if c.state == "fatal"]
    done = f"{trigger} completed (exit_on_end)" if trigger is not None and seen[trigger].state == "completed" else ""
    if failed:  # even where the exit_on_end component completed after it: a component given up on is no completion
        return _failed(failed, seen, done)
    if done:
        return Outcome(0, done)
    stopped = [c.name for c in seen.values() if c.state == "stopped"]
    if stopped:  # nothing left to run, but not because it all ran to its end
        return Outcome(0, f"nothing left to run: {_named(stopped)} stopped, the rest completed", how="stopped")
    return Outcome(0, "every component completed")


def _failed(failed: Sequence[Seen], seen: Mapping[str, Seen], done: str) -> Outcome:
    """A failed run's end: its root, what the root took with it, and what completed all the same (``done``)."""
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
    reason += f"; {done}" if done else ""
    return Outcome(1, reason, root=root.name, root_reason=why, victims=victims, how="failed")


def _end_trigger(cfg: Config, seen: Mapping[str, Seen]) -> str | None:
    """The first component (in dependency order) with ``exit_on_end`` that is completed or fatal."""
    ends = [n for n, c in cfg.components.items() if c.exit_on_end]
    if len(ends) > 1:
        order = {n: i for i, n in enumerate(cfg.topo_order())}
        ends.sort(key=order.__getitem__)
    return next((n for n in ends if seen[n].state in ("completed", "fatal")), None)


def _named(names: Sequence[str]) -> str:
    return ", ".join(names[:MAX_NAMED]) + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")


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


def partner_up(name: str, components: dict[str, tuple[list[str], str]]) -> str | None:
    """Of components that restart together (each names the other in ``restart_with``), one that has
    already started again: it may be writing the steps past the resume step by now, so ``name``'s
    ``resume.clean`` must not run (the first of the two to start cleaned before either ran).
    ``components``: each one's ``restart_with`` list and state."""
    mine = components[name][0]
    return next((other for other, (theirs, state) in components.items()
                 if other != name and state in ("starting", "running") and other in mine and name in theirs), None)
