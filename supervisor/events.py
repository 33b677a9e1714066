"""Events: what happened, as typed values (frozen dataclasses, past-tense names).

Inside the supervisor an event is one of the classes below; it becomes JSON only at the edges
(the journal, the control socket, ``state.json``) through :meth:`Event.to_dict`, where it gets
``ts`` (wall time, for people), ``seq`` and its ``kind`` (the names in CONTRACT.md). Clients see
dicts and read them with :func:`describe` and :func:`human`, which both sides share.

Lifecycle events and flags are journaled and never dropped; gauges (``progress``, ``gpu``,
``resources``) are latest-wins and live only in state and on the wire.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from .phrases import describe_exit, fmt_duration

__all__ = ["fmt_duration"]  # re-exported for older callers; the one definition is in phrases


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str] = "?"
    gauge: ClassVar[bool] = False
    component: str | None

    def payload(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "component"}

    def to_dict(self, *, ts: float, seq: int) -> dict[str, Any]:
        out: dict[str, Any] = {"ts": round(ts, 6), "seq": seq, "kind": self.kind, "component": self.component}
        out.update(self.payload())
        return out


# ---------------------------------------------------------------------- the run


@dataclass(frozen=True)
class RunStarted(Event):
    kind = "run_started"
    name: str = ""
    run_dir: str = ""
    config: str = ""
    pid: int = 0
    host: str = ""
    version: str = ""
    components: list[str] = field(default_factory=list)
    # new | resumed (a finished run continued with --resume) | continued (its supervisor died mid-way)
    # | adopted (... and components it left running were taken over)
    how: str = "new"
    tracking: str = ""  # how processes are tracked: cgroup v2 (path) or the monitors' subreaper
    # In a Slurm job: {job_id, nodes, restart_count (SLURM_RESTART_COUNT: 1 after the first requeue)}
    slurm: dict[str, Any] | None = None


@dataclass(frozen=True)
class RunEnded(Event):
    kind = "run_ended"
    exit_code: int = 0
    reason: str = ""
    root: dict[str, Any] | None = None  # {"component", "reason"}: whose failure ended the run
    left: list[str] = field(default_factory=list)  # processes that could not be ended, described


@dataclass(frozen=True)
class SupervisorHandedOver(Event):
    kind = "supervisor_exited"
    reason: str = ""
    monitors: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class LeftoversEnded(Event):
    kind = "leftovers"
    pids: list[int] = field(default_factory=list)
    by: str = ""
    survivors: list[int] = field(default_factory=list)
    action: str = ""


@dataclass(frozen=True)
class CommandReceived(Event):
    kind = "command"
    command: str = ""
    by: str = "user"
    client: str | None = None
    step: int | None = None


# ---------------------------------------------------------------------- a component's lifecycle


@dataclass(frozen=True)
class ComponentWaiting(Event):
    kind = "pending"
    waiting_for: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ComponentStarted(Event):
    kind = "started"
    pid: int = 0
    attempt: int = 0
    resume: dict[str, Any] | None = None  # {"step", "checkpoint"}
    command: list[str] = field(default_factory=list)
    # With `resume` configured and no complete checkpoint: why each candidate was not used.
    checkpoints_rejected: list[dict[str, Any]] | None = None
    monitor_pid: int | None = None
    cause: dict[str, Any] | None = None  # why this attempt: {"by", "reason", "seq"} (lifecycle.Cause)
    # Where this attempt's output begins: the sequence number of its first line in the component's line
    # stream (the ring, the TUI, `logs --attempt`) and the byte offset in the log file (by inode) its
    # monitor appended to. A verdict about the attempt reads from here on, never its predecessor's lines.
    log_seq: int | None = None
    log_offset: int | None = None
    log_ino: int | None = None
    # As a Slurm step: its nodes and step id (J.S; null if Slurm had not created it within a few seconds).
    nodes: list[str] | None = None
    step_id: str | None = None
    # What the config asked it to run (config.Component.fingerprint): `--resume` starts again a completed
    # component whose configured command, cwd or env changed since.
    config_hash: str | None = None


@dataclass(frozen=True)
class StartFailed(Event):
    kind = "spawn_failed"
    attempt: int = 0
    command: list[str] = field(default_factory=list)
    error: str = ""
    diagnosis: dict[str, Any] | None = None


@dataclass(frozen=True)
class ComponentAdopted(Event):
    kind = "adopted"
    pid: int = 0
    attempt: int = 0
    monitor_pid: int = 0
    uptime_s: float = 0.0
    state: str = "running"


@dataclass(frozen=True)
class BecameReady(Event):
    kind = "ready"
    probe: str = ""


@dataclass(frozen=True)
class ComponentExited(Event):
    kind = "exited"
    exit_code: int | None = None
    signal: str | None = None
    uptime_s: float = 0.0
    step: int | None = None
    diagnosis: dict[str, Any] | None = None
    attempt: int = 0


@dataclass(frozen=True)
class RestartScheduled(Event):
    kind = "restart_scheduled"
    delay_s: float = 0.0
    attempt: int = 0
    reason: str = ""
    cause: dict[str, Any] | None = None


@dataclass(frozen=True)
class ComponentCompleted(Event):
    kind = "completed"


@dataclass(frozen=True)
class GaveUp(Event):
    kind = "fatal"
    reason: str = ""
    cause: str | None = None  # the component whose failure this one follows from (a dead dependency)
    # Why rlsup gave up, typed as every other cause ({"by", "reason", "seq"}, lifecycle.Cause). Named
    # `why`, not `cause`, because `fatal.cause` is the dependency's name since 0.2 and stays so.
    why: dict[str, Any] | None = None


@dataclass(frozen=True)
class StopBegan(Event):
    kind = "stopping"
    by: str = ""
    signal: str = ""
    reason: str | None = None
    cause: dict[str, Any] | None = None


@dataclass(frozen=True)
class ComponentStopped(Event):
    kind = "stopped"
    by: str = ""


@dataclass(frozen=True)
class FlagRaised(Event):
    kind = "flag"
    type: str = ""
    message: str = ""
    evidence: list[str] = field(default_factory=list)
    action: str = ""


@dataclass(frozen=True)
class FlagCleared(Event):
    kind = "flag_cleared"
    type: str = ""
    message: str = ""
    # What ended it, where that is not the condition going away: "attempt_ended" (a stall is of one
    # attempt: its end is not progress resumed). None: the condition itself cleared.
    by: str | None = None


@dataclass(frozen=True)
class ArtefactsCleaned(Event):
    kind = "cleaned"
    step: int = 0
    paths: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------- gauges (latest wins, not journaled)


@dataclass(frozen=True)
class Gauge(Event):
    """A sample whose fields are its data as they are (latest wins)."""

    gauge = True
    data: dict[str, Any] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        return dict(self.data)


@dataclass(frozen=True)
class ProgressUpdated(Gauge):
    kind = "progress"


@dataclass(frozen=True)
class GpuSampled(Gauge):
    kind = "gpu"


@dataclass(frozen=True)
class ResourcesSampled(Gauge):
    kind = "resources"
    # data: NAME -> {cpu_pct, rss_mb, gpu_mb}

    def payload(self) -> dict[str, Any]:
        return {"components": dict(self.data)}


LIFECYCLE = frozenset(
    cls.kind for cls in (
        RunStarted, RunEnded, SupervisorHandedOver, LeftoversEnded, CommandReceived, ComponentWaiting,
        ComponentStarted, StartFailed, ComponentAdopted, BecameReady, ComponentExited, RestartScheduled,
        ComponentCompleted, GaveUp, StopBegan, ComponentStopped, FlagRaised, FlagCleared, ArtefactsCleaned,
    ))
GAUGES = frozenset({"progress", "gpu", "resources"})


def is_lifecycle(kind: str) -> bool:
    return kind in LIFECYCLE


# ---------------------------------------------------------------------- words (shared with clients: dicts)


def describe(e: dict[str, Any]) -> str:
    """What happened, in words (without time and component)."""
    k = e.get("kind")
    if k == "run_started":
        comps = ", ".join(e.get("components", []))
        how = {"resumed": "resumed", "continued": "continued", "adopted": "taken over"}.get(e.get("how") or "new",
                                                                                            "started")
        job = e.get("slurm")
        where = f"job {job.get('job_id')} restart {job.get('restart_count')}, " if job else ""
        return f"run {e.get('name')} {how} ({where}supervisor pid {e.get('pid')}, run dir {e.get('run_dir')}; {comps})"
    if k == "run_ended":
        return f"run ended: {e.get('reason')} (exit code {e.get('exit_code')})"
    if k == "supervisor_exited":
        n = len(e.get("monitors") or [])
        return f"supervisor exited ({e.get('reason')}); {n} component(s) keep running under their monitors"
    if k == "pending":
        w = e.get("waiting_for") or []
        return "waiting for " + ", ".join(w) if w else "pending"
    if k == "started":
        r = e.get("resume")
        if r:
            extra = f", resuming from step {r['step']}"
        elif e.get("checkpoints_rejected"):
            rej = e["checkpoints_rejected"]
            extra = (f", FROM SCRATCH: none of {len(rej)} checkpoint(s) is complete ("
                     + "; ".join(f"step {c.get('step')}: {c.get('reason')}" for c in rej[:3])
                     + (" ..." if len(rej) > 3 else "") + ")")
        else:
            extra = ""
        if e.get("step_id") or e.get("nodes"):
            extra += f"; step {e.get('step_id') or '?'} on {','.join(e.get('nodes') or [])}"
        return f"started pid {e.get('pid')} (attempt {e.get('attempt')}{extra})"
    if k == "spawn_failed":
        return f"could not start (attempt {e.get('attempt')}): {e.get('error')}"
    if k == "adopted":
        return (f"taken over: pid {e.get('pid')} (attempt {e.get('attempt')}, up {fmt_duration(e.get('uptime_s'))}, "
                f"monitor pid {e.get('monitor_pid')})")
    if k == "ready":
        return f"ready ({e.get('probe')})"
    if k == "exited":
        step = f" at step {e['step']}" if e.get("step") is not None else ""
        diag = e.get("diagnosis") or {}
        summ = diag.get("summary")
        return (f"{describe_exit(e.get('exit_code'), e.get('signal'))} after {fmt_duration(e.get('uptime_s'))}{step}"
                + (f": {summ}" if summ and diag.get("category") != "none" else ""))
    if k == "restart_scheduled":
        return f"restarting in {(e.get('delay_s') or 0):.1f}s (attempt {e.get('attempt')}; {e.get('reason')})"
    if k == "completed":
        return "completed"
    if k == "fatal":
        return f"FATAL: {e.get('reason')}"
    if k == "stopping":
        why = f"; {e['reason']}" if e.get("reason") else ""
        return f"stopping ({e.get('signal')}, by {e.get('by')}{why})"
    if k == "stopped":
        return f"stopped (by {e.get('by')})"
    if k == "flag":
        action = f" -> {e['action']}" if e.get("action") else ""
        return f"FLAG {e.get('type')}: {e.get('message')}{action}"
    if k == "flag_cleared":
        return f"flag {e.get('type')} cleared: {e.get('message', '')}"
    if k == "leftovers":
        return f"found {len(e.get('pids', []))} process(es) left by a previous supervisor: {e.get('action')}"
    if k == "progress":
        total = f"/{e['total']}" if e.get("total") else ""
        rate = f", {e['rate']:.2f} step/s" if e.get("rate") else ""
        eta = f", ETA {fmt_duration(e['eta_s'])}" if e.get("eta_s") is not None else ""
        metrics = e.get("metrics") or {}
        shown = " ".join(f"{k} {v:.4g}" for k, v in list(metrics.items())[:4])
        return f"step {e.get('step')}{total}{rate}{eta}" + (f" | {shown}" if shown else "")
    if k == "cleaned":
        paths = e.get("paths") or []
        return (f"removed {len(paths)} artefact(s) of steps after {e.get('step')} before resuming: "
                + ", ".join(paths[:5]) + (" ..." if len(paths) > 5 else ""))
    if k == "command":
        via = f" via {e['client']}" if e.get("client") else ""
        step = f" --step {e['step']}" if e.get("step") is not None else ""
        return f"command {e.get('command')}{step} from {e.get('by', 'user')}{via}"
    return str(k or "?")


def human(e: dict[str, Any], *, width: int = 12) -> str:
    ts = time.strftime("%H:%M:%S", time.localtime(e.get("ts", 0)))
    comp = e.get("component") or "rlsup"
    return f"{ts} {comp:<{width}} {describe(e)}"
