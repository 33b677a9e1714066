"""``rlsup status`` as text: one line per component, then flags and the last exit of each."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..records.events import fmt_duration
from .bars import step_text


def _attempt(c: dict[str, Any]) -> str:
    r = c.get("restarts") or 0
    return f"{c.get('attempt', 0)}" + (f" ({r} restart{'s' if r != 1 else ''})" if r else "")


def _ckpt(c: dict[str, Any], now: float) -> str:
    ck = c.get("checkpoint")
    if not ck or ck.get("step") is None:
        return "-"
    age = f", {fmt_duration(now - ck['mtime'])} ago" if ck.get("mtime") else ""
    return f"step {ck['step']}{age}"


def _header(run: dict[str, Any]) -> str:
    """The run's line: its supervisor (live, gone, or ended) and its run dir."""
    up, who = fmt_duration(run.get("uptime_s")), f"pid {run.get('pid')} on {run.get('host')}"
    if run.get("supervisor_gone"):
        what = f"NO SUPERVISOR ({who} is gone)"
    elif run.get("ended_at") or ("supervisor" in run and run["supervisor"] is None):
        what = f"ended, no supervisor (the last was {who}, ran {up})"
    else:
        what = f"supervisor {who}, up {up}"
    return f"run {run.get('name')}  {what}  ({run.get('run_dir')})"


_COLUMNS = ("COMPONENT", "STATE", "PID", "ATTEMPT", "UPTIME", "STEP", "RATE", "ETA", "CHECKPOINT", "CPU", "RSS",
            "LOG RING")


def _opt(v: Any, fmt: Callable[[Any], str]) -> str:
    return "-" if v is None else fmt(v)


def _row(name: str, c: dict[str, Any], now: float) -> tuple[str, ...]:
    """One component's row of the table."""
    state = c.get("state", "?")
    if state == "backoff" and c.get("next_start_at"):
        state += f" ({max(0.0, c['next_start_at'] - now):.0f}s)"
    res = c.get("resources") or {}
    live = bool(c.get("pid"))  # CPU and RSS are of a live process only
    return (name, state, str(c.get("pid") or "-"), _attempt(c), _opt(c.get("uptime_s"), fmt_duration), step_text(c),
            f"{c['rate']:.2f}/s" if c.get("rate") else "-", _opt(c.get("eta_s"), fmt_duration), _ckpt(c, now),
            _opt(res.get("cpu_pct") if live else None, "{:.0f}%".format),
            _opt(res.get("rss_mb") if live else None, "{:.0f} MB".format), _opt(res.get("ring_mb"), "{:.1f} MB".format))


def _component_notes(name: str, c: dict[str, Any]) -> list[str]:
    """What a component waits for, why it is fatal, its last exit and its flags."""
    notes = []
    if c.get("waiting_for") and c.get("state") == "pending":
        notes.append(f"{name}: waiting for {', '.join(c['waiting_for'])}")
    if c.get("state") == "fatal" and c.get("reason"):
        notes.append(f"{name}: FATAL: {c['reason']}")
    if ex := c.get("last_exit"):
        how = f"killed by {ex['signal']}" if ex.get("signal") else f"exit code {ex.get('exit_code')}"
        d = ex.get("diagnosis") or {}
        summ = f": {d['summary']}" if d.get("summary") and d.get("category") != "none" else ""
        notes.append(f"{name}: last exit {how}{summ}")
    notes += [f"{name}: FLAG {f.get('type')}: {f.get('message')}" for f in c.get("flags") or []]
    return notes


def _gpu_line(g: dict[str, Any]) -> str:
    util = f"{g['util_pct']:.0f}%" if g.get("util_pct") is not None else "n/a"
    mem = (f"{g['mem_used_mb'] / 1024:.1f}/{g['mem_total_mb'] / 1024:.0f} GiB"
           if g.get("mem_used_mb") is not None and g.get("mem_total_mb") else "n/a")
    users = sorted({p.get("component") or f"pid {p['pid']} (outside the run)" for p in g.get("processes") or []})
    return f"gpu {g.get('index')} {g.get('name') or ''}: util {util}, mem {mem}" + (
        f"; {', '.join(users)}" if users else "")


def _gpu_lines(view: dict[str, Any]) -> list[str]:
    if gpus := view.get("gpus") or []:
        return ["", *(_gpu_line(g) for g in gpus)]
    return ["", f"gpus: none ({view['gpu_reason']})"] if view.get("gpu_reason") else []


def _ended_lines(run: dict[str, Any]) -> list[str]:
    """How the run ended and the two commands that go on from there."""
    if not run.get("ended_at"):
        return []
    # `up` finds its run dir from the config and the working directory: name both, so the
    # commands paste as printed from anywhere.
    up = f"rlsup up {_here(run['config']) if run.get('config') else 'CONFIG'}"
    where = f" --run-dir {_here(run['run_dir'])}" if run.get("run_dir") else ""
    return ["", f"run ended: {run.get('end_reason')} (exit code {run.get('exit_code')})",
            f"to go on from its checkpoints: {up} --resume{where}; to start anew: {up} --fresh{where}"]


def format_status(view: dict[str, Any]) -> str:
    now = time.time()
    run = view.get("run", {})
    comps = view.get("components", {})
    rows = [_COLUMNS, *(_row(n, c, now) for n, c in comps.items())]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    out = [_header(run), *("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows)]
    notes = [f"run: FLAG {f.get('type')}: {f.get('message')}" + (f" -> {f['action']}" if f.get("action") else "")
             for f in run.get("flags") or []]
    notes += [note for n, c in comps.items() for note in _component_notes(n, c)]
    if notes:
        out += ["", *notes]
    out += _gpu_lines(view) + _ended_lines(run)
    return "\n".join(out)


def display_path(p: Path) -> str:
    """``p`` relative to the working directory when it is below it (shorter to copy)."""
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def _here(path: str) -> str:
    return shlex.quote(display_path(Path(path)))  # to paste into a shell
