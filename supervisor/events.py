"""Event kinds (past tense) and their one-line human form.

Events are plain JSON-able dicts: ``{"ts", "seq", "kind", "component", ...fields}``. Lifecycle
events and flags go to the journal and are never dropped; gauges (``progress``, ``gpu``) are
latest-wins and live only in state and on the wire.
"""

from __future__ import annotations

import time
from typing import Any

LIFECYCLE = frozenset({
    "run_started", "run_ended", "pending", "started", "ready", "exited", "restart_scheduled",
    "completed", "fatal", "stopping", "stopped", "flag", "flag_cleared", "leftovers", "command", "cleaned",
})
GAUGES = frozenset({"progress", "gpu"})


def is_lifecycle(kind: str) -> bool:
    return kind in LIFECYCLE


def fmt_duration(s: float | None) -> str:
    """``"4.2s"``, ``"3m05s"``, ``"2h07m"``, ``"3d04h"``; ``"?"`` when unknown."""
    if s is None:
        return "?"
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"



def describe(e: dict[str, Any]) -> str:
    """What happened, in words (without time and component)."""
    k = e.get("kind")
    if k == "run_started":
        comps = ", ".join(e.get("components", []))
        return f"run {e.get('name')} started (supervisor pid {e.get('pid')}, run dir {e.get('run_dir')}; {comps})"
    if k == "run_ended":
        return f"run ended: {e.get('reason')} (exit code {e.get('exit_code')})"
    if k == "pending":
        w = e.get("waiting_for") or []
        return "waiting for " + ", ".join(w) if w else "pending"
    if k == "started":
        r = e.get("resume")
        extra = f", resuming from step {r['step']}" if r else ""
        return f"started pid {e.get('pid')} (attempt {e.get('attempt')}{extra})"
    if k == "ready":
        return f"ready ({e.get('probe')})"
    if k == "exited":
        how = f"killed by {e['signal']}" if e.get("signal") else f"exited with code {e.get('exit_code')}"
        step = f" at step {e['step']}" if e.get("step") is not None else ""
        diag = e.get("diagnosis") or {}
        summ = diag.get("summary")
        return f"{how} after {fmt_duration(e.get('uptime_s'))}{step}" + (f": {summ}" if summ and diag.get("category") != "none" else "")
    if k == "restart_scheduled":
        return f"restarting in {e.get('delay_s'):.1f}s (attempt {e.get('attempt')}; {e.get('reason')})"
    if k == "completed":
        return "completed"
    if k == "fatal":
        return f"FATAL: {e.get('reason')}"
    if k == "stopping":
        return f"stopping ({e.get('signal')}, by {e.get('by')})"
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
        return f"removed {len(paths)} artefact(s) of steps after {e.get('step')} before resuming: " + ", ".join(paths[:5]) + (" ..." if len(paths) > 5 else "")
    if k == "command":
        via = f" via {e['client']}" if e.get("client") else ""
        step = f" --step {e['step']}" if e.get("step") is not None else ""
        return f"command {e.get('command')}{step} from {e.get('by', 'user')}{via}"
    return k or "?"


def human(e: dict[str, Any], *, width: int = 12) -> str:
    ts = time.strftime("%H:%M:%S", time.localtime(e.get("ts", 0)))
    comp = e.get("component") or "rlsup"
    return f"{ts} {comp:<{width}} {describe(e)}"
