"""The run's last net: nothing of a run may outlive it.

After every component has stopped, whatever is still of the run is killed: a process marked with the
run, left in one of its cgroups, a process a component's cleanup could not end (it no longer has a
monitor above it, nor perhaps a marker), or an orphan re-parented to the supervisor (the run's child
subreaper). Runs in a worker thread (it walks /proc); returns what could not be ended, in words.
"""

from __future__ import annotations

import os
import signal as signal_mod
from collections.abc import Iterable, Mapping
from pathlib import Path

import psutil

from . import process, shim
from .process import Cgroups, children_map, find_marked, pid_alive, started_since_boot, terminate_processes


def last_net(run_root: Path, unended: Iterable[Mapping[int, float | None]], *, cgroups: Cgroups | None,
             zygote: int | None, began: float) -> list[str]:
    """Kill what is left of the run at ``run_root``; ``unended``: each component's processes its
    cleanup could not end (pid -> start time); ``began``: when the supervisor began, since boot."""
    left = find_marked(str(run_root))
    candidates = {pid: t for u in [*unended, _orphans(zygote, began), _in_cgroups(cgroups)] for pid, t in u.items()}
    pids = {p.pid for p in left}
    left += [p for pid, started in candidates.items() if pid not in pids and (p := _ours(pid, started)) is not None]
    survivors = terminate_processes(left, signal_mod.SIGKILL, 1.0) if left else []
    if cgroups is not None:
        cgroups.remove_empty()
    return [_describe(p) for p in survivors]


def _orphans(zygote: int | None, began: float) -> dict[int, float | None]:
    """Orphans re-parented to us once their monitor had finished: an escapee that cleared its
    environment has no marker, and no monitor is above it any more. Only a process started since we
    began can be one (what a process embedding us started before is not)."""
    out: dict[int, float | None] = {}
    for pid in children_map(max_age=0.0).get(os.getpid(), []):
        since_boot = started_since_boot(pid)
        if pid != zygote and since_boot is not None and since_boot >= began and (started := process.start_time(pid)) is not None:
            out.setdefault(pid, started)
    return out


def _in_cgroups(cgroups: Cgroups | None) -> dict[int, float | None]:
    if cgroups is None or cgroups.base is None:
        return {}
    return {pid: None for d in cgroups.base.glob("*") for pid in shim.cgroup_pids(str(d))}


def _ours(pid: int, started: float | None) -> psutil.Process | None:
    """The live process ``pid`` if it is still the one seen (not ourselves, not a reused pid)."""
    if pid == os.getpid() or not pid_alive(pid):
        return None
    if started is not None:
        return process.same_process(pid, started)  # None where the pid was reused: not ours
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _describe(p: psutil.Process) -> str:
    try:
        return f"pid {p.pid} ({' '.join(p.cmdline())[:80]})"
    except Exception:  # noqa: BLE001 - describing a process that may be gone
        return f"pid {p.pid}"
