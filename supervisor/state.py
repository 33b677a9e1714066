"""The run's state as a pure reducer over events: ``apply(state, event) -> state``.

The supervisor and every client run the same reducer, so a client that has a snapshot and the
events after it sees exactly what the supervisor sees. The state has the shape of
``rlsup status --json`` (CONTRACT.md); times are absolute, :func:`view` derives ages.
"""

from __future__ import annotations

import copy
from typing import Any

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


def apply(state: dict[str, Any], e: dict[str, Any]) -> dict[str, Any]:
    """Fold one event into ``state`` (in place, for speed) and return it."""
    kind = e.get("kind")
    state["seq"] = max(state.get("seq", 0), e.get("seq", 0))
    if kind == "run_started":
        state["run"].update({k: e[k] for k in ("name", "run_dir", "config", "pid", "host", "version")
                             if k in e})
        state["run"]["started_at"] = e.get("ts")
        state["run"]["ended_at"] = None
        state["run"]["how"] = e.get("how", "new")
        for k in ("exit_code", "end_reason", "root", "handed_over"):
            state["run"].pop(k, None)
        how = e.get("how", "new")
        for n in e.get("components", []):
            c = state["components"].setdefault(n, new_component())
            if how in ("adopted", "continued"):  # the same run goes on: states stand until events change them
                continue
            if how == "resumed" and c.get("state") == "completed":
                continue  # a finished run resumed: what completed stays completed
            c.update(state="pending", pid=None, monitor_pid=None, next_start_at=None, waiting_for=[], rate=None,
                     eta_s=None, resources=None)
            c["flags"] = [f for f in c.get("flags") or [] if f.get("type") != "stall"]  # of an attempt now gone
        return state
    if kind == "run_ended":
        state["run"]["ended_at"] = e.get("ts")
        state["run"]["exit_code"] = e.get("exit_code")
        state["run"]["end_reason"] = e.get("reason")
        state["run"]["root"] = e.get("root")
        for c in state["components"].values():
            c.update(rate=None, eta_s=None)
        return state
    if kind == "supervisor_exited":
        state["run"]["handed_over"] = e.get("ts")
        return state
    if kind == "resources":
        for n, r in (e.get("components") or {}).items():
            if n in state["components"] and state["components"][n].get("pid"):  # live processes only
                state["components"][n]["resources"] = r
        return state
    if kind == "gpu":
        state["gpus"] = e.get("gpus", [])
        state["host"] = e.get("host")
        state["gpu_backend"] = e.get("backend")
        state["gpu_reason"] = e.get("reason")
        return state
    name = e.get("component")
    if name is None:
        return state
    c = state["components"].setdefault(name, new_component())
    if kind == "pending":
        c.update(state="pending", waiting_for=e.get("waiting_for", []), next_start_at=None)
    elif kind == "started":
        c.update(state="starting", pid=e.get("pid"), attempt=e.get("attempt", c["attempt"] + 1),
                 started_at=e.get("ts"), ready_at=None, waiting_for=[], reason=None, next_start_at=None,
                 resume=e.get("resume"), monitor_pid=e.get("monitor_pid"), cause=e.get("cause"),
                 config_hash=e.get("config_hash"))
        if e.get("log_seq") is not None or e.get("log_offset") is not None:
            # Where this attempt's output begins (a supervisor that takes the attempt over reads it here).
            c["attempt_log"] = {k: e.get(f"log_{k}") for k in ("seq", "offset", "ino")}
        if e.get("resume"):
            c["step"] = e["resume"].get("step")
    elif kind == "spawn_failed":
        c["attempt"] = e.get("attempt", c["attempt"])
        c["last_exit"] = {"exit_code": None, "signal": None, "uptime_s": 0.0, "step": None,
                          "diagnosis": e.get("diagnosis"), "ts": e.get("ts"), "error": e.get("error")}
        c["pid"] = None
    elif kind == "adopted":
        c.update(state=e.get("state", "running"), pid=e.get("pid"), attempt=e.get("attempt", c["attempt"]),
                 monitor_pid=e.get("monitor_pid"), next_start_at=None, waiting_for=[],
                 started_at=(e.get("ts") or 0) - (e.get("uptime_s") or 0))
    elif kind == "ready":
        c.update(state="running", ready_at=e.get("ts"))
    elif kind == "exited":
        c["last_exit"] = {k: e.get(k) for k in ("exit_code", "signal", "uptime_s", "step", "diagnosis")}
        c["last_exit"]["ts"] = e.get("ts")
        c.update(pid=None, monitor_pid=None, rate=None, eta_s=None, resources=None)
    elif kind == "restart_scheduled":
        c.update(state="backoff", restarts=c["restarts"] + 1, reason=e.get("reason"),
                 next_start_at=(e.get("ts") or 0) + (e.get("delay_s") or 0))
    elif kind == "completed":
        c.update(state="completed", pid=None, rate=None, eta_s=None, resources=None)
    elif kind == "fatal":
        c.update(state="fatal", pid=None, reason=e.get("reason"), rate=None, eta_s=None, resources=None)
    elif kind == "stopping":
        c.update(state="stopping")
    elif kind == "stopped":
        c.update(state="stopped", pid=None, next_start_at=None, rate=None, eta_s=None, resources=None)
    elif kind == "flag":
        flags = [f for f in c["flags"] if f.get("type") != e.get("type")]
        flags.append({k: e.get(k) for k in ("type", "message", "evidence", "action", "ts")})
        c["flags"] = flags[-MAX_FLAGS:]
    elif kind == "flag_cleared":
        c["flags"] = [f for f in c["flags"] if f.get("type") != e.get("type")]
    elif kind == "progress":
        for k in ("step", "total", "rate", "eta_s", "metrics", "metric", "series", "checkpoint", "watch",
                  "last_step_at"):
            if k in e:
                c[k] = e[k]
        if c["state"] != "running":  # rate and ETA are for running components only
            c.update(rate=None, eta_s=None)
        if e.get("history"):
            c["history"] = merge_history(c.get("history"), e["history"])
    return state


def view(state: dict[str, Any], now: float) -> dict[str, Any]:
    """A copy with derived ages (``uptime_s``) and the rate and ETA as they stand at ``now`` (wall
    time), as ``rlsup status --json`` and the fleet print it: a trainer with no new step for minutes
    shows a decayed rate, then none, never its last "3.27/s ETA 49s"."""
    out = copy.deepcopy(state)
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
