"""A component's life as one pure transition function: ``step(life, input, now, rules) -> (life, effects)``.

This module is the one answer to "why did rlsup restart (stop, give up on) X": every source of
change -- an exit, a probe, a stall, a dead dependency, a crash pattern, a user command, shutdown --
arrives here as an *input*; every action comes out as an *effect* (spawn, signal, timer, event)
that :mod:`~rlsup.supervisor.component` carries out. Each restart, stop and give-up carries a
``reason`` into the journal (``restart_scheduled.reason``, ``stopping.reason``, ``stopped.by``,
``fatal.reason``). Nothing here reads a clock, a file or a process: ``now`` is monotonic seconds
from the caller, and the backoff jitter is derived from the component's seed and attempt.

States (as ``rlsup status`` shows them)::

    pending   waiting for its dependencies (or about to spawn)
    starting  spawned (or being spawned), not ready yet
    running   ready (its readiness probe passed, or it has none)
    stopping  told to stop; waiting for the process to exit
    backoff   exited, restarting after a delay
    stopped   stopped by a user, by shutdown or by rlsup (dependency_down); stays until started
    completed exited successfully (never after a false success)
    fatal     no more automatic restarts (policy, crash pattern, dead dependency, spawn error)

Transitions (``*`` = any state; final = stopped | completed | fatal)::

    state      input                    -> state     effects / notes
    pending    DepsMet                  -> starting  Spawn (it waits for the previous tree to be gone)
    pending    DepsWaiting              -> pending   emit pending (when the list changes)
    pending    DepsBlocked(dep)         -> fatal     emit fatal(reason, cause=dep): never started
    starting   Spawned                  -> starting  emit started; probe readiness (none: -> running, emit ready)
    starting   SpawnFailed              -> backoff | fatal   emit spawn_failed; a missing command or cwd is fatal at once
    starting   Ready                    -> running   emit ready; liveness probe; timer healthy(reset_after)
    starting   ReadyTimedOut            -> stopping  forced failure; Terminate
    running    LivenessFailed           -> stopping  emit flag liveness_failed; forced failure; Terminate
    running    Stalled                  -> running   emit flag stall once per episode
                                        -> stopping  ... and with on_stall: restart, forced failure; Terminate
    running    Unstalled                -> running   emit flag_cleared stall
    running    Healthy                  -> running   restart history and pattern flags re-armed (flag_cleared)
    starting|running  Stop(by)          -> stopping  emit stopping(by); Terminate
    starting|running  Restart(by, why)  -> stopping  emit stopping(by, why); Terminate; start again after exit
    stopping   Exited                   -> stopped   (a stop) emit exited, stopped(by); Cleanup
                                        -> starting  (a restart) emit exited, stopped(by); Cleanup; Spawn
    starting|running|stopping  Exited   -> backoff   emit exited, flags; emit restart_scheduled(delay, reason); timer
                                        -> completed emit exited, completed  (success, and no false success)
                                        -> fatal     emit exited, flags, fatal(reason)
    backoff    BackoffElapsed           -> pending   (dependencies are checked again, then Spawn)
    pending|backoff  Stop(by)           -> stopped   emit stopped(by)
    backoff    Restart / Start          -> pending   the delay is skipped
    final      Start / Restart(step)    -> pending   restart history and pattern flags reset; resume from `step`
    *          Shutdown                 -> like Stop(by="shutdown")

An exit is decided as: a stop or user restart is neither success nor failure; otherwise a forced
end (readiness timeout, liveness, stall restart) or a false success (exit 0 before the last step)
is a failure; the restart policy turns the exit into restart / complete / fatal; a fatal crash
pattern (``repeated_error``, ``step_crash``) turns a restart into fatal. Pattern flags
(``crash_loop``, ``repeated_error``, ``step_crash``, ``stall``) are raised once per episode and
re-armed after ``reset_after`` seconds of health or a user (re)start.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from . import events as ev
from .config import Component as ComponentCfg
from .config import RestartCfg
from .diagnosis import AttemptRecord, Diagnosis, detect_attempt_patterns
from .phrases import describe_exit
from .policy import History, decide, is_success

CauseBy = Literal["run", "user", "exit", "spawn", "probe", "stall", "dependency", "pattern", "shutdown"]


@dataclass(frozen=True)
class Cause:
    """Why a component was started, stopped, restarted or given up on: the one answer to "why".

    ``by`` is who or what decided it: ``run`` (the run's own first start of it, its dependencies met),
    ``user`` (a command), ``exit`` (the previous attempt's exit, judged by the restart policy),
    ``spawn`` (it could not be started), ``probe`` (readiness timeout, failed liveness), ``stall``,
    ``dependency`` (restart_with, dependency_down, a dead dependency), ``pattern`` (a crash pattern
    such as repeated_error) or ``shutdown``. ``reason`` says it in words; ``seq`` is the journal seq of
    the event that triggered it (a command, an exit, a flag). Inside one step the triggering event
    may not have a seq yet: ``of`` names its kind and the driver fills ``seq`` in as it emits it.
    ``component`` names the other component for ``dependency`` causes.
    """

    by: CauseBy
    reason: str
    seq: int | None = None
    component: str | None = None
    of: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"by": self.by, "reason": self.reason, "seq": self.seq}
        if self.component is not None:
            out["component"] = self.component
        if self.of is not None and self.seq is None:
            out["of"] = self.of  # the driver replaces it with the seq (fill_seqs)
        return out

    def filled(self, seqs: dict[str, int]) -> Cause:
        """This cause with ``seq`` set from the seqs of the events just emitted (by kind)."""
        if self.seq is None and self.of is not None and self.of in seqs:
            return replace(self, seq=seqs[self.of], of=None)
        return self


def fill_seqs(life: Life, seqs: dict[str, int]) -> Life:
    """``life`` with the causes it keeps pointing at events emitted in the step just carried out."""
    start = life.start_cause.filled(seqs) if life.start_cause is not None else None
    stop = life.stop_cause.filled(seqs) if life.stop_cause is not None else None
    gave = life.gave_up.filled(seqs) if life.gave_up is not None else None
    if start is life.start_cause and stop is life.stop_cause and gave is life.gave_up:
        return life
    return replace(life, start_cause=start, stop_cause=stop, gave_up=gave)


def fill_event(cause: dict[str, Any] | None, seqs: dict[str, int]) -> dict[str, Any] | None:
    """An event's cause with ``of`` resolved to the seq of the event of that kind emitted before it."""
    if not cause or "of" not in cause:
        return cause
    out = dict(cause)
    of = out.pop("of")
    if out.get("seq") is None and of in seqs:
        out["seq"] = seqs[of]
    return out


State = Literal["pending", "starting", "running", "backoff", "stopping", "stopped", "completed", "fatal"]
FINAL: frozenset[str] = frozenset({"stopped", "completed", "fatal"})
ACTIVE: frozenset[str] = frozenset({"pending", "starting", "running", "backoff", "stopping"})
EPISODE_FLAGS = frozenset({"crash_loop", "repeated_error", "step_crash", "stall"})
HISTORY = 20


@dataclass(frozen=True)
class Rules:
    """What the transition function needs of a component's config."""

    restart: RestartCfg
    stop_signal: str = "SIGTERM"
    stop_timeout: float = 30.0
    total: int | None = None
    ready_probe: str | None = None  # "http http://..." or None: ready as soon as it started
    alive: bool = False
    on_stall: str = "flag"
    seed: int = 0

    @classmethod
    def of(cls, name: str, cfg: ComponentCfg) -> Rules:
        r = cfg.ready
        return cls(
            restart=cfg.restart, stop_signal=cfg.stop.signal, stop_timeout=cfg.stop.timeout,
            total=cfg.progress.total if cfg.progress else None,
            ready_probe=None if r is None else f"{r.kind()} {r.target()}", alive=cfg.alive is not None,
            on_stall=cfg.progress.on_stall if cfg.progress else "flag",
            seed=int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big"))


@dataclass(frozen=True)
class Life:
    name: str
    state: State = "pending"
    attempt: int = 0
    want: Literal["run", "stop"] = "run"
    stop_by: str | None = None  # who asked for the stop under way
    then_start: bool = False  # a restart: start again once the attempt has exited
    restart_by: str | None = None
    resume_step: int | None = None  # one-shot: `rlsup resume NAME --step N`
    forced: str | None = None  # rlsup ends this attempt: a failure whatever the exit code
    spawning: bool = False  # Spawn was issued; Spawned / SpawnFailed not yet in
    started_at: float | None = None  # monotonic
    ready_at: float | None = None
    resumed_from: int | None = None  # the checkpoint step this attempt resumed from
    policy: History = History()
    history: tuple[AttemptRecord, ...] = ()
    episode: frozenset[str] = frozenset()  # pattern flags raised in this episode
    cause: str | None = None  # the component whose failure made this one fatal
    start_cause: Cause | None = None  # why the next attempt starts (copied into `started.cause`)
    stop_cause: Cause | None = None  # why the stop (or forced end) under way was asked for
    gave_up: Cause | None = None  # why it is fatal (its `fatal.why`), while it is
    waiting: tuple[str, ...] = ()
    timer: int = 0  # generation of the pending backoff / healthy timer; older ones are ignored


# ---------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class DepsMet:
    cause: Cause | None = None  # for a first start: what let it start


@dataclass(frozen=True)
class DepsWaiting:
    waiting: tuple[str, ...]


@dataclass(frozen=True)
class DepsBlocked:
    reason: str
    cause: str  # the component whose failure blocks this one


@dataclass(frozen=True)
class Spawned:
    pid: int
    command: tuple[str, ...]
    resume: dict[str, Any] | None = None
    checkpoints_rejected: tuple[dict[str, Any], ...] | None = None
    monitor_pid: int | None = None
    started_at: float | None = None  # monotonic; the monitor's own reading of the start
    log_seq: int | None = None  # where this attempt's output starts (line seq; log file inode and offset)
    log_offset: int | None = None
    log_ino: int | None = None
    slurm: dict[str, Any] | None = None  # a Slurm step: {"nodes", "step_id"}
    config_hash: str | None = None  # what the config asked it to run (config.Component.fingerprint)


@dataclass(frozen=True)
class SpawnFailed:
    error: str
    deterministic: bool
    command: tuple[str, ...]
    diagnosis: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Adopted:
    """A new supervisor took over an attempt that kept running under its monitor."""

    pid: int
    attempt: int
    monitor_pid: int
    started_at: float  # monotonic, as the monitor recorded it
    ready: bool
    resumed_from: int | None = None


@dataclass(frozen=True)
class Ready:
    pass


@dataclass(frozen=True)
class ReadyTimedOut:
    reason: str
    cause: Cause | None = None


@dataclass(frozen=True)
class LivenessFailed:
    reason: str
    evidence: tuple[str, ...] = ()
    cause: Cause | None = None


@dataclass(frozen=True)
class Exited:
    exit_code: int | None
    signal: str | None
    diagnosis: dict[str, Any]
    step: int | None = None
    total: int | None = None


@dataclass(frozen=True)
class BackoffElapsed:
    timer: int


@dataclass(frozen=True)
class Healthy:
    timer: int


@dataclass(frozen=True)
class Stalled:
    message: str
    evidence: tuple[str, ...] = ()
    cause: Cause | None = None


@dataclass(frozen=True)
class Unstalled:
    message: str


@dataclass(frozen=True)
class Stop:
    by: str
    cause: Cause | None = None


@dataclass(frozen=True)
class Restart:
    by: str
    reason: str | None = None
    step: int | None = None  # resume from this checkpoint step
    cause: Cause | None = None


@dataclass(frozen=True)
class Start:
    by: str
    step: int | None = None
    cause: Cause | None = None


@dataclass(frozen=True)
class Shutdown:
    cause: Cause | None = None


Input = (DepsMet | DepsWaiting | DepsBlocked | Spawned | SpawnFailed | Adopted | Ready | ReadyTimedOut
         | LivenessFailed | Exited | BackoffElapsed | Healthy | Stalled | Unstalled | Stop | Restart | Start
         | Shutdown)


# ---------------------------------------------------------------------- effects


@dataclass(frozen=True)
class Emit:
    event: ev.Event


@dataclass(frozen=True)
class Spawn:
    attempt: int
    resume_step: int | None = None


@dataclass(frozen=True)
class Terminate:
    signal: str
    timeout: float


@dataclass(frozen=True)
class Probe:
    kind: Literal["ready", "alive"]


@dataclass(frozen=True)
class StopProbes:
    pass


@dataclass(frozen=True)
class SetTimer:
    kind: Literal["backoff", "healthy"]
    delay: float
    timer: int


@dataclass(frozen=True)
class Cleanup:
    """End what the exited attempt left behind and let its monitor finish."""


Effect = Emit | Spawn | Terminate | Probe | StopProbes | SetTimer | Cleanup


# ---------------------------------------------------------------------- the transition function


def step(life: Life, inp: Input, now: float, rules: Rules) -> tuple[Life, list[Effect]]:
    """The next state of ``life`` after ``inp`` at monotonic time ``now``, and what to do about it."""
    fx: list[Effect] = []
    name = life.name
    s = life.state

    def emit(event: ev.Event) -> None:
        fx.append(Emit(event))

    if isinstance(inp, Shutdown):
        inp = Stop("shutdown", inp.cause or Cause("shutdown", "the run is shutting down"))

    if isinstance(inp, DepsMet):
        if s == "pending" and life.want == "run" and not life.spawning:
            attempt = life.attempt + 1
            fx.append(Spawn(attempt, life.resume_step))
            why = life.start_cause or inp.cause or Cause("run", "started with the run (its dependencies are met)")
            return replace(life, state="starting", attempt=attempt, spawning=True, resume_step=None, waiting=(),
                           forced=None, started_at=None, ready_at=None, start_cause=why), fx
        return life, fx

    if isinstance(inp, DepsWaiting):
        if s == "pending" and life.want == "run" and inp.waiting != life.waiting:
            emit(ev.ComponentWaiting(name, waiting_for=list(inp.waiting)))
            return replace(life, waiting=inp.waiting), fx
        return life, fx

    if isinstance(inp, DepsBlocked):
        if s == "pending" and life.want == "run" and not life.spawning:
            why = Cause("dependency", inp.reason, component=inp.cause)
            emit(ev.GaveUp(name, reason=inp.reason, cause=inp.cause, why=why.to_dict()))
            return replace(life, state="fatal", cause=inp.cause, waiting=(), gave_up=why), fx
        return life, fx

    if isinstance(inp, Spawned):
        started = inp.started_at if inp.started_at is not None else now
        life = replace(life, spawning=False, started_at=started, ready_at=None,
                       resumed_from=(inp.resume or {}).get("step"))
        why = life.start_cause or Cause("run", "started with the run (its dependencies are met)")
        emit(ev.ComponentStarted(
            name, pid=inp.pid, attempt=life.attempt, resume=inp.resume, command=list(inp.command),
            checkpoints_rejected=list(inp.checkpoints_rejected) if inp.checkpoints_rejected else None,
            monitor_pid=inp.monitor_pid, cause=why.to_dict(), log_seq=inp.log_seq, log_offset=inp.log_offset,
            log_ino=inp.log_ino, config_hash=inp.config_hash, **(inp.slurm or {})))
        life = replace(life, start_cause=None)
        if life.want == "stop" or life.then_start:  # stopped or restarted while it was being spawned
            emit(ev.StopBegan(name, by=life.stop_by or life.restart_by or "user", signal=rules.stop_signal,
                              cause=_dict(life.stop_cause)))
            fx.append(Terminate(rules.stop_signal, rules.stop_timeout))
            return replace(life, state="stopping"), fx
        if rules.ready_probe is None:
            return _became_ready(life, now, rules, fx, "started (no readiness probe)")
        fx.append(Probe("ready"))
        return replace(life, state="starting"), fx

    if isinstance(inp, Adopted):
        life = replace(life, state="running" if inp.ready else "starting", attempt=inp.attempt, spawning=False,
                       started_at=inp.started_at, ready_at=now if inp.ready else None, want="run",
                       resumed_from=inp.resumed_from)
        emit(ev.ComponentAdopted(name, pid=inp.pid, attempt=inp.attempt, monitor_pid=inp.monitor_pid,
                                 uptime_s=round(max(0.0, now - inp.started_at), 3), state=life.state))
        if inp.ready:
            if rules.alive:
                fx.append(Probe("alive"))
            return _arm_healthy(life, rules, fx)
        if rules.ready_probe is None:  # taken over before its start was recorded as ready: nothing to wait for
            return _became_ready(life, now, rules, fx, "started (no readiness probe)")
        fx.append(Probe("ready"))
        return life, fx

    if isinstance(inp, SpawnFailed):
        life = replace(life, spawning=False)
        emit(ev.StartFailed(name, attempt=life.attempt, command=list(inp.command), error=inp.error,
                            diagnosis=inp.diagnosis))
        if life.want == "stop":
            emit(ev.ComponentStopped(name, by=life.stop_by or "user"))
            return replace(life, state="stopped", stop_by=None, then_start=False), fx
        why = Cause("spawn", inp.error, of="spawn_failed")
        if inp.deterministic:  # a missing command or working directory: restarting cannot help
            emit(ev.GaveUp(name, reason=inp.error, why=why.to_dict()))
            return replace(life, state="fatal", then_start=False, gave_up=why), fx
        return _decide(life, now, rules, fx, success=False, how=inp.error, patterns=(), cause=why)

    if isinstance(inp, Ready):
        if s != "starting" or life.spawning:
            return life, fx
        return _became_ready(life, now, rules, fx, rules.ready_probe or "started")

    if isinstance(inp, ReadyTimedOut):
        if s != "starting":
            return life, fx
        why = inp.cause or Cause("probe", inp.reason, of="stopping")
        emit(ev.StopBegan(name, by="rlsup", signal=rules.stop_signal, reason=inp.reason, cause=why.to_dict()))
        fx += [StopProbes(), Terminate(rules.stop_signal, rules.stop_timeout)]
        return replace(life, state="stopping", forced=inp.reason, stop_cause=why), fx

    if isinstance(inp, LivenessFailed):
        if s != "running":
            return life, fx
        emit(ev.FlagRaised(name, type="liveness_failed", message=inp.reason, evidence=list(inp.evidence),
                           action="restarting the component"))
        why = inp.cause or Cause("probe", inp.reason, of="flag")
        emit(ev.StopBegan(name, by="rlsup", signal=rules.stop_signal, reason=inp.reason, cause=why.to_dict()))
        fx += [StopProbes(), Terminate(rules.stop_signal, rules.stop_timeout)]
        return replace(life, state="stopping", forced=inp.reason, stop_cause=why), fx

    if isinstance(inp, Stalled):
        if s != "running":
            return life, fx
        restart = rules.on_stall == "restart"
        flagged = "stall" not in life.episode
        if flagged:
            emit(ev.FlagRaised(
                name, type="stall", message=inp.message, evidence=list(inp.evidence),
                action=f"restarting {name} (progress.on_stall: restart)" if restart
                else "none (watching); `progress.on_stall: restart` restarts a stalled component"))
            life = replace(life, episode=life.episode | {"stall"})
        if restart:
            reason = f"stall: {inp.message}"
            why = inp.cause or Cause("stall", inp.message, of="flag" if flagged else "stopping")
            emit(ev.StopBegan(name, by="rlsup", signal=rules.stop_signal, reason=reason, cause=why.to_dict()))
            fx += [StopProbes(), Terminate(rules.stop_signal, rules.stop_timeout)]
            return replace(life, state="stopping", forced=reason, stop_cause=why), fx
        return life, fx

    if isinstance(inp, Unstalled):
        if "stall" in life.episode:
            emit(ev.FlagCleared(name, type="stall", message=inp.message))
            return replace(life, episode=life.episode - {"stall"}), fx
        return life, fx

    if isinstance(inp, Healthy):
        if s != "running" or inp.timer != life.timer:
            return life, fx
        for t in sorted(life.episode - {"stall"}):
            emit(ev.FlagCleared(name, type=t, message=f"healthy for {rules.restart.reset_after:g}s; re-armed"))
        return replace(life, policy=History(), episode=life.episode & {"stall"}), fx

    if isinstance(inp, BackoffElapsed):
        if s != "backoff" or inp.timer != life.timer:
            return life, fx
        return replace(life, state="pending", waiting=()), fx

    if isinstance(inp, Stop):
        return _stop(life, inp.by, rules, fx, inp.cause or _cause_of(inp.by, f"stopped by {inp.by}"))

    if isinstance(inp, Restart):
        return _restart(life, inp, rules, fx)

    if isinstance(inp, Start):
        why = inp.cause or _cause_of(inp.by, f"started by {inp.by}")
        if s in FINAL:
            return _fresh_start(life, inp.step, why), fx
        if s == "backoff":
            return replace(life, state="pending", timer=life.timer + 1, resume_step=inp.step, waiting=(),
                           start_cause=why), fx
        return life, fx

    if isinstance(inp, Exited):
        return _exited(life, inp, now, rules, fx)

    raise TypeError(f"not a lifecycle input: {inp!r}")


def _became_ready(life: Life, now: float, rules: Rules, fx: list[Effect], probe: str) -> tuple[Life, list[Effect]]:
    fx.append(Emit(ev.BecameReady(life.name, probe=probe)))
    if rules.alive:
        fx.append(Probe("alive"))
    return _arm_healthy(replace(life, state="running", ready_at=now), rules, fx)


def _arm_healthy(life: Life, rules: Rules, fx: list[Effect]) -> tuple[Life, list[Effect]]:
    timer = life.timer + 1
    fx.append(SetTimer("healthy", rules.restart.reset_after, timer))
    return replace(life, timer=timer), fx


def _dict(cause: Cause | None) -> dict[str, Any] | None:
    return cause.to_dict() if cause is not None else None


def _cause_of(by: str, words: str) -> Cause:
    """The cause of a command-like input that came without one (older callers, tests): who, from ``by``."""
    if by == "shutdown":
        return Cause("shutdown", "the run is shutting down")
    if by.startswith(("restart_with", "dependency", "rlsup (dependency")):
        return Cause("dependency", words)
    return Cause("user", words)


def _fresh_start(life: Life, step: int | None, why: Cause | None = None) -> Life:
    """A user (or rlsup, for a dead dependency) starts a final component: a new episode."""
    return replace(life, state="pending", want="run", stop_by=None, then_start=False, restart_by=None,
                   resume_step=step, forced=None, policy=History(), episode=frozenset(), cause=None, waiting=(),
                   timer=life.timer + 1, start_cause=why, stop_cause=None, gave_up=None)


def _stop(life: Life, by: str, rules: Rules, fx: list[Effect], why: Cause) -> tuple[Life, list[Effect]]:
    s = life.state
    if s in FINAL:
        return life, fx
    if s in ("pending", "backoff") and not life.spawning:
        fx.append(Emit(ev.ComponentStopped(life.name, by=by)))
        return replace(life, state="stopped", want="stop", stop_by=None, then_start=False, waiting=(),
                       timer=life.timer + 1, start_cause=None, stop_cause=why), fx
    life = replace(life, want="stop", stop_by=by, then_start=False, stop_cause=why, start_cause=None)
    if s in ("starting", "running") and not life.spawning:
        fx.append(Emit(ev.StopBegan(life.name, by=by, signal=rules.stop_signal, cause=why.to_dict())))
        fx += [StopProbes(), Terminate(rules.stop_signal, rules.stop_timeout)]
        return replace(life, state="stopping"), fx
    return life, fx  # stopping already, or a spawn in flight (stopped once Spawned arrives)


def _restart(life: Life, inp: Restart, rules: Rules, fx: list[Effect]) -> tuple[Life, list[Effect]]:
    s = life.state
    why = inp.cause or _cause_of(inp.by, inp.reason or f"restarted by {inp.by}")
    if s in FINAL:
        return _fresh_start(life, inp.step, why), fx
    if s in ("pending", "backoff") and not life.spawning:
        return replace(life, state="pending", want="run", timer=life.timer + 1, resume_step=inp.step,
                       policy=History(), waiting=(), start_cause=why), fx
    life = replace(life, want="run", then_start=True, restart_by=inp.by, resume_step=inp.step, start_cause=why,
                   stop_cause=why)
    if s in ("starting", "running") and not life.spawning:
        fx.append(Emit(ev.StopBegan(life.name, by=inp.by, signal=rules.stop_signal, reason=inp.reason,
                                    cause=why.to_dict())))
        fx += [StopProbes(), Terminate(rules.stop_signal, rules.stop_timeout)]
        return replace(life, state="stopping"), fx
    return life, fx


def _exited(life: Life, inp: Exited, now: float, rules: Rules, fx: list[Effect]) -> tuple[Life, list[Effect]]:
    name = life.name
    started = life.started_at if life.started_at is not None else now
    uptime = max(0.0, now - started)
    healthy = now - life.ready_at if life.ready_at is not None else 0.0
    fx.append(Emit(ev.ComponentExited(name, exit_code=inp.exit_code, signal=inp.signal, uptime_s=round(uptime, 3),
                                      step=inp.step, diagnosis=inp.diagnosis, attempt=life.attempt)))
    fx += [StopProbes(), Cleanup()]
    if "stall" in life.episode:  # a stall is of one attempt: it ends with it (restart, completion, crash)
        fx.append(Emit(ev.FlagCleared(name, type="stall", message=f"attempt {life.attempt} ended",
                                      by="attempt_ended")))
        life = replace(life, episode=life.episode - {"stall"})
    was_ready = life.ready_at is not None
    life = replace(life, spawning=False, ready_at=None, timer=life.timer + 1)

    # What people asked for wins over what rlsup forced (a readiness timeout under way, say).
    if life.want == "stop":  # a stop: neither success nor failure
        fx.append(Emit(ev.ComponentStopped(name, by=life.stop_by or "user")))
        return replace(life, state="stopped", stop_by=None, then_start=False, forced=None), fx
    if life.then_start:  # a restart by a user (or restart_with): a fresh attempt now, a new episode
        fx.append(Emit(ev.ComponentStopped(name, by=life.restart_by or "user")))
        attempt = life.attempt + 1
        fx.append(Spawn(attempt, life.resume_step))
        return replace(life, state="starting", attempt=attempt, spawning=True, then_start=False, restart_by=None,
                       resume_step=None, policy=History(), episode=frozenset(), started_at=None, forced=None,
                       start_cause=life.start_cause or life.stop_cause, stop_cause=None), fx
    forced_cause = life.stop_cause if life.forced is not None else None

    record = AttemptRecord(
        attempt=life.attempt, started_at=started, ended_at=now, ready=was_ready, exit_code=inp.exit_code,
        signal=inp.signal, step=inp.step, resumed_step=life.resumed_from,
        diagnosis=Diagnosis.from_dict(inp.diagnosis or {}))
    history = (*life.history, record)[-HISTORY:]
    if healthy >= rules.restart.reset_after:  # a healthy stretch ended the previous episode
        life = replace(life, episode=frozenset())
    life = replace(life, history=history)
    patterns = detect_attempt_patterns(history, total=inp.total if inp.total is not None else rules.total)
    false_success = next((f for f in patterns if f.type == "false_success"), None)
    success = (life.forced is None and false_success is None
               and is_success(rules.restart, inp.exit_code, inp.signal))
    if life.forced is not None:
        how = life.forced
        why = forced_cause or Cause("probe", how, of="exited")
    elif false_success is not None:
        how = f"false_success: {false_success.message}"
        why = Cause("exit", how, of="exited")  # the exit judged a failure; "pattern" is for fatal crash patterns
    else:
        how = describe_exit(inp.exit_code, inp.signal)
        summary = (inp.diagnosis or {}).get("summary")
        shown = bool(summary) and (inp.diagnosis or {}).get("category") not in ("none", None)
        words = (summary if summary.startswith(how) else f"{how}: {summary}") if shown and summary else how
        why = Cause("exit", words, of="exited")
    return _decide(replace(life, forced=None, stop_cause=None), now, rules, fx, success=success, how=how,
                   patterns=patterns, healthy=healthy, cause=why)


def _decide(life: Life, now: float, rules: Rules, fx: list[Effect], *, success: bool, how: str, patterns: Any,
            healthy: float = 0.0, cause: Cause | None = None) -> tuple[Life, list[Effect]]:
    name = life.name
    decision, policy = decide(rules.restart, life.policy, success=success, how=how, healthy_s=healthy, now=now,
                              u=_u(rules, life.attempt))
    why = cause or Cause("exit", how, of="exited")
    fatal_pattern = next((f for f in patterns if f.fatal), None)
    if fatal_pattern is not None and decision.action == "restart":
        decision = type(decision)("fatal", reason=f"{fatal_pattern.type}: {fatal_pattern.message}")
        why = Cause("pattern", decision.reason, of="exited")
    elif decision.action == "fatal" and decision.reason.startswith(how + "; "):
        why = replace(why, reason=f"{why.reason}; {decision.reason[len(how) + 2:]}")  # "restart policy is never"
    episode = set(life.episode)
    for f in patterns:
        if f.type in EPISODE_FLAGS and f.type in episode:
            continue  # once per episode
        if f.fatal and decision.action == "fatal":
            action = (f"stopped automatic restarts (state fatal); fix the cause, then `rlsup start {name}` "
                      "(or, once the run has ended, `rlsup up CONFIG --resume`)")
        elif decision.action == "restart":
            action = "restarting with backoff" + (" (resuming from a checkpoint where one is configured)"
                                                  if f.type == "false_success" else "")
        else:
            action = decision.action
        fx.append(Emit(ev.FlagRaised(name, type=f.type, message=f.message, evidence=list(f.evidence), action=action)))
        if f.type in EPISODE_FLAGS:
            episode.add(f.type)
    life = replace(life, policy=policy, episode=frozenset(episode), then_start=False)
    if decision.action == "restart":
        timer = life.timer + 1
        fx.append(Emit(ev.RestartScheduled(name, delay_s=decision.delay_s, attempt=life.attempt + 1,
                                           reason=decision.reason, cause=why.to_dict())))
        fx.append(SetTimer("backoff", decision.delay_s, timer))
        return replace(life, state="backoff", timer=timer, start_cause=why), fx
    if decision.action == "complete":
        fx.append(Emit(ev.ComponentCompleted(name)))
        return replace(life, state="completed"), fx
    fx.append(Emit(ev.GaveUp(name, reason=decision.reason, why=why.to_dict())))
    return replace(life, state="fatal", gave_up=why), fx


def _u(rules: Rules, attempt: int) -> float:
    """The backoff jitter draw for ``attempt``: deterministic per component and attempt."""
    h = hashlib.sha256(f"{rules.seed}:{attempt}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64
