"""``rlsup status`` as text: one line per component, then flags and the last exit of each."""

from __future__ import annotations

import time
from typing import Any

from ..events import fmt_duration


def _step(c: dict[str, Any]) -> str:
    if c.get("step") is None:
        return "-"
    return f"{c['step']}/{c['total']}" if c.get("total") else str(c["step"])


def _attempt(c: dict[str, Any]) -> str:
    r = c.get("restarts") or 0
    return f"{c.get('attempt', 0)}" + (f" ({r} restart{'s' if r != 1 else ''})" if r else "")


def _ckpt(c: dict[str, Any], now: float) -> str:
    ck = c.get("checkpoint")
    if not ck or ck.get("step") is None:
        return "-"
    age = f", {fmt_duration(now - ck['mtime'])} ago" if ck.get("mtime") else ""
    return f"step {ck['step']}{age}"


def format_status(view: dict[str, Any], *, now: float | None = None) -> str:
    now = time.time() if now is None else now
    run = view.get("run", {})
    out = []
    up = fmt_duration(run.get("uptime_s")) if run.get("uptime_s") is not None else "?"
    if run.get("supervisor_gone"):
        out.append(f"run {run.get('name')}  NO SUPERVISOR (pid {run.get('pid')} on {run.get('host')} is gone)  "
                   f"({run.get('run_dir')})")
    elif run.get("ended_at") or ("supervisor" in run and run["supervisor"] is None):
        out.append(f"run {run.get('name')}  ended, no supervisor (the last was pid {run.get('pid')} on "
                   f"{run.get('host')}, ran {up})  ({run.get('run_dir')})")
    else:
        out.append(f"run {run.get('name')}  supervisor pid {run.get('pid')} on {run.get('host')}, up {up}  "
                   f"({run.get('run_dir')})")
    rows = [("COMPONENT", "STATE", "PID", "ATTEMPT", "UPTIME", "STEP", "RATE", "ETA", "CHECKPOINT", "CPU", "RSS",
             "LOG RING")]
    for name, c in view.get("components", {}).items():
        rate = f"{c['rate']:.2f}/s" if c.get("rate") else "-"
        eta = fmt_duration(c["eta_s"]) if c.get("eta_s") is not None else "-"
        uptime = fmt_duration(c["uptime_s"]) if c.get("uptime_s") is not None else "-"
        state = c.get("state", "?")
        if state == "backoff" and c.get("next_start_at"):
            state += f" ({max(0.0, c['next_start_at'] - now):.0f}s)"
        res = c.get("resources") or {}
        cpu = f"{res['cpu_pct']:.0f}%" if res.get("cpu_pct") is not None and c.get("pid") else "-"
        rss = f"{res['rss_mb']:.0f} MB" if res.get("rss_mb") is not None and c.get("pid") else "-"
        ring = f"{res['ring_mb']:.1f} MB" if res.get("ring_mb") is not None else "-"
        rows.append((name, state, str(c.get("pid") or "-"), _attempt(c), uptime, _step(c), rate, eta,
                     _ckpt(c, now), cpu, rss, ring))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    notes = []
    for name, c in view.get("components", {}).items():
        if c.get("waiting_for") and c.get("state") == "pending":
            notes.append(f"{name}: waiting for {', '.join(c['waiting_for'])}")
        if c.get("state") == "fatal" and c.get("reason"):
            notes.append(f"{name}: FATAL: {c['reason']}")
        ex = c.get("last_exit")
        if ex:
            how = f"killed by {ex['signal']}" if ex.get("signal") else f"exit code {ex.get('exit_code')}"
            d = ex.get("diagnosis") or {}
            summ = f": {d['summary']}" if d.get("summary") and d.get("category") != "none" else ""
            notes.append(f"{name}: last exit {how}{summ}")
        for f in c.get("flags") or []:
            notes.append(f"{name}: FLAG {f.get('type')}: {f.get('message')}")
    if notes:
        out.append("")
        out.extend(notes)
    gpus = view.get("gpus") or []
    if gpus:
        out.append("")
        for g in gpus:
            util = f"{g['util_pct']:.0f}%" if g.get("util_pct") is not None else "n/a"
            mem = (f"{g['mem_used_mb'] / 1024:.1f}/{g['mem_total_mb'] / 1024:.0f} GiB"
                   if g.get("mem_used_mb") is not None and g.get("mem_total_mb") else "n/a")
            users = sorted({p.get("component") or f"pid {p['pid']} (outside the run)"
                            for p in g.get("processes") or []})
            out.append(f"gpu {g.get('index')} {g.get('name') or ''}: util {util}, mem {mem}"
                       + (f"; {', '.join(users)}" if users else ""))
    elif view.get("gpu_reason"):
        out.append("")
        out.append(f"gpus: none ({view['gpu_reason']})")
    if run.get("ended_at"):
        out.append("")
        out.append(f"run ended: {run.get('end_reason')} (exit code {run.get('exit_code')})")
        # `up` finds its run dir from the config and the working directory: name both, so the
        # commands paste as printed from anywhere.
        up = f"rlsup up {_here(run.get('config')) or 'CONFIG'}"
        where = f" --run-dir {_here(run['run_dir'])}" if run.get("run_dir") else ""
        out.append(f"to go on from its checkpoints: {up} --resume{where}; to start anew: {up} --fresh{where}")
    return "\n".join(out)


def _here(path: str | None) -> str | None:
    """``path`` relative to the working directory when below it (shorter to paste), quoted for a shell."""
    import shlex
    from pathlib import Path

    if not path:
        return None
    try:
        shown = str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        shown = str(path)
    return shlex.quote(shown)
