"""Ending a run whose supervisor is gone: ``rlsup down`` without a supervisor.

After a crash or ``kill -9`` of the supervisor, every component keeps running under its monitor
(and a monitor whose component had already exited keeps waiting, holding its record, for a
supervisor to read it). ``down`` must still end all of it. Only what is *proven* to be the run's is
signalled:

- an attempt under a live monitor of this run: the monitor's record names it, and
  :func:`process.is_monitor_of` checks that the monitor process is that record's (its command
  line and start time; a reused pid fails); the attempt's members are that monitor's cgroup or
  process tree;
- any other live process whose environment carries this run's marker (``RLSUP_RUN_DIR``), which
  only rlsup puts there.

Components are stopped in reverse dependency order, each with its configured stop signal, then
SIGKILL after its stop timeout; then each monitor is told to finish (it kills what is left of its
tree, records the exit and exits). What was done goes into the journal as a supervisor would have
written it (``stopping``, ``exited``, ``stopped``, ``run_ended``), so ``status``, ``report`` and the
next ``up`` read the run's true end. The run dir's lock is held throughout, so no supervisor can
start on the run while it is being taken down.
"""

from __future__ import annotations

import contextlib
import os
import signal as signal_mod
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..monitor.process import (
    AttemptProcesses,
    attempt_from_record,
    children_map,
    find_marked,
    is_monitor_of,
    pid_alive,
    records,
    signal_name,
    terminate_processes,
)
from ..records import events as ev
from ..records.diagnosis import Diagnosis
from ..rundir.journal import Journal
from ..rundir.layout import RunLock, RunPaths, read_owner
from ..rundir.replay import read_run


@dataclass
class Teardown:
    """What :func:`end_run` did, for the user and for tests."""

    previous: dict[str, Any] | None = None  # the lock's previous owner (the supervisor that is gone)
    stopped: list[str] = field(default_factory=list)  # "inference pid 123 (SIGTERM, exit ...)"
    finished_monitors: list[int] = field(default_factory=list)
    leftovers: list[int] = field(default_factory=list)  # marked processes no monitor owned, ended
    left: list[str] = field(default_factory=list)  # what could not be ended
    ended_run: bool = False  # a run_ended event was journaled (the run had not ended before)

    @property
    def nothing_found(self) -> bool:
        return not (self.stopped or self.finished_monitors or self.leftovers or self.left)


def end_run(paths: RunPaths, *, stops: dict[str, tuple[int, float]] | None = None,
            say: Callable[[str], object] = lambda _m: None, reason: str = "stopped by `rlsup down`") -> Teardown:
    """End every process of the run in ``paths`` while no supervisor owns it (raises
    ``rundir.LockHeld`` if one does). ``stops``: component -> (stop signal, timeout in seconds)."""
    lock = RunLock(paths)
    before = read_owner(paths) or {}
    # What the next `up` reads from the lock file (the config) stays; the pid is ours while we hold it.
    lock.acquire({**{k: v for k, v in before.items() if k in ("config", "name", "version")}, "by": "rlsup down"},
                 read_only_ok=True)
    out = Teardown(previous=lock.previous)
    journal = Journal(paths.events)
    try:
        _end(paths, out, stops or {}, say, journal, reason)
    finally:
        journal.close()
        lock.release()
    return out


def _end(paths: RunPaths, out: Teardown, stops: dict[str, tuple[int, float]], say: Callable[[str], object],
         journal: Journal, reason: str) -> None:
    def emit(event: ev.Event) -> None:
        journal.last_seq += 1
        journal.append(event.to_dict(ts=time.time(), seq=journal.last_seq))

    start, end = read_run(paths).last_run  # read before this teardown journals anything
    order = start.event.components if start is not None and isinstance(start.event, ev.RunStarted) else []
    rank = {n: i for i, n in enumerate(order)}
    # The attempts under live monitors of this run (each proven by is_monitor_of), in reverse dependency
    # order: consumers first, so none of them sees its dependency vanish first.
    attempts = sorted(((attempt_from_record(rec, p), rec) for p, rec in records(paths.monitors)
                       if is_monitor_of(rec, paths.root)), key=lambda ar: -rank.get(ar[0].component, len(rank)))
    sup = (out.previous or {}).get("pid")
    by = f"rlsup down (supervisor pid {sup} gone)" if sup else "rlsup down (no supervisor)"
    for att, rec in attempts:
        _end_attempt(paths, out, att, rec, stops, say, emit, by)
    _end_leftovers(paths, out, {a.monitor_pid for a, _ in attempts}, say, emit, by)
    for rp, rec in records(paths.monitors):  # records of monitors that died: nothing reads them now
        if not is_monitor_of(rec, paths.root):
            with contextlib.suppress(OSError):
                rp.unlink()
    if end is None or out.stopped or out.leftovers:
        what = f"{len(out.stopped)} component(s)" + (f", {len(out.leftovers)} leftover process(es)"
                                                    if out.leftovers else "")
        emit(ev.RunEnded(None, exit_code=0, reason=f"{reason} on {socket.gethostname()} without a supervisor"
                         + (f" (supervisor pid {sup} was gone)" if sup else "") + f": ended {what}",
                         left=out.left, outcome="stopped"))
        out.ended_run = True


