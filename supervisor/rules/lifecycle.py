"""A component's life as one pure transition function: ``step(life, input, now, rules) -> (life, effects)``.

This module is the one answer to "why did rlsup restart (stop, give up on) X": every source of
change -- an exit, a probe, a stall, a dead dependency, a crash pattern, a user command, shutdown --
arrives here as an *input*; every action comes out as an *effect* (spawn, signal, timer, event)
that :mod:`~rlsup.supervisor.run.component` carries out. Each restart, stop and give-up carries a
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
    *          RunStopping              -> (same)    wanted stopped by shutdown: an exit before its turn is a stop;
                                                     no Start or Restart is taken any more
    starting|running  RunStopping(preemption), with `preempt:`
                                        -> (same)    emit checkpoint_requested; Signal(preempt.signal): the run waits
                                                     up to preempt.wait for a new checkpoint before its turn
    *          Shutdown(preemption)     -> like Stop(by="preemption")

An exit is decided as: a stop or user restart is neither success nor failure; otherwise a forced
end (readiness timeout, liveness, stall restart) or a false success (exit 0 before the last step)
is a failure; the restart policy turns the exit into restart / complete / fatal; a fatal crash
pattern (``repeated_error``, ``step_crash``) turns a restart into fatal. Pattern flags
(``crash_loop``, ``repeated_error``, ``step_crash``, ``stall``) are raised once per episode and
re-armed after ``reset_after`` seconds of health or a user (re)start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from ..config.model import Component as ComponentCfg
from ..config.model import RestartCfg
from ..diagnosis import AttemptRecord, Diagnosis, detect_attempt_patterns
from ..records import events as ev
from ..records.events import Cause, CauseBy, Resume
from ..records.phrases import describe_exit
from ..records.state import ACTIVE, FINAL
from .policy import History, decide, is_success

__all__ = ["ACTIVE", "FINAL", "Cause", "CauseBy", "Resume"]  # the typed records of events, here where the rules make them

def fill_seqs(life: Life, seqs: dict[str, int]) -> Life:
    """``life`` with the causes it keeps pointing at events emitted in the step just carried out."""
    filled = {k: new for k in ("start_cause", "stop_cause", "gave_up")
              if (old := getattr(life, k)) is not None and (new := old.filled(seqs)) is not old}
    return replace(life, **filled) if filled else life


def fill_event(event: ev.Event, seqs: dict[str, int]) -> ev.Event:
    """``event`` with its cause (``fatal.why``, every other event's ``cause``) pointing at the seq of the event
    of the kind it names (``of``) emitted before it; ``of`` is dropped whether or not that event was emitted."""
    name = "why" if isinstance(event, ev.ComponentFatal) else "cause"
    cause = getattr(event, name, None)
    if not isinstance(cause, Cause) or cause.of is None or cause.seq is not None:
        return event
    filled: dict[str, Any] = {name: replace(cause, seq=seqs.get(cause.of), of=None)}
    return replace(event, **filled)


State = Literal["pending", "starting", "running", "backoff", "stopping", "stopped", "completed", "fatal"]
EPISODE_FLAGS = frozenset({"crash_loop", "repeated_error", "step_crash", "stall"})


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
    preempt_signal: str | None = None  # `preempt:`: asked to checkpoint before a preemption stops it
    preempt_wait: float = 0.0

    @classmethod
    def of(cls, name: str, cfg: ComponentCfg) -> Rules:
        r = cfg.ready
        return cls(
            restart=cfg.restart, stop_signal=cfg.stop.signal, stop_timeout=cfg.stop.timeout,
            total=cfg.progress.total if cfg.progress else None,
            ready_probe=None if r is None else f"{r.kind()} {r.target()}", alive=cfg.alive is not None,
            on_stall=cfg.progress.on_stall if cfg.progress else "flag",
            seed=int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big"),
            preempt_signal=cfg.preempt.signal if cfg.preempt else None,
            preempt_wait=cfg.preempt.wait if cfg.preempt else 0.0)


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
    run_stopping: bool = False  # the run is ending: no start or restart any more (RunStopping)
    checkpoint_asked: float | None = None  # when a preemption asked it to checkpoint (monotonic)


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
    resume: Resume | None = None
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
    diagnosis: Diagnosis = field(default_factory=lambda: Diagnosis.from_dict({}))


@dataclass(frozen=True)
class Adopted:
    """A new supervisor took over an attempt that kept running under its monitor."""

    pid: int
    attempt: int
    monitor_pid: int
    started_at: float  # monotonic, as the monitor recorded it
    ready: bool
    config_changed: bool = False  # the config asks another command than the attempt runs (its next start runs it)


@dataclass(frozen=True)
class Ready:
    pass


@dataclass(frozen=True)
class ReadyTimedOut:
    reason: str


@dataclass(frozen=True)
class LivenessFailed:
    reason: str
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class Exited:
    exit_code: int | None
    signal: str | None
    diagnosis: Diagnosis
    step: int | None = None
    total: int | None = None
    at: float | None = None  # when it exited (monotonic, as its monitor recorded it); None: now


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
    cause: Cause | None = None


@dataclass(frozen=True)
class Shutdown:
    cause: Cause | None = None


@dataclass(frozen=True)
class RunStopping:
    """The run is being stopped (a down, a signal, a requeue, a preemption, its own end): its turn in the
    ordered stop (:class:`Shutdown`) may come later, but from now on an exit is a stop (diagnosed as it is),
    never a completion, and nothing restarts. A preemption (a cause by ``preemption``) asks a component that
    says how (``preempt:``) to checkpoint first."""

    cause: Cause | None = None


Input = (DepsMet | DepsWaiting | DepsBlocked | Spawned | SpawnFailed | Adopted | Ready | ReadyTimedOut
         | LivenessFailed | Exited | BackoffElapsed | Healthy | Stalled | Unstalled | Stop | Restart | Start
         | Shutdown | RunStopping)


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
class Signal:
    """Send ``signal`` to the attempt's processes, and nothing after it (the preemption's checkpoint request)."""

    signal: str


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


Effect = Emit | Spawn | Terminate | Signal | Probe | StopProbes | SetTimer | Cleanup


# ---------------------------------------------------------------------- the transition function


Outcome = tuple[Life, list[Effect]]
_In = TypeVar("_In")
_Handler = Callable[[Life, Any, float, Rules], Outcome]  # Any: the input, of the class the table keys it by


def step(life: Life, inp: Input, now: float, rules: Rules) -> Outcome:
    """The next state of ``life`` after ``inp`` at monotonic time ``now``, and what to do about it.

    One handler per input class (:data:`_HANDLERS`): each is a pure function of the life, its input,
    the time and the rules, and reads like one row group of the transition table above."""
    handler = next((h for cls in type(inp).__mro__ if (h := _HANDLERS.get(cls)) is not None), None)
    if handler is None:
        raise TypeError(f"not a lifecycle input: {inp!r}")
    return handler(life, inp, now, rules)


FIRST_START = "started with the run (its dependencies are met)"


def _on_deps_met(life: Life, inp: DepsMet, now: float, rules: Rules) -> Outcome:
    """pending -> starting: spawn the next attempt (once; a spawn in flight is not repeated)."""
    if life.state != "pending" or life.want != "run" or life.spawning:
        return life, []
    attempt = life.attempt + 1
    why = life.start_cause or inp.cause or Cause("run", FIRST_START)
    return replace(life, state="starting", attempt=attempt, spawning=True, resume_step=None, waiting=(),
                   forced=None, started_at=None, ready_at=None, start_cause=why), [Spawn(attempt, life.resume_step)]


def _on_deps_waiting(life: Life, inp: DepsWaiting, now: float, rules: Rules) -> Outcome:
    """pending: say what it waits for, when that list changed."""
    if life.state != "pending" or life.want != "run" or inp.waiting == life.waiting:
        return life, []
    return replace(life, waiting=inp.waiting), [Emit(ev.ComponentPending(life.name, waiting_for=list(inp.waiting)))]


def _on_deps_blocked(life: Life, inp: DepsBlocked, now: float, rules: Rules) -> Outcome:
    """pending -> fatal: a dependency failed for good, so this one is never started."""
    if life.state != "pending" or life.want != "run" or life.spawning:
        return life, []
    why = Cause("dependency", inp.reason, component=inp.cause)
    fx: list[Effect] = [Emit(ev.ComponentFatal(life.name, reason=inp.reason, cause=inp.cause, why=why))]
    return replace(life, state="fatal", cause=inp.cause, waiting=(), gave_up=why), fx


def _on_spawned(life: Life, inp: Spawned, now: float, rules: Rules) -> Outcome:
    """The attempt is running: emit started; then wait for readiness, or stop it at once if a stop or
    restart came while it was being spawned."""
    started = inp.started_at if inp.started_at is not None else now
    life = replace(life, spawning=False, started_at=started, ready_at=None,
                   resumed_from=inp.resume.step if inp.resume else None)
    why = life.start_cause or Cause("run", FIRST_START)
    fx: list[Effect] = [Emit(ev.ComponentStarted(
        life.name, pid=inp.pid, attempt=life.attempt, resume=inp.resume, command=list(inp.command),
        checkpoints_rejected=list(inp.checkpoints_rejected) if inp.checkpoints_rejected else None,
        monitor_pid=inp.monitor_pid, cause=why, log_seq=inp.log_seq, log_offset=inp.log_offset,
        log_ino=inp.log_ino, config_hash=inp.config_hash, **(inp.slurm or {})))]
    life = replace(life, start_cause=None)
    if life.want == "stop" or life.then_start:  # stopped or restarted while it was being spawned
        fx += [Emit(ev.ComponentStopping(life.name, by=life.stop_by or life.restart_by or "user",
                                         signal=rules.stop_signal, cause=life.stop_cause)),
               Terminate(rules.stop_signal, rules.stop_timeout)]
        return replace(life, state="stopping"), fx
    return _await_ready(life, now, rules, fx)


def _on_adopted(life: Life, inp: Adopted, now: float, rules: Rules) -> Outcome:
    """A new supervisor took over a running attempt: running if it was ready, else starting."""
    life = replace(life, state="running" if inp.ready else "starting", attempt=inp.attempt, spawning=False,
                   started_at=inp.started_at, ready_at=now if inp.ready else None, want="run",
                   resumed_from=None)
    fx: list[Effect] = [Emit(ev.ComponentAdopted(
        life.name, pid=inp.pid, attempt=inp.attempt, monitor_pid=inp.monitor_pid,
        uptime_s=round(max(0.0, now - inp.started_at), 3), state=life.state, config_changed=inp.config_changed))]
    return _became_ready(life, now, rules, fx, None) if inp.ready else _await_ready(life, now, rules, fx)


def _on_spawn_failed(life: Life, inp: SpawnFailed, now: float, rules: Rules) -> Outcome:
    """starting -> stopped (a stop was asked for), fatal (restarting cannot help) or what the policy says."""
    life = replace(life, spawning=False)
    fx: list[Effect] = [Emit(ev.ComponentSpawnFailed(life.name, attempt=life.attempt, command=list(inp.command),
                                            error=inp.error, diagnosis=inp.diagnosis))]
    if life.want == "stop":
        fx.append(Emit(ev.ComponentStopped(life.name, by=life.stop_by or "user")))
        return replace(life, state="stopped", stop_by=None, then_start=False), fx
    why = Cause("spawn", inp.error, of="spawn_failed")
    if inp.deterministic:  # a missing command or working directory: restarting cannot help
        fx.append(Emit(ev.ComponentFatal(life.name, reason=inp.error, why=why)))
        return replace(life, state="fatal", then_start=False, gave_up=why), fx
    return _decide(life, now, rules, fx, success=False, how=inp.error, patterns=(), cause=why)


def _on_ready(life: Life, inp: Ready, now: float, rules: Rules) -> Outcome:
    """starting -> running: the readiness probe passed."""
    if life.state != "starting" or life.spawning:
        return life, []
    return _became_ready(life, now, rules, [], rules.ready_probe or "started")


def _on_ready_timed_out(life: Life, inp: ReadyTimedOut, now: float, rules: Rules) -> Outcome:
    """starting -> stopping: never ready in time, a failure whatever its exit."""
    if life.state != "starting":
        return life, []
    return _force_stop(life, rules, [], inp.reason, Cause("probe", inp.reason, of="stopping"))


def _on_liveness_failed(life: Life, inp: LivenessFailed, now: float, rules: Rules) -> Outcome:
    """running -> stopping: flag liveness_failed, then end the attempt as a failure."""
    if life.state != "running":
        return life, []
    fx: list[Effect] = [Emit(ev.FlagRaised(life.name, type="liveness_failed", message=inp.reason,
                                           evidence=list(inp.evidence), action="restarting the component"))]
    return _force_stop(life, rules, fx, inp.reason, Cause("probe", inp.reason, of="flag"))


def _on_stalled(life: Life, inp: Stalled, now: float, rules: Rules) -> Outcome:
    """running: flag the stall once per episode; with ``on_stall: restart``, end the attempt as a failure."""
    if life.state != "running":
        return life, []
    restart = rules.on_stall == "restart"
    flagged = "stall" not in life.episode
    fx: list[Effect] = []
    if flagged:
        fx.append(Emit(ev.FlagRaised(
            life.name, type="stall", message=inp.message, evidence=list(inp.evidence),
            action=f"restarting {life.name} (progress.on_stall: restart)" if restart
            else "none (watching); `progress.on_stall: restart` restarts a stalled component")))
        life = replace(life, episode=life.episode | {"stall"})
    if not restart:
        return life, fx
    why = Cause("stall", inp.message, of="flag" if flagged else "stopping")
    return _force_stop(life, rules, fx, f"stall: {inp.message}", why)


def _on_unstalled(life: Life, inp: Unstalled, now: float, rules: Rules) -> Outcome:
    """The stall flag clears when progress resumes."""
    if "stall" not in life.episode:
        return life, []
    return (replace(life, episode=life.episode - {"stall"}),
            [Emit(ev.FlagCleared(life.name, type="stall", message=inp.message))])


def _on_healthy(life: Life, inp: Healthy, now: float, rules: Rules) -> Outcome:
    """running for ``reset_after`` seconds: restart history and pattern flags re-armed (a stall stays)."""
    if life.state != "running" or inp.timer != life.timer:
        return life, []
    fx: list[Effect] = [Emit(ev.FlagCleared(life.name, type=t,
                                            message=f"healthy for {rules.restart.reset_after:g}s; re-armed"))
                        for t in sorted(life.episode - {"stall"})]
    return replace(life, policy=History(), episode=life.episode & {"stall"}), fx


def _on_backoff_elapsed(life: Life, inp: BackoffElapsed, now: float, rules: Rules) -> Outcome:
    """backoff -> pending: its dependencies are checked again before the next spawn."""
    if life.state != "backoff" or inp.timer != life.timer:
        return life, []
    return replace(life, state="pending", waiting=()), []


def _on_stop(life: Life, inp: Stop, now: float, rules: Rules) -> Outcome:
    """-> stopped at once where nothing runs, else -> stopping (stopped once it exited)."""
    why = inp.cause or _cause_of(inp.by, f"stopped by {inp.by}")
    s = life.state
    if s in FINAL:
        return life, []
    if s in ("pending", "backoff") and not life.spawning:
        return (replace(life, state="stopped", want="stop", stop_by=None, then_start=False, waiting=(),
                        timer=life.timer + 1, start_cause=None, stop_cause=why),
                [Emit(ev.ComponentStopped(life.name, by=inp.by))])
    life = replace(life, want="stop", stop_by=inp.by, then_start=False, stop_cause=why, start_cause=None)
    if s in ("starting", "running") and not life.spawning:
        return _begin_stop(life, rules, [], by=inp.by, reason=None, why=why)
    return life, []  # stopping already, or a spawn in flight (stopped once Spawned arrives)


def _on_shutdown(life: Life, inp: Shutdown, now: float, rules: Rules) -> Outcome:
    """Shutdown is a stop by ``shutdown`` (by ``preemption`` when the platform takes the machine)."""
    why = inp.cause or Cause("shutdown", "the run is shutting down")
    return _on_stop(life, Stop(_stopped_by(why), why), now, rules)


def _stopped_by(why: Cause) -> str:
    return "preemption" if why.by == "preemption" else "shutdown"


def _on_run_stopping(life: Life, inp: RunStopping, now: float, rules: Rules) -> Outcome:
    """A live component is wanted stopped from now on (by ``shutdown`` or ``preemption``); its stop signal comes
    in its turn. On a preemption, one that says how (``preempt:``) is asked to checkpoint now."""
    if life.state in FINAL or life.want == "stop":
        return replace(life, run_stopping=True), []
    why = inp.cause or Cause("shutdown", "the run is shutting down")
    life = replace(life, want="stop", stop_by=_stopped_by(why), then_start=False, stop_cause=why, start_cause=None,
                   run_stopping=True)
    if why.by != "preemption" or rules.preempt_signal is None or life.state not in ("starting", "running") \
            or life.spawning:
        return life, []
    return replace(life, checkpoint_asked=now), [
        Emit(ev.CheckpointRequested(life.name, signal=rules.preempt_signal, wait_s=rules.preempt_wait,
                                    cause=why)),
        Signal(rules.preempt_signal)]


def _on_restart(life: Life, inp: Restart, now: float, rules: Rules) -> Outcome:
    """A final component starts afresh; a waiting one skips its delay; a live one is stopped, then started."""
    s = life.state
    why = inp.cause or _cause_of(inp.by, inp.reason or f"restarted by {inp.by}")
    if life.run_stopping:  # the run is ending: nothing starts again in it
        return life, []
    if s in FINAL:
        return _fresh_start(life, inp.step, why), []
    if s in ("pending", "backoff") and not life.spawning:
        return replace(life, state="pending", want="run", timer=life.timer + 1, resume_step=inp.step,
                       policy=History(), waiting=(), start_cause=why), []
    life = replace(life, want="run", then_start=True, restart_by=inp.by, resume_step=inp.step, start_cause=why,
                   stop_cause=why)
    if s in ("starting", "running") and not life.spawning:
        return _begin_stop(life, rules, [], by=inp.by, reason=inp.reason, why=why)
    return life, []


def _on_start(life: Life, inp: Start, now: float, rules: Rules) -> Outcome:
    """A final component starts afresh; one in backoff skips its delay; otherwise nothing to do."""
    why = inp.cause or _cause_of(inp.by, f"started by {inp.by}")
    if life.run_stopping:
        return life, []
    if life.state in FINAL:
        return _fresh_start(life, None, why), []
    if life.state == "backoff":
        return replace(life, state="pending", timer=life.timer + 1, resume_step=None, waiting=(),
                       start_cause=why), []
    return life, []


def _on_exited(life: Life, inp: Exited, now: float, rules: Rules) -> Outcome:
    """The attempt ended: stopped (a stop), started again (a restart), else judged by the restart policy
    and the crash patterns of its history (-> backoff | completed | fatal)."""
    name = life.name
    # an exit judged later (exit_hold) ended when its monitor saw it (on the same clock, or it is not used)
    at_ok = inp.at is not None and inp.at <= now and (life.started_at is None or inp.at >= life.started_at)
    ended = inp.at if at_ok and inp.at is not None else now
    started = life.started_at if life.started_at is not None else ended
    uptime = max(0.0, ended - started)
    healthy = ended - life.ready_at if life.ready_at is not None else 0.0
    fx: list[Effect] = [Emit(ev.ComponentExited(name, exit_code=inp.exit_code, signal=inp.signal,
                                                uptime_s=round(uptime, 3), step=inp.step, diagnosis=inp.diagnosis,
                                                attempt=life.attempt)), StopProbes(), Cleanup()]
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

    record = AttemptRecord(
        attempt=life.attempt, started_at=started, ended_at=ended, ready=was_ready, exit_code=inp.exit_code,
        signal=inp.signal, step=inp.step, resumed_step=life.resumed_from,
        diagnosis=inp.diagnosis)
    history = (*life.history, record)[-20:]  # what the crash patterns look at
    if healthy >= rules.restart.reset_after:  # a healthy stretch ended the previous episode
        life = replace(life, episode=frozenset())
    life = replace(life, history=history)
    patterns = detect_attempt_patterns(history, total=inp.total if inp.total is not None else rules.total)
    false_success = next((f for f in patterns if f.type == "false_success"), None)
    if life.forced is not None:  # rlsup ended it: a failure already, whatever its exit code said
        patterns = [f for f in patterns if f.type != "false_success"]
        false_success = None
        how = life.forced
        why = life.stop_cause or Cause("probe", how, of="exited")
    elif false_success is not None:
        how = f"false_success: {false_success.message}"
        why = Cause("exit", how, of="exited")  # the exit judged a failure; "pattern" is for fatal crash patterns
    else:
        how = describe_exit(inp.exit_code, inp.signal)
        d = inp.diagnosis
        summary = d.summary
        shown = bool(summary) and d.category != "none" and (d.keys is None or "category" in d.keys)
        words = (summary if summary.startswith(how) else f"{how}: {summary}") if shown and summary else how
        why = Cause("exit", words, of="exited")
    success = life.forced is None and false_success is None and is_success(rules.restart, inp.exit_code, inp.signal)
    return _decide(replace(life, forced=None, stop_cause=None), now, rules, fx, success=success, how=how,
                   patterns=patterns, healthy=healthy, cause=why)


def _on(cls: type[_In], handler: Callable[[Life, _In, float, Rules], Outcome]) -> tuple[type[Any], _Handler]:
    """One row of :data:`_HANDLERS` (typed: mypy checks that the handler takes the class it is filed under)."""
    return cls, handler


_HANDLERS: dict[type[Any], _Handler] = dict([
    _on(DepsMet, _on_deps_met), _on(DepsWaiting, _on_deps_waiting), _on(DepsBlocked, _on_deps_blocked),
    _on(Spawned, _on_spawned), _on(SpawnFailed, _on_spawn_failed), _on(Adopted, _on_adopted),
    _on(Ready, _on_ready), _on(ReadyTimedOut, _on_ready_timed_out), _on(LivenessFailed, _on_liveness_failed),
    _on(Exited, _on_exited), _on(BackoffElapsed, _on_backoff_elapsed), _on(Healthy, _on_healthy),
    _on(Stalled, _on_stalled), _on(Unstalled, _on_unstalled), _on(Stop, _on_stop), _on(Restart, _on_restart),
    _on(Start, _on_start), _on(Shutdown, _on_shutdown), _on(RunStopping, _on_run_stopping),
])


def _begin_stop(life: Life, rules: Rules, fx: list[Effect], *, by: str, reason: str | None,
                why: Cause) -> Outcome:
    """-> stopping: say who stops it and why, stop probing, and send the stop signal."""
    fx.append(Emit(ev.ComponentStopping(life.name, by=by, signal=rules.stop_signal, reason=reason, cause=why)))
    fx += [StopProbes(), Terminate(rules.stop_signal, rules.stop_timeout)]
    return replace(life, state="stopping"), fx


def _force_stop(life: Life, rules: Rules, fx: list[Effect], reason: str, why: Cause) -> Outcome:
    """rlsup ends the attempt (readiness timeout, failed liveness, stall restart): a failure whatever its exit."""
    life, fx = _begin_stop(life, rules, fx, by="rlsup", reason=reason, why=why)
    return replace(life, forced=reason, stop_cause=why), fx


def _await_ready(life: Life, now: float, rules: Rules, fx: list[Effect]) -> Outcome:
    """Probe readiness; without a readiness probe (or taken over before it was recorded ready) it is ready now."""
    if rules.ready_probe is None:
        return _became_ready(life, now, rules, fx, "started (no readiness probe)")
    return replace(life, state="starting"), [*fx, Probe("ready")]


def _became_ready(life: Life, now: float, rules: Rules, fx: list[Effect], probe: str | None) -> Outcome:
    """-> running: emit ready (``probe`` None: an adopted attempt, ready already), probe liveness, arm healthy."""
    if probe is not None:
        life = replace(life, state="running", ready_at=now)
        fx.append(Emit(ev.ComponentReady(life.name, probe=probe)))
    timer = life.timer + 1
    fx += [Probe("alive")] if rules.alive else []
    fx.append(SetTimer("healthy", rules.restart.reset_after, timer))
    return replace(life, timer=timer), fx


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


def _decide(life: Life, now: float, rules: Rules, fx: list[Effect], *, success: bool, how: str, patterns: Any,
            healthy: float = 0.0, cause: Cause | None = None) -> tuple[Life, list[Effect]]:
    name = life.name
    decision, policy = decide(rules.restart, life.policy, success=success, how=how, healthy_s=healthy, now=now,
                              u=int.from_bytes(hashlib.sha256(f"{rules.seed}:{life.attempt}".encode()).digest()[:8],
                                               "big") / 2**64)  # the jitter draw: deterministic per attempt
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
                                           reason=decision.reason, cause=why)))
        fx.append(SetTimer("backoff", decision.delay_s, timer))
        return replace(life, state="backoff", timer=timer, start_cause=why), fx
    if decision.action == "complete":
        fx.append(Emit(ev.ComponentCompleted(name)))
        return replace(life, state="completed"), fx
    fx.append(Emit(ev.ComponentFatal(name, reason=decision.reason, why=why)))
    return replace(life, state="fatal", gave_up=why), fx

