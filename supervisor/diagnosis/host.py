"""Host evidence: did the kernel's OOM killer take the process? (the parsers are pure: testable without root)"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

from ..records.diagnosis import HostEvidence

# "Out of memory: Killed process 25315 (python3) total-vm:..." (global and cgroup OOM),
# "oom-kill:constraint=...,task=python,pid=7899,uid=0", "oom_reaper: reaped process 25315 (python3)"
_KILLED = re.compile(r"(?:Out of memory|Memory cgroup out of memory): Killed process (?P<pid>\d+)")
_OOM_KILL = re.compile(r"oom-kill:.*?\bpid=(?P<pid>\d+)")
_REAPED = re.compile(r"oom_reaper: reaped process (?P<pid>\d+)")
# /dev/kmsg records are "prio,seq,usec,flags;message"
_KMSG_HEADER = re.compile(r"^\d+,\d+,\d+,[^;]*;")
_OOM_KILL_COUNT = re.compile(r"^\s*oom_kill\s+(\d+)\s*$", re.M)


def parse_kernel_log(text: str, pids: Iterable[int] | None = None) -> HostEvidence:
    """OOM-killer lines from kernel log text (dmesg output or /dev/kmsg records).

    With ``pids`` only lines naming one of them count; without, every OOM kill does.
    """
    wanted = set(pids) if pids is not None else None
    lines: list[str] = []
    killed: set[int] = set()
    for raw in text.splitlines():
        line = _KMSG_HEADER.sub("", raw).strip()
        m = next((m for pat in (_KILLED, _OOM_KILL, _REAPED) if (m := pat.search(line))), None)
        if m is None or (wanted is not None and int(m["pid"]) not in wanted):
            continue
        if m.re is not _REAPED:
            killed.add(int(m["pid"]))
        lines.append(line)
    return HostEvidence(tuple(lines[-12:]), frozenset(killed), None)


def parse_memory_events(text: str) -> int | None:
    """The ``oom_kill`` counter of a cgroup v2 memory.events file."""
    m = _OOM_KILL_COUNT.search(text)
    return int(m[1]) if m else None


def _read_kmsg(max_bytes: int = 4 << 20) -> str | None:
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    chunks: list[str] = []
    total = 0
    try:
        while total < max_bytes:
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError:
                # EPIPE when a record was overwritten under us: keep reading.
                continue
            if not rec:
                break
            total += len(rec)
            chunks.append(rec.decode("utf-8", "replace"))
    finally:
        os.close(fd)
    return "".join(chunks) if chunks else None


def _read_dmesg() -> str | None:
    try:
        r = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=3, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 and r.stdout else None


def _cgroup_memory_events() -> int | None:
    try:
        cg = Path("/proc/self/cgroup").read_text()
        rel = next(line[3:].strip().lstrip("/") for line in cg.splitlines() if line.startswith("0::"))
        return parse_memory_events((Path("/sys/fs/cgroup") / rel / "memory.events").read_text())
    except (OSError, StopIteration):  # no cgroup v2 entry, or its memory.events unreadable
        return None


def read_host_evidence(pid: int | None) -> HostEvidence:
    """The OOM kills /dev/kmsg (or ``dmesg``) names and this cgroup's ``oom_kill`` count, best effort: empty
    evidence when nothing is readable. Never raises."""
    try:
        ev = parse_kernel_log(_read_kmsg() or _read_dmesg() or "", {pid} if pid is not None else None)
        return HostEvidence(ev.kernel_lines, ev.oom_killed_pids, _cgroup_memory_events())
    except Exception:  # noqa: BLE001 - evidence is optional; a diagnosis must never fail on it
        return HostEvidence()