def _end_attempt(paths: RunPaths, out: Teardown, att: AttemptProcesses, rec: dict[str, Any],
                 stops: dict[str, tuple[int, float]], say: Callable[[str], object],
                 emit: Callable[[ev.Event], None], by: str) -> None:
    """End one attempt: its tree (if still running) and its monitor, and journal its exit as a
    supervisor would have (an exit we asked for is no failure; one nobody watched is diagnosed)."""
    running = rec.get("status") != "exited" and att.pid and pid_alive(att.pid)
    if running:
        sig, timeout = stops.get(att.component, (signal_mod.SIGTERM, 30.0))
        say(f"stopping {att.component} (pid {att.pid}, attempt {att.attempt}) with {signal_name(sig)}")
        emit(ev.ComponentStopping(att.component, by="user", signal=signal_name(sig), reason=by))
        _stop_tree(att, sig, timeout, say)
    # The monitor records the exit, kills whatever is left of its tree, removes its record and exits.
    _wait(lambda: (att.read_record() or {}).get("status") == "exited" or not att.monitor_alive(), 5.0)
    final = att.read_record() or rec
    _finish_monitor(att, out)
    ended = float(final.get("ended") or time.time())
    uptime = max(0.0, ended - float(final.get("started") or ended))
    # An exit we asked for is no failure to diagnose (as the supervisor says it); one that
    # happened while nobody watched is diagnosed from its log.
    diag = ({"category": "none", "summary": f"stopped by {by} ({_how(final)})", "exception": None,
             "location": None, "step": None, "evidence": []} if running
            else _diagnose(paths, att.component, final))
    emit(ev.ComponentExited(att.component, exit_code=final.get("exit_code"), signal=final.get("signal"),
                            uptime_s=round(uptime, 3), attempt=att.attempt,
                            diagnosis=Diagnosis.from_dict(diag) if diag is not None else None))
    emit(ev.ComponentStopped(att.component, by="user"))  # final: a resumed run starts it again
    out.stopped.append(f"{att.component} pid {att.pid} ({_how(final)})" if running else
                       f"{att.component}: its monitor (pid {att.monitor_pid}; the component had already ended: "
                       f"{_how(final)})")
    with contextlib.suppress(OSError):
        att.remove_cgroup()


def _stop_tree(att: AttemptProcesses, sig: int, timeout: float, say: Callable[[str], object]) -> None:
    """Signal the attempt's process tree with ``sig``; SIGKILL what is left after ``timeout`` seconds."""
    att.members(children_map(max_age=0.0))  # remember each member's identity before signalling
    att.signal(sig)
    if not _wait(lambda: not att.members(children_map(max_age=0.0)), timeout):
        say(f"{att.component}: still running after {timeout:g}s; SIGKILL")
        att.signal(signal_mod.SIGKILL)


def _finish_monitor(att: AttemptProcesses, out: Teardown) -> None:
    """Tell the attempt's monitor to finish; SIGKILL it if it does not (noted in ``out.left`` if even that fails)."""
    att.finish()
    if not _wait(lambda: not pid_alive(att.monitor_pid), 10.0):  # a monitor told to finish drains for 2 s at most
        with contextlib.suppress(OSError):
            os.kill(att.monitor_pid, signal_mod.SIGKILL)
        if not _wait(lambda: not pid_alive(att.monitor_pid), 5.0):
            out.left.append(f"monitor pid {att.monitor_pid} of {att.component}")
    out.finished_monitors.append(att.monitor_pid)


def _end_leftovers(paths: RunPaths, out: Teardown, owned: set[int], say: Callable[[str], object],
                   emit: Callable[[ev.Event], None], by: str) -> None:
    """End the processes marked with this run that no monitor (of ``owned``) owned."""
    left = find_marked(str(paths.root), exclude=owned)
    if not left:
        return
    say(f"ending {len(left)} process(es) of the run that no monitor owned: {', '.join(str(p.pid) for p in left)}")
    survivors = terminate_processes(left, signal_mod.SIGTERM, 10.0)
    out.leftovers = [p.pid for p in left]
    out.left += [f"pid {p.pid}, marked with this run" for p in survivors]
    emit(ev.LeftoversEnded(None, pids=out.leftovers, by=by, survivors=[p.pid for p in survivors],
                           action="ended them (SIGTERM, then SIGKILL after 10 s)"))


def _how(rec: dict[str, Any]) -> str:
    if rec.get("signal"):
        return f"killed by {rec['signal']}"
    if rec.get("exit_code") is not None:
        return f"exit code {rec['exit_code']}"
    return "exit unknown"


def _diagnose(paths: RunPaths, component: str, rec: dict[str, Any]) -> dict[str, Any] | None:
    """An exit no supervisor saw: diagnosed from the end of its log, as a supervisor would have."""
    try:
        from ..diagnosis import diagnose
        from ..diagnosis.offline import read_tail

        lines = read_tail(Path(str(rec.get("log") or paths.log(component))), 1000)
        return diagnose(lines, exit_code=rec.get("exit_code"), signal=rec.get("signal")).to_dict()
    except Exception:  # noqa: BLE001 - a diagnosis must never stop a teardown
        return None


def _wait(pred: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
