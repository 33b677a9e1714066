"""The run's state as a pure reducer over events: ``apply(state, event) -> state``.

The supervisor and every client run the same reducer, so a client that has a snapshot and the
events after it sees exactly what the supervisor sees. The state has the shape of
``rlsup status --json`` (docs/contract.md); times are absolute, :func:`view` derives ages.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from . import events as ev
from .progress import current_rate, merge_history

STATES = ("pending", "starting", "running", "backoff", "stopping", "stopped", "completed", "fatal")
FINAL = frozenset({"stopped", "completed", "fatal"})
ACTIVE = frozenset({"pending", "starting", "running", "backoff", "stopping"})
MAX_FLAGS = 20


def new_component() -> dict[str, Any]:
    return {
        "state": "pending", "pid": None, "attempt": 0, "restarts": 0, "started_at": None,
        "ready_at": None, "step": None, "total": None, "rate": None, "eta_s": None, "metrics": {},
        "metric": None, "series": [], "last_exit": None, "flags": [], "checkpoint": None,
        "waiting_for": [], "reason": None, "next_start_at": None, "resume": None, "watch": {},
        "resources": None, "monitor_pid": None,
        "cause": None,  # why the current (latest) attempt was started: {by, reason, seq}
        "attempt_log": None,  # where its output begins: {seq, offset, ino}
        "config_hash": None,  # what the config asked its latest attempt to run (config.Component.fingerprint)
        # full-run metric history for charts: {metric: {"every", "lo", "hi", "points": [[step, mean, count]]}}
        "history": {},
    }


def initial(run: dict[str, Any], components: list[str]) -> dict[str, Any]:
    return {"run": dict(run), "components": {n: new_component() for n in components}, "gpus": [],
            "host": None, "gpu_backend": None, "gpu_reason": None, "seq": 0}


def apply(state: dict[str, Any], e: ev.Record | Mapping[str, Any]) -> dict[str, Any]:
    """Fold one event into ``state`` (in place, for speed) and return it. ``e`` is a record parsed
    at the edge (:func:`rlsup.supervisor.records.events.parse`); a dict is parsed here."""
    rec = ev.as_record(e)
    state["seq"] = max(state.get("seq", 0), rec.seq)
    event = rec.event
    run_handler = _RUN.get(type(event))
    if run_handler is not None:
        run_handler(state, event, rec)
        return state
    if event.component is None:
        if isinstance(event, (ev.FlagRaised, ev.FlagCleared)):  # the run's own (disk_unwritable, journal_gap...)
            state["run"].setdefault("flags", [])
            _COMPONENT[type(event)](state["run"], event, rec)
        return state
    c = state["components"].setdefault(event.component, new_component())  # any event names it known
    handler = _COMPONENT.get(type(event))
    if handler is not None:
        handler(c, event, rec)
    return state


# ---------------------------------------------------------------------- the run's events


def _run_started(state: dict[str, Any], e: ev.RunStarted, rec: ev.Record) -> None:
    run = state["run"]
    run.update(name=e.name, run_dir=e.run_dir, config=e.config, pid=e.pid, host=e.host, version=e.version,
               started_at=rec.ts, ended_at=None, how=e.how)
    for k in ("exit_code", "end_reason", "root", "handed_over", "checkpoints"):
        run.pop(k, None)
    for n in e.components:
        c = state["components"].setdefault(n, new_component())
        if e.how in ("adopted", "continued"):  # the same run goes on: states stand until events change them
            continue
        if e.how == "resumed" and c.get("state") == "completed":
            continue  # a finished run resumed: what completed stays completed
        c.update(state="pending", pid=None, monitor_pid=None, next_start_at=None, waiting_for=[], rate=None,
                 eta_s=None, resources=None)
        c["flags"] = [f for f in c.get("flags") or [] if f.get("type") != "stall"]  # of an attempt now gone


def _run_ended(state: dict[str, Any], e: ev.RunEnded, rec: ev.Record) -> None:
    state["run"].update(ended_at=rec.ts, exit_code=e.exit_code, end_reason=e.reason, root=e.root,
                        outcome=ev.run_outcome(e))
    if e.checkpoints is not None:  # a preempted run: where each resumable component stands
        state["run"]["checkpoints"] = e.checkpoints
    for c in state["components"].values():
        c.update(rate=None, eta_s=None)


def _resources(state: dict[str, Any], e: ev.ResourcesSampled, rec: ev.Record) -> None:
    for n, r in e.data.items():
        if n in state["components"] and state["components"][n].get("pid"):  # live processes only
            state["components"][n]["resources"] = r


def _gpu(state: dict[str, Any], e: ev.GpuSampled, rec: ev.Record) -> None:
    d = e.data
    state.update(gpus=d.get("gpus", []), host=d.get("host"), gpu_backend=d.get("backend"), gpu_reason=d.get("reason"))


_Handler = Callable[[dict[str, Any], Any, ev.Record], None]
_RUN: dict[type[ev.Event], _Handler] = {
    ev.RunStarted: _run_started, ev.RunEnded: _run_ended, ev.ResourcesSampled: _resources, ev.GpuSampled: _gpu,
    ev.SupervisorExited: lambda state, e, rec: state["run"].update(handed_over=rec.ts),
}


# ---------------------------------------------------------------------- a component's events

_GONE = {"pid": None, "rate": None, "eta_s": None, "resources": None}  # a process that is no more


def _started(c: dict[str, Any], e: ev.ComponentStarted, rec: ev.Record) -> None:
    c.update(state="starting", pid=e.pid, attempt=e.attempt or c["attempt"] + 1, started_at=rec.ts, ready_at=None,
             waiting_for=[], reason=None, next_start_at=None, resume=ev.part_dict(rec, "resume"),
             monitor_pid=e.monitor_pid, cause=ev.part_dict(rec, "cause"), config_hash=e.config_hash)
    if e.log_seq is not None or e.log_offset is not None:
        # Where this attempt's output begins (a supervisor that takes the attempt over reads it here).
        c["attempt_log"] = {"seq": e.log_seq, "offset": e.log_offset, "ino": e.log_ino}
    if e.resume:
        c["step"] = e.resume.step


def _spawn_failed(c: dict[str, Any], e: ev.ComponentSpawnFailed, rec: ev.Record) -> None:
    c["attempt"] = e.attempt or c["attempt"]
    c["last_exit"] = {"exit_code": None, "signal": None, "uptime_s": 0.0, "step": None,
                      "diagnosis": ev.part_dict(rec, "diagnosis"), "ts": rec.ts, "error": e.error}
    c["pid"] = None


def _exited(c: dict[str, Any], e: ev.ComponentExited, rec: ev.Record) -> None:
    c["last_exit"] = {"exit_code": e.exit_code, "signal": e.signal, "uptime_s": e.uptime_s, "step": e.step,
                      "diagnosis": ev.part_dict(rec, "diagnosis"), "ts": rec.ts}
    c.update(_GONE, monitor_pid=None)


def _flag(c: dict[str, Any], e: ev.FlagRaised, rec: ev.Record) -> None:
    flags = [f for f in c["flags"] if f.get("type") != e.type]
    flags.append({"type": e.type, "message": e.message, "evidence": e.evidence, "action": e.action, "ts": rec.ts})
    c["flags"] = flags[-MAX_FLAGS:]


PROGRESS_KEYS = ("step", "total", "rate", "eta_s", "metrics", "metric", "series", "checkpoint", "watch",
                  "last_step_at")


def _progress(c: dict[str, Any], e: ev.ProgressUpdated, rec: ev.Record) -> None:
    c.update({k: e.data[k] for k in PROGRESS_KEYS if k in e.data})
    if c["state"] != "running":  # rate and ETA are for running components only
        c.update(rate=None, eta_s=None)
    if e.data.get("history"):
        c["history"] = merge_history(c.get("history"), e.data["history"])


# One handler per class; a component event of a kind not listed (a command, a newer kind) only
# makes the component known.
_COMPONENT: dict[type[ev.Event], _Handler] = {
    ev.ComponentPending: lambda c, e, rec: c.update(state="pending", waiting_for=e.waiting_for, next_start_at=None),
    ev.ComponentStarted: _started, ev.ComponentSpawnFailed: _spawn_failed,
    ev.ComponentAdopted: lambda c, e, rec: c.update(state=e.state, pid=e.pid, attempt=e.attempt or c["attempt"],
                                                    monitor_pid=e.monitor_pid, next_start_at=None, waiting_for=[],
                                                    started_at=rec.ts - e.uptime_s),
    ev.ComponentReady: lambda c, e, rec: c.update(state="running", ready_at=rec.ts),
    ev.ComponentExited: _exited,
    ev.RestartScheduled: lambda c, e, rec: c.update(state="backoff", restarts=c["restarts"] + 1, reason=e.reason,
                                                    next_start_at=rec.ts + e.delay_s),
    ev.ComponentCompleted: lambda c, e, rec: c.update(_GONE, state="completed"),
    ev.ComponentFatal: lambda c, e, rec: c.update(_GONE, state="fatal", reason=e.reason),
    ev.ComponentStopping: lambda c, e, rec: c.update(state="stopping"),
    ev.ComponentStopped: lambda c, e, rec: c.update(_GONE, state="stopped", next_start_at=None),
    ev.FlagRaised: _flag, ev.ProgressUpdated: _progress,
    ev.FlagCleared: lambda c, e, rec: c.update(flags=[f for f in c["flags"] if f.get("type") != e.type]),
}


_ATOMS = (str, int, float, bool, type(None))


def _copy(o: Any) -> Any:
    """A deep copy of the JSON-shaped state, a third of ``copy.deepcopy``'s time (it keeps no memo: the state
    shares nothing); anything else in it is deep-copied as before. state.json at 10,000 components."""
    t = type(o)
    if t is dict:
        return {k: _copy(v) for k, v in o.items()}
    if t is list:
        return [_copy(v) for v in o]
    if t in _ATOMS:
        return o
    return copy.deepcopy(o)


def view(state: dict[str, Any], now: float) -> dict[str, Any]:
    """A copy with derived ages (``uptime_s``) and the rate and ETA as they stand at ``now`` (wall
    time), as ``rlsup status --json`` and the fleet print it: a trainer with no new step for minutes
    shows a decayed rate, then none, never its last "3.27/s ETA 49s"."""
    out: dict[str, Any] = _copy(state)
    for c in out["components"].values():
        live = c["state"] in ("starting", "running", "stopping") and c.get("started_at")
        c["uptime_s"] = round(now - c["started_at"], 3) if live else None
        if c.get("rate") is not None:
            c["rate"], c["eta_s"] = current_rate(c.get("rate"), c.get("eta_s"), c.get("last_step_at"),
                                                 c.get("step"), c.get("total"), now)
    run = out["run"]
    if run.get("started_at"):
        run["uptime_s"] = round((run.get("ended_at") or now) - run["started_at"], 3)
    return out
