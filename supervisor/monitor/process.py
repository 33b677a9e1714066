"""The supervisor's side of process management: starting monitors, and one attempt's process tree.

Each attempt runs under its own monitor (:mod:`~rlsup.supervisor.monitor.shim`), forked from the
monitor *zygote* (:func:`~rlsup.supervisor.monitor.shim.zygote`), or started as its own interpreter
where the zygote cannot run.

An attempt's processes are found without trusting anything they could change: where the machine
allows it, every attempt runs in a cgroup v2 of its own (``cgroup.procs`` lists every process
whatever it did; ``cgroup.kill`` ends them all); otherwise the monitor is a child subreaper, so
every orphan of the attempt re-parents to it and its descendants are the attempt. Environment
markers (``RLSUP_RUN_DIR``, ``RLSUP_COMPONENT``) are kept as a last net for processes whose
monitor was killed.

Signals to a monitor go through a pidfd, so a recycled pid is never signalled by mistake.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import os
import signal as signal_mod
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import psutil

from . import shim

ENV_RUN_DIR = "RLSUP_RUN_DIR"
ENV_COMPONENT = "RLSUP_COMPONENT"
ENV_ATTEMPT = "RLSUP_ATTEMPT"
START_TIMEOUT_S = 30.0
MAX_INFLIGHT_STARTS = 32


def raise_fd_limit() -> int:
    """Raise this process's open-file limit to the hard limit (thousands of components hold thousands of
    log files and pidfds); return the soft limit it had, which components get back (monitors restore it
    in the child, as many programs misbehave with a huge one)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return soft


