"""A run whose supervisor is gone without ending it (a crash, ``kill -9``, a reboot of the daemon
alone): since when, what of it still runs under its monitors, and the command that takes it over.

Read-only: nothing here signals anything (ending such a run is :mod:`rlsup.supervisor.run.teardown`).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from ..monitor.process import is_monitor_of, pid_alive, records
from .layout import RunPaths, is_locked, read_owner


def last_sign_of_life(paths: RunPaths) -> float | None:
    """When the supervisor last wrote anything (the journal, state.json): about when it died. It
    writes state.json within seconds of any change while components run."""
    times = []
    for p in (paths.events, paths.state):
        with contextlib.suppress(OSError):
            times.append(p.stat().st_mtime)
    return max(times) if times else None


def still_running(paths: RunPaths) -> list[dict[str, Any]]:
    """The run's attempts whose monitors live: ``{component, attempt, pid, monitor_pid, alive, exit}``
    (``alive``: the component's process itself; a monitor outlives a component that exited)."""
    out = []
    for _, rec in records(paths.monitors):
        if not is_monitor_of(rec, paths.root):
            continue
        exited = rec.get("status") == "exited"
        out.append({"component": rec["component"], "attempt": rec["attempt"], "pid": rec["pid"],
                    "monitor_pid": rec["shim_pid"], "alive": not exited and pid_alive(int(rec["pid"])),
                    "exit": ({"exit_code": rec.get("exit_code"), "signal": rec.get("signal")} if exited else None)})
    return out


def supervisor_gone(paths: RunPaths, state: dict[str, Any], *, cwd: Path | None = None) -> dict[str, Any] | None:
    """What ``rlsup status`` says about a run whose supervisor died mid-way; None when a supervisor
    owns the run dir or the run ended."""
    run = state.get("run") or {}
    if is_locked(paths) or run.get("ended_at"):
        return None
    owner = read_owner(paths) or {}
    config = owner.get("config") or run.get("config")
    shown_cfg = _shown(Path(config), cwd) if config else "CONFIG"
    return {
        "pid": run.get("pid") or owner.get("pid"),
        "last_seen": last_sign_of_life(paths),
        "still_running": still_running(paths),
        # `up` finds its run dir from the config, not from ./runs: name it, so the hint pastes as printed.
        "take_over": f"rlsup up {shown_cfg} --run-dir {_shown(paths.root, cwd)}",
        "stop": "rlsup down" + ("" if paths.root.parent == (cwd or Path.cwd()) / "runs"
                                else f" --run-dir {_shown(paths.root, cwd)}"),
    }


def describe_gone(gone: dict[str, Any], now: float | None = None) -> list[str]:
    """The lines ``rlsup status`` prints for :func:`supervisor_gone`."""
    from ..records.events import fmt_duration

    now = time.time() if now is None else now
    seen = gone.get("last_seen")
    since = (f"since about {time.strftime('%H:%M:%S', time.localtime(seen))} ({fmt_duration(now - seen)} ago: "
             "its last write to the run dir)") if seen else "since an unknown time"
    out = [f"the supervisor (pid {gone.get('pid') or '?'}) is gone {since}; nothing restarts, probes or records "
           "the components now"]
    running = [r for r in gone["still_running"] if r["alive"]]
    ended = [r for r in gone["still_running"] if not r["alive"]]
    if running:
        out.append("still running under their monitors: "
                   + ", ".join(f"{r['component']} pid {r['pid']} (attempt {r['attempt']})" for r in running))
    for r in ended:
        ex = r.get("exit") or {}
        how = f"killed by {ex['signal']}" if ex.get("signal") else f"exit code {ex.get('exit_code')}"
        out.append(f"{r['component']} (pid {r['pid']}) ended meanwhile ({how}); its monitor keeps the record "
                   "for the next supervisor")
    if not gone["still_running"]:
        out.append("no component of the run is running any more")
    out.append(f"take it over (what runs keeps its pid): {gone['take_over']}")
    out.append(f"or end every process of it:           {gone['stop']}")
    return out


def _shown(p: Path, cwd: Path | None) -> str:
    try:
        return str(p.relative_to(cwd or Path.cwd()))
    except ValueError:
        return str(p)
