"""What a previous supervisor of the run dir left running: monitors to adopt, processes to end.

Components run under monitors that outlive the supervisor: a supervisor that crashed, was killed or
is being upgraded leaves them running, and the next one on the same run dir *adopts* them. Live
monitors of a compatible protocol are kept for adoption; processes of the run that no live monitor
owns are ended; live monitors of another protocol are never touched (the start is refused).
"""

from __future__ import annotations

import contextlib
import signal as signal_mod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..monitor.process import (
    attempt_from_record,
    children_map,
    find_marked,
    is_monitor_of,
    records,
    terminate_processes,
)
from ..monitor.shim import PROTOCOL as MONITOR_PROTOCOL
from ..rundir.layout import RunPaths

if TYPE_CHECKING:
    from .component import Component

Record = tuple[Path, dict[str, Any]]


class IncompatibleMonitors(Exception):
    """Live monitors of a protocol this rlsup does not speak: never touched, the start refused."""


@dataclass
class Found:
    """What the run dir holds of an earlier supervisor."""

    live: list[Record] = field(default_factory=list)  # monitors to adopt
    orphans: list[Record] = field(default_factory=list)  # records of monitors that died
    leftovers: dict[str, Any] | None = None  # the ``leftovers_ended`` event's fields
    notes: list[str] = field(default_factory=list)  # for the user


def find(paths: RunPaths, previous: Mapping[str, Any] | None) -> Found:
    """Sort the monitor records; end the processes of the run that no live monitor owns. Raises
    :class:`IncompatibleMonitors`. ``previous``: the lock's record of the supervisor before."""
    found = Found()
    foreign: list[Record] = []
    for path, rec in records(paths.monitors):
        if is_monitor_of(rec, paths.root):
            (found.live if rec.get("protocol") == MONITOR_PROTOCOL else foreign).append((path, rec))
        else:
            found.orphans.append((path, rec))
    if foreign:
        desc = ", ".join(f"{r['component']} (monitor pid {r['shim_pid']}, protocol {r.get('protocol')})"
                         for _, r in foreign)
        raise IncompatibleMonitors(
            f"{paths.root} has live components under monitors of another rlsup version ({desc}); this "
            f"rlsup speaks monitor protocol {MONITOR_PROTOCOL}. They were left running. Manage the run with "
            "the rlsup version that started it, or stop it with that version's `rlsup down`.")
    if found.live:
        found.notes.append(f"taking over {len(found.live)} running component(s) from a supervisor that is gone: "
                           + ", ".join(f"{r['component']} pid {r['pid']}" for _, r in found.live))
    _end_unowned(paths, found, previous)
    return found


def _end_unowned(paths: RunPaths, found: Found, previous: Mapping[str, Any] | None) -> None:
    owned: set[int] = set()
    children = children_map(max_age=0.0)  # fresh: what is not owned now is ended below
    for path, rec in found.live:
        att = attempt_from_record(rec, path)
        owned.update(att.members(children))
        owned.add(att.monitor_pid)
    left = [p for p in find_marked(str(paths.root)) if p.pid not in owned]
    if not left:
        return
    by = f"supervisor pid {previous.get('pid')}" if previous else "an earlier supervisor"
    found.notes.append(f"found {len(left)} process(es) of this run that no monitor owns, left by {by}; ending them")
    survivors = terminate_processes(left, signal_mod.SIGTERM, 10.0)
    found.leftovers = {"pids": [p.pid for p in left], "by": by, "survivors": [p.pid for p in survivors],
                       "action": "ended them (SIGTERM, then SIGKILL after 10 s)"}
    if survivors:
        found.notes.append(f"could not end: {', '.join(str(p.pid) for p in survivors)}")


def take_over(found: Found, components: Mapping[str, Component], state: Mapping[str, Any],
              saved: Mapping[str, Any]) -> None:
    """Adopt the attempts whose monitors outlived the previous supervisor; tell the monitors of
    components no longer in the config to finish (which ends them); forget the records of dead ones."""
    for path, rec in found.live:
        c = components.get(str(rec["component"]))
        att = attempt_from_record(rec, path)
        if c is None:  # no longer in the config: its monitor is told to finish (which ends it)
            att.finish()
            continue
        prev = state["components"][c.name]
        ready = prev.get("state") == "running" or (prev.get("ready_at") is not None and prev.get("state") != "starting")
        c.adopt(att, rec, ready=ready, log_seq=_log_seq(prev, saved.get(c.name), att.attempt),
                config_hash=prev.get("config_hash"))
    for path, _rec in found.orphans:  # a monitor that died: its record is all that is left
        with contextlib.suppress(OSError):
            path.unlink()


def _log_seq(prev: Mapping[str, Any], saved: Any, attempt: int) -> int | None:
    """Where the adopted attempt's output begins, as its `started` event says, in the line numbering
    the recorded log position continues (without a recorded position the numbering starts again: unknown)."""
    numbered = saved.get("log") if isinstance(saved, dict) else None
    same = int(prev.get("attempt") or 0) == attempt
    if isinstance(numbered, dict) and numbered.get("ino") is not None and same:
        seq = (prev.get("attempt_log") or {}).get("seq")
        return int(seq) if seq is not None else None
    return None