# The monitor's own (it is stdlib only and cannot import rlsup), also the supervisor's: one, not two.
signal_name = shim.signal_name


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _read_proc(path: str) -> bytes:
    """A small /proc file in one read (no buffered file object: three system calls, not six)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def _stat_fields(pid: int) -> list[bytes]:
    """The fields of /proc/PID/stat after the command name (field 3, the state, first); OSError when gone."""
    stat = _read_proc(f"/proc/{pid}/stat")
    return stat[stat.rfind(b")") + 2:].split()


def usage(pid: int) -> tuple[float, int] | None:
    """(CPU seconds so far, resident bytes) of one process, straight from /proc (sampled every few
    seconds for every process of every component: psutil's objects cost more than the reading)."""
    try:
        fields = _stat_fields(pid)
        statm = _read_proc(f"/proc/{pid}/statm")
        return (int(fields[11]) + int(fields[12])) / _TICK, int(statm.split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


def started_since_boot(pid: int) -> float | None:
    """When ``pid`` started, in seconds since boot (the clock of ``time.CLOCK_BOOTTIME``; to one
    clock tick, unlike psutil's ``create_time``, which adds the boot time rounded to a second)."""
    try:
        return int(_stat_fields(pid)[19]) / _TICK
    except (OSError, IndexError, ValueError):
        return None


def proc_state(pid: int) -> tuple[str, int | None]:
    """``pid``'s state letter (``R``, ``S``, ``D``, ``T`` stopped, ``t`` traced, ``Z`` zombie...; ``""``:
    no such process) and, for a zombie, the exit status its parent has not reaped yet (waitpid form,
    /proc/PID/stat field 52)."""
    try:
        fields = _stat_fields(pid)
    except OSError:
        return "", None
    state = fields[0].decode() if fields else ""
    if state != "Z" or len(fields) < 50:
        return state, None
    try:
        return state, int(fields[49])
    except ValueError:
        return state, None


def pid_alive(pid: int) -> bool:
    """Alive and not a zombie."""
    return proc_state(pid)[0] not in ("", "Z", "X")


def handles_signal(pid: int, signum: int) -> bool | None:
    """Whether ``pid`` has a handler for ``signum`` or ignores it now (/proc/PID/status: SigCgt, SigIgn); False:
    the signal's default action applies; None: not known (gone)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            masks = [int(v, 16) for k, _, v in (line.partition(b":") for line in f) if k in (b"SigCgt", b"SigIgn")]
    except (OSError, ValueError):
        return None
    return bool((masks[0] | masks[1]) >> (signum - 1) & 1) if len(masks) == 2 else None


# ---------------------------------------------------------------------- cgroups


@dataclass
class Cgroups:
    """One cgroup v2 per attempt under ``<our cgroup>/rlsup-<run>``, or None with the reason."""

    base: Path | None
    reason: str

    @classmethod
    def for_run(cls, run_dir: Path) -> Cgroups:
        if os.environ.get("RLSUP_CGROUPS", "auto") == "off":
            return cls(None, "disabled by RLSUP_CGROUPS=off")
        mount = _cgroup2_mount()
        if mount is None:
            return cls(None, "no cgroup v2 hierarchy is mounted")
        own = _own_cgroup()
        if own is None:
            return cls(None, "this process is not in a cgroup v2")
        tag = hashlib.sha256(str(run_dir).encode()).hexdigest()[:12]
        base = Path(mount) / own.lstrip("/") / f"rlsup-{tag}"
        try:
            base.mkdir(exist_ok=True)
        except OSError as e:
            return cls(None, f"cannot create a cgroup under {base.parent} ({e.strerror})")
        probe = base / ".probe"
        try:  # moving processes needs write access to cgroup.procs, which mkdir alone does not prove
            probe.mkdir(exist_ok=True)
            if not os.access(probe / "cgroup.procs", os.W_OK):
                raise PermissionError(errno.EACCES, "cgroup.procs is not writable")
            if not (probe / "cgroup.kill").exists():
                raise OSError(errno.ENOTSUP, "no cgroup.kill (kernel older than 5.14)")
        except OSError as e:
            for d in (probe, base):
                with contextlib.suppress(OSError):
                    d.rmdir()
            return cls(None, f"cgroups under {base.parent} are not usable ({e.strerror})")
        with contextlib.suppress(OSError):
            probe.rmdir()
        return cls(base, f"cgroup v2 ({base})")

    def for_attempt(self, component: str, attempt: int) -> str | None:
        if self.base is None:
            return None
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in component)
        p = self.base / f"{safe}.{attempt}"
        try:
            p.mkdir(exist_ok=True)
        except OSError:
            return None
        return str(p)

    def describe(self) -> str:
        return self.reason if self.base is not None else f"monitor subreaper ({self.reason})"

    def remove_empty(self) -> None:
        if self.base is None:
            return
        for d in sorted(self.base.glob("*"), reverse=True):
            if d.is_dir() and not shim.cgroup_pids(str(d)):
                with contextlib.suppress(OSError):
                    d.rmdir()
        with contextlib.suppress(OSError):
            self.base.rmdir()


def _proc_self(name: str, pick: Callable[[str], str | None]) -> str | None:
    """The first thing ``pick`` finds in a line of ``/proc/self/<name>`` (None: nothing, or unreadable)."""
    try:
        with open(f"/proc/self/{name}") as f:
            return next(filter(None, map(pick, f)), None)
    except OSError:
        return None


def _cgroup2_mount() -> str | None:
    return _proc_self("mountinfo", lambda line: line.split()[4] if line.partition(" - ")[2].startswith("cgroup2 ")
                      else None)


def _own_cgroup() -> str | None:
    return _proc_self("cgroup", lambda line: line[3:].strip() if line.startswith("0::") else None)


# ---------------------------------------------------------------------- one attempt


@dataclass
class AttemptProcesses:
    """One attempt's processes: the command (``pid``), the monitor above it, its cgroup and record.
    A handle to live processes, not a model of the attempt: what an attempt was (its start, exit,
    diagnosis) is :class:`.attempts.Attempt`, the one model of it."""

    component: str
    attempt: int
    pid: int
    monitor_pid: int
    record_path: Path
    cgroup: str | None = None
    started: float = 0.0  # wall
    started_mono: float = 0.0
    pidfd: int | None = None
    exit: dict[str, Any] | None = None  # the record's exit fields once the command exited
    monitor_gone: bool = False
    members_seen: dict[int, float | None] = field(default_factory=dict)  # pid -> start time (identity)
    signalled: dict[int, set[int]] = field(default_factory=dict)  # signal -> the pids it reached
    # When the command was first seen ended while its record still said running (monotonic; None: not
    # seen so): its monitor cannot record the exit (a read-only disk) or is stopped.
    unrecorded_since: float | None = None
    stuck: str | None = None  # why its monitor is flagged as stopped or wedged (None: it is not)
    monitor_d_since: float | None = None  # when its monitor was first seen in uninterruptible sleep
    # The launcher seam: None for a process of this machine; a Slurm step's launcher signals through
    # Slurm (slurm.launcher.SlurmLauncher.signal) and says whether the local tree must be spared.
    launcher: Any = None

    def open_pidfd(self) -> int | None:
        """A pidfd for the monitor (readable once it exits); None where the kernel has none."""
        if self.pidfd is None:
            with contextlib.suppress(OSError, AttributeError):
                self.pidfd = os.pidfd_open(self.monitor_pid)
        return self.pidfd

    def close(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None

    def members(self, children: dict[int, list[int]] | None = None) -> list[int]:
        """Every live process of the attempt (not the monitor itself). ``children`` is a pid ->
        children map to use (default: the monitor's subtree from the kernel's lists of children,
        :func:`.shim.children_of`, else :func:`children_map`, at most :data:`CHILDREN_MAX_AGE_S` old)."""
        pids: set[int] = set()
        if self.cgroup:
            # Every process the command started is in its cgroup, whatever it did: no need to walk /proc.
            pids.update(shim.cgroup_pids(self.cgroup))
        # An empty cgroup may also mean that the child could not join it: look at the monitor's subtree then.
        if not self.monitor_gone and not pids:
            # (without a map: the monitor's own children files where the kernel has them, not all of /proc)
            if children is None and not shim.HAS_CHILDREN_FILE:
                children = children_map()
            pids.update(shim.descendants(self.monitor_pid, children))
        pids.discard(self.monitor_pid)
        live = [p for p in pids if pid_alive(p)]
        for p in live:
            if p not in self.members_seen:
                self.members_seen[p] = start_time(p)
        return live

    def signal(self, signum: int) -> None:
        """Signal the process group and every member outside it (a member may have left the group).
        Each process gets the signal once: to many programs a second SIGINT or SIGTERM in a row
        means "stop now, skip the graceful part"."""
        if self.launcher is not None and self.launcher.signal(self, signum):
            return
        sent = self.signalled.setdefault(signum, set())
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signum)
        if self.cgroup and signum == signal_mod.SIGKILL:
            with contextlib.suppress(OSError), open(os.path.join(self.cgroup, "cgroup.kill"), "w") as f:
                f.write("1")
        for p in self.members():
            with contextlib.suppress(OSError):  # (gone meanwhile)
                if os.getpgid(p) != self.pid:  # the group got it from killpg
                    os.kill(p, signum)
            sent.add(p)

    def finish(self) -> None:
        """Tell the monitor to end what is left, drain, remove its record and exit."""
        if self.monitor_gone:
            return
        fd = self.open_pidfd()
        try:
            for sig in (signal_mod.SIGCONT, signal_mod.SIGUSR1):  # a stopped monitor must run to finish
                if fd is not None:
                    signal_mod.pidfd_send_signal(fd, sig)
                elif pid_alive(self.monitor_pid):
                    os.kill(self.monitor_pid, sig)
        except ProcessLookupError:
            self.monitor_gone = True
        except OSError:
            pass

    def monitor_alive(self) -> bool:
        if not self.monitor_gone and not pid_alive(self.monitor_pid):
            self.monitor_gone = True
        return not self.monitor_gone

    async def wait_monitor_gone(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the monitor to exit; whether it is gone.

        A pidfd of its own on the loop (readable the moment the monitor exits, zombie or reaped), so the
        next attempt starts as soon as this one's monitor is gone; a poll every 20 ms only where the
        kernel has no pidfd. Its own descriptor, not :attr:`pidfd`: that one may be on the loop already
        (the run's watch of the monitor), and a descriptor has one reader."""
        if not self.monitor_alive():
            return True
        loop = asyncio.get_running_loop()
        try:
            fd = os.pidfd_open(self.monitor_pid)
        except ProcessLookupError:
            self.monitor_gone = True
            return True
        except (OSError, AttributeError):
            deadline = time.monotonic() + timeout
            while self.monitor_alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            return not self.monitor_alive()
        gone: asyncio.Future[None] = loop.create_future()
        try:
            loop.add_reader(fd, _set_once, gone)
            if self.monitor_alive():  # it may have exited between the look and the pidfd
                with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                    await asyncio.wait_for(gone, timeout)
        finally:
            with contextlib.suppress(ValueError, OSError, RuntimeError):
                loop.remove_reader(fd)
            os.close(fd)
        return not self.monitor_alive()

    def read_record(self) -> dict[str, Any] | None:
        return shim.read_record(str(self.record_path))

    def remove_cgroup(self) -> None:
        if self.cgroup and not shim.cgroup_pids(self.cgroup):
            with contextlib.suppress(OSError):
                os.rmdir(self.cgroup)


CHILDREN_MAX_AGE_S = 0.2
CHILDREN_SHARE = 0.1  # of the time, at most, spent reading /proc for children_map
_children: tuple[float, dict[int, list[int]]] = (-1e9, {})
_children_cost = 0.0  # seconds the last pass over /proc took


def children_map(max_age: float = CHILDREN_MAX_AGE_S) -> dict[int, list[int]]:
    """pid -> child pids of every process, from one pass over /proc reused for ``max_age`` seconds, or
    longer where a pass is slow (at most about a tenth of the time goes to passes).

    A run with a thousand components asks for its attempts' members a thousand times in a row (a
    stop of all of them, a resources sample); one pass over /proc per question made that quadratic
    (minutes for 1,000 components). Thousands of processes make one pass cost tens of milliseconds,
    and thousands of components ending one after the other ask all the time: a pass every 0.2 s was
    half of a core (issue 44 item 2). A process forked since the pass is found by the next one, and
    the monitor kills whatever is left of its subtree when it finishes."""
    global _children, _children_cost
    now = time.monotonic()
    if now - _children[0] > max(max_age, _children_cost / CHILDREN_SHARE):
        fresh = shim._children_map()
        done = time.monotonic()
        _children, _children_cost = (done, fresh), done - now
    return _children[1]


def attempt_from_record(rec: dict[str, Any], path: Path) -> AttemptProcesses:
    return AttemptProcesses(component=str(rec["component"]), attempt=int(rec["attempt"]), pid=int(rec["pid"]),
                   monitor_pid=int(rec["shim_pid"]), record_path=path, cgroup=rec.get("cgroup"),
                   started=float(rec.get("started") or 0.0), started_mono=float(rec.get("started_mono") or 0.0))


def records(monitors_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every readable monitor record of a run dir (``<component>.<attempt>.json``)."""
    return [(p, rec) for p in sorted(monitors_dir.glob("*.json"))
            if (rec := shim.read_record(str(p))) is not None and {"component", "attempt", "shim_pid", "pid"} <= rec.keys()]


def is_monitor_of(rec: dict[str, Any], run_dir: Path) -> bool:
    """Whether the record's monitor process is alive and really this run's monitor (pid reuse)."""
    pid = int(rec.get("shim_pid") or 0)
    if pid <= 0 or not pid_alive(pid):
        return False
    try:
        p = psutil.Process(pid)
        cmd, started = p.cmdline(), p.create_time()
    except psutil.Error:
        return False
    is_shim = any(a.endswith("shim.py") for a in cmd)
    # A monitor forked from the zygote started at about the record's start time, before its child.
    return is_shim and started <= float(rec.get("started") or 0.0) + 5.0 and rec.get("run_dir") == str(run_dir)


# ---------------------------------------------------------------------- starting monitors


class StartError(Exception):
    def __init__(self, info: dict[str, Any]):
        self.info = info
        super().__init__(info.get("error") or "could not start")


class Monitors:
    """Starts monitors for one run: forks them from the zygote, else runs each as its own interpreter."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self._sock: socket.socket | None = None
        self._zygote: subprocess.Popen[bytes] | None = None
        self._zygote_failed: str | None = None
        self._lock = asyncio.Lock()
        # Starts in flight (sent, not answered): the zygote forks one monitor at a time, so without a
        # bound a burst of thousands queues behind it past START_TIMEOUT_S, two descriptors each.
        self._inflight = asyncio.Semaphore(MAX_INFLIGHT_STARTS)

    @property
    def zygote_pid(self) -> int | None:
        return self._zygote.pid if self._zygote is not None else None

    def _start_zygote(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._zygote = subprocess.Popen(
                [sys.executable, "-I", "-S", shim.__file__, "--zygote", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        finally:
            theirs.close()
        # Non-blocking, sent from the loop: the zygote forks one monitor at a time, and a burst of
        # starts (a thousand components) fills the socket; waiting for room must not block the loop,
        # and a thread per wait would make the supervisor's threads grow with its components.
        ours.setblocking(False)
        self._sock = ours

    async def start(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Start one attempt; the monitor's answer (``pid``, ``shim_pid``, start times). Raises
        :class:`StartError` with the reason when the command could not be started."""
        async with self._inflight:
            try:
                return await self._start(spec)
            except (OSError, asyncio.TimeoutError, TimeoutError, ValueError) as e:  # never leave a start hanging
                what = f"the monitor did not answer within {START_TIMEOUT_S:g}s" if isinstance(
                    e, (asyncio.TimeoutError, TimeoutError)) else f"could not start a monitor: {e}"
                raise StartError({"error": what, "type": "MonitorError", "errno": getattr(e, "errno", None)}) from e

    async def _start(self, spec: dict[str, Any]) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        r = w = -1
        try:
            async with self._lock:
                # The reply pipe only once it is our turn: thousands of starts queued at once must not
                # hold two descriptors each while they wait (EMFILE).
                r, w = os.pipe2(os.O_CLOEXEC)
                sent = self._zygote_failed is None and await self._send_to_zygote(loop, spec, w)
                if not sent:
                    await loop.run_in_executor(None, self._exec_monitor, spec, w)
            os.close(w)
            w = -1
            raw = await asyncio.wait_for(_read_line(r), START_TIMEOUT_S)
        finally:
            if w >= 0:
                os.close(w)
            if r >= 0:
                os.close(r)
        if not raw:
            raise StartError({"error": "the monitor died before it answered", "type": "MonitorError"})
        reply = json.loads(raw)
        if not reply.get("ok"):
            raise StartError(reply)
        return reply

    async def _send_to_zygote(self, loop: asyncio.AbstractEventLoop, spec: dict[str, Any], reply_fd: int) -> bool:
        """Hand the start request to the zygote, starting it (again) where it is not running; one more try
        after a failure. False once it cannot be used (why is kept in ``_zygote_failed``): the caller
        then starts the monitor as an interpreter of its own."""
        for _ in range(2):
            try:
                if self._sock is None or (self._zygote is not None and self._zygote.poll() is not None):
                    self._start_zygote()
                assert self._sock is not None
                try:
                    await _send_request(loop, self._sock, spec, reply_fd)
                except asyncio.CancelledError:
                    self._close_zygote()  # a request cut off mid-way: the stream is torn
                    raise
                self._zygote_failed = None
                return True
            except OSError as e:
                self._close_zygote()
                self._zygote_failed = f"{type(e).__name__}: {e}"
        return False

    def _exec_monitor(self, spec: dict[str, Any], reply_fd: int) -> None:
        p = subprocess.Popen([sys.executable, "-I", "-S", shim.__file__], stdin=subprocess.PIPE, stdout=reply_fd,
                             stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        assert p.stdin is not None
        p.stdin.write(json.dumps(spec).encode())
        p.stdin.close()

    def _close_zygote(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    def close(self) -> None:
        """The zygote exits when its socket closes; monitors it started live on."""
        self._close_zygote()
        if self._zygote is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._zygote.wait(2)


def _set_once(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def _send_request(loop: asyncio.AbstractEventLoop, sock: socket.socket, spec: dict[str, Any],
                        reply_fd: int) -> None:
    """One start request to the zygote, the reply pipe's write end attached to its first bytes."""
    head, body = shim.encode_request(spec)
    while True:
        try:
            sent = socket.send_fds(sock, [head], [reply_fd])
            break
        except (BlockingIOError, InterruptedError):
            room: asyncio.Future[None] = loop.create_future()
            loop.add_writer(sock.fileno(), partial(_set_once, room))
            try:
                await room
            finally:
                loop.remove_writer(sock.fileno())
    await loop.sock_sendall(sock, head[sent:] + body)


async def _read_line(fd: int) -> bytes:
    """The first line read from the pipe ``fd`` (without its newline; what came before EOF if none)."""
    reader = asyncio.StreamReader()
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(os.dup(fd), "rb", 0))
    try:
        return (await reader.readline()).rstrip(b"\n")
    finally:
        transport.close()


# ---------------------------------------------------------------------- processes marked with a run


def find_marked(run_dir: str, component: str | None = None, *, exclude: Iterable[int] = ()) -> list[psutil.Process]:
    """Live processes whose environment says they belong to ``run_dir`` (and ``component``)."""
    skip = set(exclude) | {os.getpid()}
    me = os.getuid()
    mine = (os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_STEP_ID"))
    out = []
    for p in psutil.process_iter(["uids"]):
        if p.pid in skip:
            continue
        try:
            uids = p.info.get("uids")
            if uids is not None and uids.real != me and me != 0:
                continue
            env = p.environ()
        except (psutil.Error, OSError):
            continue
        if env.get(ENV_RUN_DIR) != run_dir or not env.get(ENV_COMPONENT):
            # Both markers, as every process rlsup starts has them: a user's shell or an `rlsup`
            # client with $RLSUP_RUN_DIR exported (the documented way to pick a run) is not the run's.
            continue
        if env.get("SLURM_STEP_ID") is not None and (env.get("SLURM_JOB_ID"), env.get("SLURM_STEP_ID")) != mine:
            continue  # a task of a Slurm step (srun exports our markers): its srun, under a monitor, owns it
        if (component is None or env.get(ENV_COMPONENT) == component) and pid_alive(p.pid):  # not a zombie
            out.append(p)
    return out


def start_time(pid: int) -> float | None:
    """``pid``'s start time (its identity next to the number), None when it is gone or unreadable."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def same_process(pid: int, started: float | None) -> psutil.Process | None:
    """``pid`` as a psutil.Process only if it is still the process that started at ``started``: a pid
    listed a while ago (before a stop timeout of a minute or two, or by a GPU classification) may name
    another process by now. ``started`` None (never known): no proof, None."""
    if started is None:
        return None
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - started) > 0.01:
            return None
    except psutil.Error:
        return None
    return p


def kill_if_same(pid: int, started: float | None, sig: int) -> bool:
    """Send ``sig`` to ``pid`` only if it is still the process that started at ``started``."""
    p = same_process(pid, started)
    if p is None:
        return False
    try:
        p.send_signal(sig)  # psutil re-checks the identity it took when built
    except psutil.Error:
        return False
    return True


def terminate_processes(procs: Sequence[psutil.Process], sig: int, timeout: float) -> list[psutil.Process]:
    """Send ``sig``, wait up to ``timeout``, SIGKILL the rest (blocking). Returns what survived."""
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    _, alive = psutil.wait_procs(alive, timeout=5)
    return alive
