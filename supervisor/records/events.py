"""Events: what happened, as typed values (frozen dataclasses, past-tense names).

Inside the supervisor an event is one of the classes below; it becomes JSON only at the edges
(the journal, the control socket, ``state.json``) through :meth:`Event.to_dict`, where it gets
``ts`` (wall time, for people), ``seq`` and its ``kind`` (the names in docs/contract.md). What comes
back in over an edge (a journal line, a socket message) is turned into a typed :class:`Record` by
:func:`parse`, once: the reducer, :func:`describe` and the readers of a run dir match on classes.

Lifecycle events and flags are journaled and never dropped; gauges (``progress``, ``gpu``,
``resources``) are latest-wins and live only in state and on the wire.

A class is named for its kind, by one rule: a subject where the kind has none (``Component``, or
``Artefacts``), the kind in CamelCase, and a past participle where the kind is a bare noun (``Received``,
``Ended``, ``Raised``, ``Updated``, ``Sampled``): ``exited`` is ``ComponentExited``, ``run_started``
``RunStarted``, ``flag`` ``FlagRaised``, ``gpu`` ``GpuSampled`` (tests/supervisor/records/test_event_names.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Literal, TypeGuard, cast

from .diagnosis import Diagnosis
from .phrases import describe_exit, fmt_duration

__all__ = ["Diagnosis", "fmt_duration"]  # fmt_duration re-exported for older callers; defined in phrases


# ---------------------------------------------------------------------- what events carry inside them

CauseBy = Literal["run", "user", "component", "exit", "spawn", "probe", "stall", "dependency", "pattern",
                  "shutdown", "preemption"]


@dataclass(frozen=True)
class Cause:
    """Why a component was started, stopped, restarted or given up on: the one answer to "why"
    (``started.cause``, ``restart_scheduled.cause``, ``stopping.cause``, ``checkpoint_requested.cause``,
    ``fatal.why``).

    ``by`` is who or what decided it: ``run`` (the run's own first start of it, its dependencies met),
    ``user`` (a command), ``component`` (a command a component of the run sent, e.g. the trainer restarting
    the inference server its reload broke), ``exit`` (the previous attempt's exit, judged by the restart policy),
    ``spawn`` (it could not be started), ``probe`` (readiness timeout, failed liveness), ``stall``,
    ``dependency`` (restart_with, dependency_down, a dead dependency), ``pattern`` (a crash pattern
    such as repeated_error), ``shutdown`` or ``preemption`` (the platform takes the machine: a SIGTERM to the
    supervisor, Slurm's preemption or time-limit notice). ``reason`` says it in words; ``seq`` is the journal seq of
    the event that triggered it (a command, an exit, a flag). Inside one step the triggering event
    may not have a seq yet: ``of`` names its kind and the driver fills ``seq`` in as it emits it.
    ``component`` names the other component for ``dependency`` and ``component`` causes.
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
            out["of"] = self.of  # the driver replaces it with the seq (lifecycle.fill_event)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Cause:
        """From an event's dict (a value of the wrong type is read as absent)."""
        by, reason, seq, comp, of = (d.get(k) for k in ("by", "reason", "seq", "component", "of"))
        return cls(cast("CauseBy", by if isinstance(by, str) else "run"), reason if isinstance(reason, str) else "",
                   seq if _is_int(seq) else None, comp if isinstance(comp, str) else None,
                   of if isinstance(of, str) else None)

    def filled(self, seqs: Mapping[str, int]) -> Cause:
        """This cause with ``seq`` set from the seqs of the events just emitted (by kind)."""
        if self.seq is None and self.of is not None and self.of in seqs:
            return replace(self, seq=seqs[self.of], of=None)
        return self


@dataclass(frozen=True)
class Resume:
    """Where an attempt resumed from (``started.resume``): the checkpoint's step and its path."""

    step: int | None
    checkpoint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "checkpoint": self.checkpoint}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Resume:
        step, ck = d.get("step"), d.get("checkpoint")
        return cls(step if _is_int(step) else None, ck if isinstance(ck, str) else None)


# The typed records inside events, by the name their fields are annotated with: each has ``to_dict`` (what the
# journal holds) and ``from_dict`` (what :func:`parse` reads back).
PartClass = type[Cause] | type[Resume] | type[Diagnosis]
PARTS: dict[str, PartClass] = {"Cause": Cause, "Resume": Resume, "Diagnosis": Diagnosis}
_PART_TYPES = tuple(PARTS.values())


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str] = "?"
    gauge: ClassVar[bool] = False
    component: str | None

    def payload(self) -> dict[str, Any]:
        return {f.name: v.to_dict() if isinstance(v := getattr(self, f.name), _PART_TYPES) else v
                for f in fields(self) if f.name != "component"}

    def kind_name(self) -> str:
        """The kind it is journaled as (an :class:`UnknownEvent`'s own)."""
        return self.kind

    def to_dict(self, *, ts: float, seq: int) -> dict[str, Any]:
        return {"ts": round(ts, 6), "seq": seq, "kind": self.kind_name(), "component": self.component,
                **self.payload()}


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
    # completed | failed | stopped | preempted (RUN_OUTCOMES); "" in the journal of an rlsup before 0.4: see
    # run_outcome
    outcome: str = ""
    # A preempted run: each component with `resume:` -> the newest complete checkpoint it stands at,
    # {"step", "path"}, or None (none yet): where the next `rlsup up` continues it from.
    checkpoints: dict[str, Any] | None = None


# How a run can end: it ran to its end (``completed``), a component's failure ended it (``failed``), a person
# stopped it (``stopped``: `rlsup down`, Ctrl-C, a requeue after a node failure), or the platform took the
# machine (``preempted``: a SIGTERM to the supervisor, Slurm's preemption or time-limit notice), each
# component with `preempt:` asked to checkpoint first: `rlsup up` continues such a run without asking.
RUN_OUTCOMES = ("completed", "failed", "stopped", "preempted")


def run_outcome(e: RunEnded | Mapping[str, Any]) -> str:
    """How the run of this ``run_ended`` ended: its ``outcome``, or for a journal written before the field
    existed, what its exit code and reason say (a stop was exit code 0 too: never read it as completed)."""
    d = e if isinstance(e, Mapping) else {"outcome": e.outcome, "exit_code": e.exit_code, "reason": e.reason}
    if d.get("outcome") in RUN_OUTCOMES:
        return str(d["outcome"])
    reason = str(d.get("reason") or "")
    if d.get("exit_code") not in (0, None):
        return "failed"
    if reason.startswith("stopped by") or reason.endswith(" received") or "requeued" in reason \
            or "without a supervisor" in reason:
        return "stopped"
    return "completed"


@dataclass(frozen=True)
class SupervisorExited(Event):
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
    by: str = "user"  # "user", or "component NAME" for a command run by a component of the run
    client: str | None = None
    step: int | None = None
    reason: str | None = None  # what the sender said (`rlsup restart NAME --reason TEXT`)


# ---------------------------------------------------------------------- a component's lifecycle


@dataclass(frozen=True)
class ComponentPending(Event):
    kind = "pending"
    waiting_for: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ComponentStarted(Event):
    kind = "started"
    pid: int = 0
    attempt: int = 0
    resume: Resume | None = None
    command: list[str] = field(default_factory=list)
    # With `resume` configured and no complete checkpoint: why each candidate was not used.
    checkpoints_rejected: list[dict[str, Any]] | None = None
    monitor_pid: int | None = None
    cause: Cause | None = None  # why this attempt
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
class ComponentSpawnFailed(Event):
    kind = "spawn_failed"
    attempt: int = 0
    command: list[str] = field(default_factory=list)
    error: str = ""
    diagnosis: Diagnosis | None = None


@dataclass(frozen=True)
class ComponentAdopted(Event):
    kind = "adopted"
    pid: int = 0
    attempt: int = 0
    monitor_pid: int = 0
    uptime_s: float = 0.0
    state: str = "running"
    config_changed: bool = False


@dataclass(frozen=True)
class ComponentReady(Event):
    kind = "ready"
    probe: str = ""


@dataclass(frozen=True)
class ComponentExited(Event):
    kind = "exited"
    exit_code: int | None = None
    signal: str | None = None
    uptime_s: float = 0.0
    step: int | None = None
    diagnosis: Diagnosis | None = None
    attempt: int = 0


@dataclass(frozen=True)
class RestartScheduled(Event):
    kind = "restart_scheduled"
    delay_s: float = 0.0
    attempt: int = 0
    reason: str = ""
    cause: Cause | None = None


@dataclass(frozen=True)
class ComponentCompleted(Event):
    kind = "completed"


@dataclass(frozen=True)
class ComponentFatal(Event):
    kind = "fatal"
    reason: str = ""
    cause: str | None = None  # the component whose failure this one follows from (a dead dependency)
    # Why rlsup gave up, typed as every other cause. Named `why`, not `cause`, because `fatal.cause` is the
    # dependency's name since 0.2 and stays so.
    why: Cause | None = None


@dataclass(frozen=True)
class ComponentStopping(Event):
    kind = "stopping"
    by: str = ""
    signal: str = ""
    reason: str | None = None
    cause: Cause | None = None


@dataclass(frozen=True)
class ComponentStopped(Event):
    kind = "stopped"
    by: str = ""


@dataclass(frozen=True)
class CheckpointRequested(Event):
    """The platform is taking the machine: the component is asked (its ``preempt.signal``) to write a
    checkpoint, and given up to ``wait_s`` seconds before it is stopped in its turn."""

    kind = "checkpoint_requested"
    signal: str = ""
    wait_s: float = 0.0
    cause: Cause | None = None


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


# ---------------------------------------------------------------------- back from JSON: the parser at the edges


@dataclass(frozen=True)
class UnknownEvent(Event):
    """An event of a kind this version does not know (a newer rlsup wrote it): kept whole, so that
    a reader passes it on and shows it by its name instead of failing."""

    name: str = "?"
    data: dict[str, Any] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        return dict(self.data)

    def kind_name(self) -> str:
        return self.name


@dataclass(frozen=True)
class Record:
    """One event as it was journaled or sent: its time, its sequence number and the typed event.

    ``extra`` holds what this version has no field for (a newer writer's additions, or a value of
    the wrong type in an old journal, the field then keeping its default) and ``absent`` the fields
    the dict did not have (an older writer's): :meth:`to_dict` gives the original dict back, so a
    reader that passes records on (``rlsup events -f --json``) loses nothing and adds nothing."""

    ts: float
    seq: int
    event: Event
    extra: dict[str, Any] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()
    keys: tuple[str, ...] = field(default=(), compare=False, repr=False)  # the parsed dict's, in its order

    @property
    def kind(self) -> str:
        return self.event.kind_name()

    @property
    def component(self) -> str | None:
        return self.event.component

    def to_dict(self) -> dict[str, Any]:
        out = self.event.to_dict(ts=self.ts, seq=self.seq)
        for name in self.absent:
            out.pop(name, None)
        out.update(self.extra)
        if self.keys and tuple(out) != self.keys:  # a field this version lacks, in the middle: in its place again
            out = {k: out[k] for k in self.keys if k in out} | out
        return out


EVENT_CLASSES: tuple[type[Event], ...] = (
    RunStarted, RunEnded, SupervisorExited, LeftoversEnded, CommandReceived, ComponentPending,
    ComponentStarted, ComponentSpawnFailed, ComponentAdopted, ComponentReady, ComponentExited, RestartScheduled,
    ComponentCompleted, ComponentFatal, ComponentStopping, ComponentStopped, FlagRaised, FlagCleared, ArtefactsCleaned,
    CheckpointRequested, ProgressUpdated, GpuSampled, ResourcesSampled,
)
BY_KIND: dict[str, type[Event]] = {cls.kind: cls for cls in EVENT_CLASSES}
LIFECYCLE = frozenset(cls.kind for cls in EVENT_CLASSES if not cls.gauge)


def is_lifecycle(kind: str) -> bool:
    return kind in LIFECYCLE
_ENVELOPE = ("ts", "seq", "kind", "component")
_Check = Callable[[Any], bool]


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_CHECKS: dict[str, _Check] = {
    "int": _is_int, "float": _is_number, "str": lambda v: isinstance(v, str), "bool": lambda v: isinstance(v, bool),
    "list": lambda v: isinstance(v, list), "dict": lambda v: isinstance(v, dict),
    **{name: (lambda v: isinstance(v, dict)) for name in PARTS},  # a typed record is a dict in JSON
}


def _check_for(annotation: str) -> _Check:
    """Whether a JSON value fits a field annotated ``annotation`` ("int | None", "list[str]", ...): a
    list's items too, so a reader never meets a number where a list of names should be."""
    parts = [p.strip() for p in annotation.split("|")]
    optional = "None" in parts
    typ = next((p for p in parts if p != "None"), "Any")
    base, _, inner = typ.partition("[")
    fits = _CHECKS.get(base, lambda v: True)
    item = _CHECKS.get(inner.split("[", 1)[0].rstrip("]")) if base == "list" and inner else None
    if item is not None:
        outer, each = fits, item
        fits = lambda v: outer(v) and all(each(x) for x in v)  # noqa: E731
    if optional:
        return lambda v: v is None or fits(v)
    return fits


# Each class's fields: name, whether a JSON value fits it, and the class of the typed record it holds (:data:`PARTS`).
_FIELDS: dict[type[Event], tuple[tuple[str, _Check, PartClass | None], ...]] = {
    cls: tuple((f.name, _check_for(str(f.type)), PARTS.get(str(f.type).split("|")[0].strip()))
               for f in fields(cls) if f.name != "component")
    for cls in EVENT_CLASSES}


def _read_part(part_cls: PartClass, name: str, value: dict[str, Any], extra: dict[str, Any]) -> Any:
    """The typed record of field ``name`` read from its dict. Where the record would not write that dict back
    as it is (a damaged line, an older writer's shape), the dict is kept in ``extra`` too: the record's
    :meth:`Record.to_dict` gives it back unchanged, in its place."""
    part = part_cls.from_dict(value)
    if list(part.to_dict().items()) != list(value.items()):
        extra[name] = value
    return part


def parse(d: Mapping[str, Any]) -> Record:
    """The typed record of one event dict (a journal line, a socket message). Never raises: an
    unknown kind becomes an :class:`UnknownEvent`, unknown fields and values of the wrong type are
    kept in ``extra``, missing fields (an old journal) take their defaults and are remembered as
    ``absent``: ``parse(d).to_dict() == d``, keys in their order, for every dict an rlsup of any version wrote."""
    raw_ts, raw_seq, kind, comp = (d.get(k) for k in _ENVELOPE)
    ts = float(raw_ts) if _is_number(raw_ts) else 0.0
    seq = raw_seq if _is_int(raw_seq) else 0
    component = comp if comp is None or isinstance(comp, str) else str(comp)
    rest = {k: v for k, v in d.items() if k not in _ENVELOPE}
    absent = {k for k in ("ts", "seq", "component") if k not in d}
    cls = BY_KIND.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return Record(ts, seq, UnknownEvent(component, name=str(kind) if kind is not None else "?", data=rest),
                      absent=frozenset(absent), keys=tuple(d))
    if issubclass(cls, ResourcesSampled):
        if "components" not in rest:
            absent.add("components")
        comps = rest.pop("components") if isinstance(rest.get("components"), dict) else {}
        return Record(ts, seq, cls(component, data=comps), rest, frozenset(absent), tuple(d))
    if issubclass(cls, Gauge):
        return Record(ts, seq, cls(component, data=rest), absent=frozenset(absent), keys=tuple(d))
    kwargs: dict[str, Any] = {}
    for name, fits, part in _FIELDS[cls]:
        if name not in rest:
            absent.add(name)
        elif fits(rest[name]):
            value = rest.pop(name)
            kwargs[name] = _read_part(part, name, value, rest) if part is not None and value is not None else value
    return Record(ts, seq, cls(component, **kwargs), rest, frozenset(absent), tuple(d))


def part_dict(rec: Record, name: str) -> dict[str, Any] | None:
    """The typed record in field ``name`` of ``rec``'s event (its ``cause``, ``resume``, ``diagnosis``...) as
    the dict the line held: the record's own dict, or the line's where the record would not give it back as it
    was (:func:`parse` keeps that one in ``extra``); None where the event has none."""
    part = getattr(rec.event, name, None)
    if part is None:
        return None
    raw = rec.extra.get(name)
    return raw if isinstance(raw, dict) else part.to_dict()


def misfits(d: Mapping[str, Any]) -> list[str]:
    """The fields of ``d`` (an event of a known kind) whose value has the wrong type for it: what
    :func:`parse` keeps aside in ``extra`` (a damaged journal line's, or an unknown writer's)."""
    kind = d.get("kind")
    cls = BY_KIND.get(kind) if isinstance(kind, str) else None
    if cls is None or issubclass(cls, Gauge):
        return []
    return [name for name, fits, _ in _FIELDS[cls] if name in d and not fits(d[name])]


def as_record(e: Record | Mapping[str, Any]) -> Record:
    """``e`` as a record: parsed where it is still a dict (a caller that has not moved to records)."""
    return e if isinstance(e, Record) else parse(e)


# ---------------------------------------------------------------------- words (shared with clients)


def _run_started(e: RunStarted) -> str:
    how = {"resumed": "resumed", "continued": "continued", "adopted": "taken over"}.get(e.how or "new", "started")
    job = e.slurm
    where = f"job {job.get('job_id')} restart {job.get('restart_count')}, " if job else ""
    return (f"run {e.name} {how} ({where}supervisor pid {e.pid}, run dir {e.run_dir}; "
            f"{', '.join(e.components)})")


def _started(e: ComponentStarted) -> str:
    rej = e.checkpoints_rejected
    if e.resume:
        extra = f", resuming from step {e.resume.step}"
    elif rej:
        extra = (f", FROM SCRATCH: none of {len(rej)} checkpoint(s) is complete ("
                 + "; ".join(f"step {c.get('step')}: {c.get('reason')}" for c in rej[:3])
                 + (" ..." if len(rej) > 3 else "") + ")")
    else:
        extra = ""
    if e.step_id or e.nodes:
        extra += f"; step {e.step_id or '?'} on {','.join(e.nodes or [])}"
    return f"started pid {e.pid} (attempt {e.attempt}{extra})"


def _exited(e: ComponentExited) -> str:
    step = f" at step {e.step}" if e.step is not None else ""
    diag = e.diagnosis
    shown = diag is not None and diag.summary and diag.category != "none"
    return (f"{describe_exit(e.exit_code, e.signal)} after {fmt_duration(e.uptime_s)}{step}"
            + (f": {diag.summary}" if shown and diag is not None else ""))


def _progress(e: ProgressUpdated) -> str:
    d = e.data
    total = f"/{d['total']}" if d.get("total") else ""
    # a damaged line's values of the wrong type are left out, never raised on
    rate = f", {d['rate']:.2f} step/s" if _is_number(d.get("rate")) and d["rate"] else ""
    eta = f", ETA {fmt_duration(d['eta_s'])}" if _is_number(d.get("eta_s")) else ""
    metrics = d["metrics"] if isinstance(d.get("metrics"), dict) else {}
    shown = " ".join(f"{k} {v:.4g}" if _is_number(v) else f"{k} {v}" for k, v in list(metrics.items())[:4])
    return f"step {d.get('step')}{total}{rate}{eta}" + (f" | {shown}" if shown else "")


def standing(checkpoints: dict[str, Any] | None) -> str:
    """Where each resumable component of a preempted run stands (``run_ended.checkpoints``), in words:
    "; trainer at checkpoint step 37"; "" for none."""
    if not checkpoints:
        return ""
    return "; " + ", ".join(f"{n} at checkpoint step {c.get('step')}" if isinstance(c, dict) else
                            f"{n} with no checkpoint" for n, c in checkpoints.items())


# An adopted attempt runs what the config asked when it started; the config, read again, asks otherwise.
CONFIG_CHANGED = ("the config as read now (the file, a ${VAR}) asks another command, cwd or env than this attempt "
                  "runs: its next start runs it")

# One handler per class: what happened, in words (without time and component); else the kind names it.
_WORDS: dict[type[Event], Callable[[Any], str]] = {
    RunStarted: _run_started,
    RunEnded: lambda e: f"run ended: {e.reason} (exit code {e.exit_code})" + standing(e.checkpoints),
    SupervisorExited: lambda e: (f"supervisor exited ({e.reason}); {len(e.monitors)} component(s) keep "
                                     "running under their monitors"),
    ComponentPending: lambda e: "waiting for " + ", ".join(e.waiting_for) if e.waiting_for else "pending",
    ComponentStarted: _started,
    ComponentSpawnFailed: lambda e: f"could not start (attempt {e.attempt}): {e.error}",
    ComponentAdopted: lambda e: (f"taken over: pid {e.pid} (attempt {e.attempt}, up {fmt_duration(e.uptime_s)}, "
                                 f"monitor pid {e.monitor_pid})" + (f"; {CONFIG_CHANGED}" if e.config_changed else "")),
    ComponentReady: lambda e: f"ready ({e.probe})",
    ComponentExited: _exited,
    RestartScheduled: lambda e: f"restarting in {e.delay_s:.1f}s (attempt {e.attempt}; {e.reason})",
    ComponentFatal: lambda e: f"FATAL: {e.reason}",
    ComponentStopping: lambda e: f"stopping ({e.signal}, by {e.by}{f'; {e.reason}' if e.reason else ''})",
    ComponentStopped: lambda e: f"stopped (by {e.by})",
    CheckpointRequested: lambda e: (f"asked to checkpoint ({e.signal}; up to {fmt_duration(e.wait_s)} before it is "
                                    "stopped): " + ((e.cause.reason if e.cause else "") or "preemption")),
    FlagRaised: lambda e: f"FLAG {e.type}: {e.message}{f' -> {e.action}' if e.action else ''}",
    FlagCleared: lambda e: f"flag {e.type} cleared: {e.message}",
    LeftoversEnded: lambda e: (f"{len(e.pids)} process(es) {e.by} left behind (pid "
                               f"{', '.join(map(str, e.pids[:6]))}{' ...' if len(e.pids) > 6 else ''}): {e.action}"
                               if e.component else
                               f"ended {len(e.pids)} process(es) of the run that no monitor owned: {e.action}"),
    ProgressUpdated: _progress,
    ArtefactsCleaned: lambda e: (f"removed {len(e.paths)} artefact(s) of steps after {e.step} before resuming: "
                                 + ", ".join(e.paths[:5]) + (" ..." if len(e.paths) > 5 else "")),
    CommandReceived: lambda e: (f"command {e.command}{f' --step {e.step}' if e.step is not None else ''} from {e.by}"
                                f"{f' via {e.client}' if e.client else ''}" + (f": {e.reason}" if e.reason else "")),
}


def describe(e: Record | Mapping[str, Any]) -> str:
    """What happened, in words (without time and component)."""
    rec = as_record(e)
    words = _WORDS.get(type(rec.event))
    return words(rec.event) if words is not None else rec.kind


def human(e: Record | Mapping[str, Any], *, width: int = 12) -> str:
    rec = as_record(e)
    try:
        ts = time.strftime("%H:%M:%S", time.localtime(rec.ts))
    except (OverflowError, OSError, ValueError):  # a time no clock can show (a damaged journal line)
        ts = "--:--:--"
    comp = rec.component or "rlsup"
    return f"{ts} {comp:<{width}} {describe(rec)}"
