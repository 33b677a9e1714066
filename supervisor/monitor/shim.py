"""The per-component monitor: owns one attempt's output, log and exit status, and outlives the supervisor.

Like containerd-shim or conmon, one monitor process sits above each attempt of a component. It
holds no policy: restarts, probes, progress and diagnosis are the supervisor's. What it does:

- forks the component's command in a session of its own (its pid is its process group), with
  stdout and stderr on one pipe that only the monitor reads, so the child never depends on the
  supervisor being alive, awake or fast;
- appends every byte of that pipe to ``logs/<component>.log``, rotating at line boundaries, and
  never lets a slow or full disk block the child (:class:`Pump`);
- is a child subreaper, so a grandchild that double-forks and calls setsid re-parents to it and
  stays findable; where the supervisor gave it a cgroup, the child runs in it;
- reaps the child and records its exit in ``monitors/<component>.json``.

The record (:class:`Record`) is written even when the disk is full. Signals: ``SIGUSR1`` means
*finish*: kill whatever is left of the attempt's tree, drain the pipe, remove the record and exit.
Stray signals meant for a terminal or a process group are ignored (:func:`_take_signals`).

Standard library only, and no import of rlsup: it runs as ``python -I -S shim.py`` (or is forked
from the monitor zygote, :func:`zygote`) and keeps running the code it started with while rlsup
is upgraded underneath it. :data:`PROTOCOL` versions the record and the zygote's request format.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import math
import mmap
import os
import select
import signal
import socket
import struct
import sys
import threading
import time

TYPE_CHECKING = False  # typing is not imported at run time: the monitor starts as `python -I -S shim.py`
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

PROTOCOL = 1
RECORD_SIZE = 8192  # preallocated: updates never need a new block (a full disk)
# Spare record slots in monitors/ (kept there by the supervisor while the disk has room): a record
# created on a full disk is written into one, and a finished record becomes one again.
SPARE_PREFIX = ".spare."
SPARE_SLOTS_MAX = 64
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
READ_SIZE = 1 << 20
PIPE_SIZE = 1 << 20
F_SETPIPE_SZ = 1031
PR_SET_CHILD_SUBREAPER = 36
MAX_PENDING = 256 << 20  # bytes waiting for a slow disk before output is dropped (counted)
# Output a read-only or failing disk refused, kept in memory (the newest) to be written once the disk
# takes it again; older bytes beyond it are counted as lost (on a full disk, all of it: see Pump.write).
HOLD_MAX = 4 << 20
GUARD_S = 1.0  # how often the guard looks for a stalled write
SMALL_READ = 64 << 10  # a read smaller than this rests the pipe (see rest_for) before the next
RATE_WINDOW_S = 1.0  # the recent output rate that decides whether resting is safe
REST_S = 0.06  # with the supervisor's 15 ms read pause: output reaches clients within ~0.1 s
REST_MAX_S = 1.0
WAKEUPS_PER_CORE_S = 250  # what chatty monitors may cost: a wakeup takes 65-230 us of CPU (2-6% of a core)
F_GETPIPE_SZ = 1032
STALL_S = 0.5  # a write this slow counts as stalled: the guard takes over draining the pipe
FINISH_DRAIN_S = 2.0


def rest_for(monitors: int, cores: int) -> float:
    """How long a chatty component's monitor rests between reads where the run has ``monitors`` of them on
    ``cores`` CPUs: REST_S, until their wakeups (each a Python process woken: 65-230 us of CPU where
    hundreds run, tests/perf/bench_chatty.py) would pass WAKEUPS_PER_CORE_S a core; then longer, up to
    REST_MAX_S. A thousand chatty components on 2 cores rest 1 s: at 60 ms their monitors took a core and
    left the supervisor waiting for a CPU; their output reaches clients up to a rest later."""
    return min(REST_MAX_S, max(REST_S, monitors / (WAKEUPS_PER_CORE_S * max(1, cores))))


# ---------------------------------------------------------------------- small helpers


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _quiet(call: Callable[..., object], *args: object) -> None:
    """``call(*args)``, an OSError ignored (what is being let go of may be gone already)."""
    try:
        call(*args)
    except OSError:
        pass


def _now() -> tuple[float, float]:
    return time.time(), time.monotonic()


def set_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process (Linux); False where unsupported."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children_map() -> dict[int, list[int]]:
    """pid -> child pids of every visible process (one pass over /proc)."""
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1:
            out.setdefault(int(fields[1]), []).append(int(name))
    return out


# /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN): one process's children without a pass over /proc
HAS_CHILDREN_FILE = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def children_of(pid: int) -> list[int] | None:
    """The children of ``pid``, from its threads' ``children`` files: a few small reads, where a pass over
    /proc reads every process's stat (thousands of monitors at once, each finishing: quadratic). None
    where the kernel has no such file: the caller makes the pass."""
    if not HAS_CHILDREN_FILE:
        return None
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for t in tids:
        try:
            with open(f"/proc/{pid}/task/{t}/children", "rb") as f:
                out.extend(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def descendants(root: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """Every live descendant of ``root`` (orphans re-parent to a subreaper, so none escape it);
    ``children`` is a parent -> children map already read from /proc, else each process's children
    are read from its own ``children`` files (or, without them, one pass over /proc now)."""
    kids: Callable[[int], list[int] | None] = children_of
    if children is not None or not HAS_CHILDREN_FILE:
        kids = (_children_map() if children is None else children).get
    out, frontier = [], [root]
    while frontier:
        for c in kids(frontier.pop()) or ():
            out.append(c)
            frontier.append(c)
    return out


def cgroup_pids(cgroup: str) -> list[int]:
    try:
        with open(os.path.join(cgroup, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


# ---------------------------------------------------------------------- the record


class Record:
    """``monitors/<component>.json``: what the supervisor (this one or the next) reads."""

    def __init__(self, path: str, data: dict):
        self.path = path
        self.data = data
        self._fd: int | None = None

    def prepare(self) -> None:
        """The record written and synced under a temporary name (:meth:`commit` renames it into place,
        :meth:`discard` drops it); on a full disk, where a new file gets no blocks, written in place into a
        spare slot (:data:`SPARE_PREFIX`, :data:`RECORD_SIZE` bytes written while there was room)."""
        tmp = f"{self.path}.tmp.{os.getpid()}"
        fd = -1
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            write_all(fd, self._encode())
            os.fsync(fd)
        except OSError as e:
            if fd >= 0:
                os.close(fd)
                os.unlink(tmp)
            if e.errno not in NO_SPACE:
                raise
            fd = self._from_spare(tmp, e)
        self._fd = fd

    def commit(self) -> None:
        """The prepared record renamed into place (the supervisor and the next one see it now)."""
        os.rename(f"{self.path}.tmp.{os.getpid()}", self.path)

    def discard(self) -> None:
        """A prepared record that is not to be: its file and descriptor gone."""
        if self._fd is not None:
            _quiet(os.close, self._fd)
            self._fd = None
        _quiet(os.unlink, f"{self.path}.tmp.{os.getpid()}")

    def _from_spare(self, tmp: str, error: OSError) -> int:
        """Claim a spare slot (renaming it is atomic: two monitors never get the same one) and write the
        record into it in place; the original error when no slot is left."""
        folder = os.path.dirname(self.path) or "."
        for name in _spares(folder):
            try:
                os.rename(os.path.join(folder, name), tmp)
            except OSError:
                continue  # another monitor took it first
            fd = os.open(tmp, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            try:
                os.pwrite(fd, self._encode(), 0)
                os.fsync(fd)
                return fd
            except OSError:
                os.close(fd)
                os.unlink(tmp)
        raise error

    def _encode(self) -> bytes:
        raw = json.dumps(self.data, separators=(",", ":")).encode()
        if len(raw) >= RECORD_SIZE:  # never in practice: the record holds no argv or env
            self.data = {k: self.data[k] for k in ("protocol", "component", "attempt", "shim_pid", "pid",
                                                   "status", "exit_code", "signal") if k in self.data}
            raw = json.dumps(self.data, separators=(",", ":")).encode()
        return raw + b" " * (RECORD_SIZE - 1 - len(raw)) + b"\n"

    def update(self, **fields: object) -> bool:
        """Rewrite in place (no new blocks needed); False if the disk refused even that."""
        self.data.update(fields)
        if self._fd is None:
            return False
        try:
            os.pwrite(self._fd, self._encode(), 0)
            os.fsync(self._fd)
            return True
        except OSError:
            return False

    def remove(self) -> None:
        """The record is done with: it becomes a spare slot again while the folder has too few (its
        blocks stay allocated for the next attempt on a full disk), else it is deleted."""
        folder = os.path.dirname(self.path) or "."
        try:
            if self._fd is not None and len(_spares(folder)) < SPARE_SLOTS_MAX:
                os.rename(self.path, os.path.join(folder, f"{SPARE_PREFIX}{os.getpid()}.{time.monotonic_ns()}"))
            else:
                os.unlink(self.path)
        except OSError:
            pass
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _spares(folder: str) -> list[str]:
    try:
        return [n for n in os.listdir(folder) if n.startswith(SPARE_PREFIX)]
    except OSError:
        return []


def read_record(path: str) -> dict | None:
    """A record, or None if it is absent or being written (read again on the next change)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            raw = os.read(fd, RECORD_SIZE * 2)
        finally:
            os.close(fd)
        data = json.loads(raw)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# ---------------------------------------------------------------------- the log


class LogFile:
    """Byte-exact append-only log rotated by size at a line boundary (``X.log`` -> ``X.log.1`` -> ...)."""

    def __init__(self, path: str, max_bytes: int, backups: int):
        self.path = path
        self.max_bytes = max(1, max_bytes)
        self.backups = backups
        self.fd = self._open()
        self.size = os.fstat(self.fd).st_size
        self.appended = 0  # bytes written by this object (a failed write says how far it got)
        self.at_line_start = True
        if self.size:
            with open(path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                self.at_line_start = f.read(1) == b"\n"

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)

    def write(self, data: bytes | memoryview) -> None:
        """Append ``data``; rotate so that each file stays within ``max_bytes`` and no line is split
        across files, except a line longer than ``max_bytes`` by itself."""
        if len(data) <= self.max_bytes - self.size:  # the common case: no rotation, no copy
            self._append(data)
            return
        data = bytes(data)
        while data:
            room = self.max_bytes - self.size
            if len(data) <= room:
                self._append(data)
                return
            nl = data.rfind(b"\n", 0, room) if room > 0 else -1  # the complete lines that still fit
            fresh_line = self.at_line_start and self.size
            if nl < 0 and not fresh_line:  # else finish the line this file holds the start of
                nl = data.find(b"\n")
                nl = nl if nl < self.max_bytes else -1
            # Up to that newline (nothing at a line start, or for a line longer than a whole file, which
            # has to be split), then a new file.
            if nl >= 0 or fresh_line or room <= 0:
                self._append(data[:nl + 1])
                data = data[nl + 1:]
                self.rotate()
                continue
            self._append(data[:room])
            data = data[room:]

    def _append(self, data: bytes | memoryview) -> None:
        if not data:
            return
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
            self.size += n
            self.appended += n
        self.at_line_start = data[-1] in (10, b"\n")

    def rotate(self) -> None:
        """The next file. The current one stays open until its successor is: a disk that refuses the
        renames or the new file (read-only, failing) leaves the log as it was, never a closed fd."""
        if self.backups > 0:
            for i in range(self.backups - 1, 0, -1):
                src = f"{self.path}.{i}"
                if os.path.lexists(src):
                    os.replace(src, f"{self.path}.{i + 1}")
            os.replace(self.path, f"{self.path}.1")
            fd = self._open()
        else:
            fd = os.open(self.path, os.O_WRONLY | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW)
        os.close(self.fd)
        self.fd = fd
        self.size = 0
        self.at_line_start = True

    def position(self) -> dict | None:
        try:
            st = os.fstat(self.fd)
        except OSError:
            return None
        return {"ino": st.st_ino, "offset": st.st_size}

    def close(self) -> None:
        _quiet(os.fsync, self.fd)
        os.close(self.fd)


class Pump:
    """Moves the child's output from its pipe to the log, in the monitor's own thread.

    Writing inline is the cheap path (no thread hand-off per line, which costs two context switches
    for a component printing a line every few milliseconds). So that a slow or hung disk still never
    blocks the child, a *guard* thread looks once a second at how long the current write has been
    going on; past :data:`STALL_S` it drains the pipe into memory (up to ``max_pending`` bytes;
    beyond that the bytes are dropped and counted) until the write returns, and that backlog is
    written first, in order. A write that fails (a full disk) drops its bytes, counted; once writing
    works again a marker line says how many were lost, and ``on_state`` reports both changes.
    """

    def __init__(self, fd: int, log: LogFile, on_state: Callable[[str | None, int], object], *,
                 max_pending: int = MAX_PENDING,
                 record: str | None = None):
        self.fd = fd
        self.record = record  # gone = the run dir was deleted or moved: nobody will ever read us
        self.log = log
        self.on_state = on_state  # (error or None, lost bytes): called from the monitor's thread
        self.max_pending = max_pending
        self.lock = threading.Lock()  # one reader of the pipe at a time; the backlog
        self.backlog: list[bytes] = []
        self.backlog_bytes = 0
        self.held: list[bytes] = []  # output the log refused, oldest first (at most HOLD_MAX bytes)
        self.held_bytes = 0
        self.lost = 0
        self.announced = 0
        self.failing = False
        self.wrote = False  # a write of this attempt's output has succeeded
        self.eof = False
        self.writing_since = 0.0  # monotonic start of the write under way, 0.0 when none
        # An anonymous mapping, not a bytearray: only the pages a read fills cost memory (a chatty
        # component's few lines touch one or two; a bytearray would be zero-filled, all 1 MiB of it).
        self.buf = mmap.mmap(-1, READ_SIZE)
        self.view = memoryview(self.buf)
        self._stop = threading.Event()
        self._guard = threading.Thread(target=self._watch, name="pump-guard", daemon=True)

    def start(self) -> None:
        self._guard.start()

    def pump(self) -> int:
        """Read what the pipe holds now and write it (with any backlog first); the bytes moved.

        Reads go into one reused buffer and each is written at once: no fresh megabyte per read (page
        faults), no joining, and the writer is never kept waiting while big chunks are assembled. A
        short read means the pipe is empty for now (no extra read just to be told EAGAIN)."""
        moved = 0
        while True:
            with self.lock:
                backlog, self.backlog, self.backlog_bytes = self.backlog, [], 0
                n = 0
                if not self.eof:
                    try:
                        n = os.readv(self.fd, [self.buf])
                    except BlockingIOError:
                        n = -1
                    except OSError:
                        n = 0
                    if n == 0:
                        self.eof = True
            for chunk in backlog:
                self.write(chunk)
                moved += len(chunk)
            if n > 0:
                self.write(self.view[:n])
                moved += n
            if n < len(self.buf):
                return moved

    def write(self, data: bytes | memoryview) -> None:
        """Append ``data`` to the log. While the log refuses (a read-only or failing disk) the newest
        :data:`HOLD_MAX` bytes wait in memory and older ones are counted as lost (a full disk: all of
        them); once a write works, a marker line says how many were lost, then what waited, in order."""
        self.writing_since = time.monotonic() or 1e-9
        try:
            try:
                while self.held:
                    self._write_part(self.held[0], held=True)
                    self.held_bytes -= len(self.held.pop(0))
            except OSError:
                self._hold(bytes(data))  # behind what already waits
                raise
            self._write_part(data)
            if self.failing or not self.wrote:
                # The first write that worked (of this attempt, or since a failure): the record says
                # so, and only then does the supervisor clear a disk_full flag.
                self.failing = False
                self.wrote = True
                self.on_state(None, self.lost)
        except OSError as e:
            if not self.failing:
                self.failing = True
                self.on_state(f"{errno.errorcode.get(e.errno or 0, 'OSError')}: {e.strerror or e}", self.lost)
        finally:
            self.writing_since = 0.0

    def _write_part(self, data: bytes | memoryview, held: bool = False) -> None:
        """Write ``data`` after the marker of what was lost; what the log refused of it is held (a held
        chunk keeps its place: only its unwritten end stays)."""
        before = None
        try:
            unannounced = self.lost - self.announced
            if unannounced:
                self.log.write(f"\n[rlsup: {unannounced} bytes of output were lost while the log could not be "
                               f"written]\n".encode())
                self.announced += unannounced
            before = self.log.appended
            self.log.write(data)
        except OSError as e:
            rest = data[self.log.appended - before:] if before is not None else data
            if held:
                self.held_bytes -= len(self.held[0]) - len(rest)
                self.held[0] = bytes(rest)
            elif e.errno in NO_SPACE:
                # A full disk: dropped at once (counted). Held bytes would wait for the very blocks a
                # component filling the disk takes first; a read-only or failing disk takes nothing.
                self.lost += len(rest)
            else:
                self._hold(bytes(rest))
            raise

    def _hold(self, data: bytes) -> None:
        self.held.append(data)
        self.held_bytes += len(data)
        while self.held_bytes > HOLD_MAX and self.held:
            old = self.held.pop(0)
            self.held_bytes -= len(old)
            self.lost += len(old)

    def _watch(self) -> None:
        """The guard: while a write is stalled, keep the pipe drained so the child never blocks."""
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        while not self._stop.wait(GUARD_S):
            if self.record is not None and not os.path.lexists(self.record):
                self.record = None
                os.kill(os.getpid(), signal.SIGUSR1)  # finish: end what is left and exit
            while not self._stop.is_set():
                since = self.writing_since
                if not since or time.monotonic() - since < STALL_S or self.eof:
                    break
                if not poller.poll(100):
                    continue
                with self.lock:
                    try:
                        data = os.read(self.fd, READ_SIZE)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        self.eof = True
                    elif self.backlog_bytes + len(data) > self.max_pending:
                        self.lost += len(data)
                    else:
                        self.backlog.append(data)
                        self.backlog_bytes += len(data)

    def close(self) -> None:
        self._stop.set()
        self.pump()
        self.lost += self.held_bytes  # what the disk never took
        self.log.close()


# ---------------------------------------------------------------------- one attempt


_flags = {"chld": False, "finish": False}


def _on_signal(signum: int, frame: object) -> None:
    _flags["chld" if signum == signal.SIGCHLD else "finish"] = True  # SIGCHLD or SIGUSR1, the two it handles


def _exec_child(spec: dict, out_w: int, err_w: int) -> None:
    """In the forked child: become the component's command. Reports a failure on ``err_w``."""
    try:
        os.setsid()
        if spec.get("cgroup"):
            _join_cgroup(spec["cgroup"], err_w)
        if spec.get("nofile"):  # the supervisor raised its own limit; the component gets the usual one
            _limit_open_files(int(spec["nofile"]))
        if spec.get("cwd"):
            os.chdir(spec["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        _default_signals()
        argv = spec["argv"]
        os.execvpe(argv[0], argv, spec["env"])
    except BaseException as e:  # noqa: BLE001 - anything here is a failed start
        os.write(err_w, _start_failure(e))
    finally:
        os._exit(127)


def _spawn_child(spec: dict, out_w: int) -> int | None:
    """The component's command started with ``posix_spawn`` (vfork and exec: no copy of the monitor's
    pages, no Python between the fork and the exec, ~1 ms where the fork path takes several): its pid.

    The same child as :func:`_exec_child` makes. None where only the fork path can do what the spec
    asks (a cgroup to join) or where the start would fail (no such command, not executable, ...): the
    fork path then starts it, or says why not."""
    if spec.get("cgroup") or not hasattr(os, "posix_spawn") or not hasattr(os, "POSIX_SPAWN_DUP2"):
        return None
    argv, env = spec["argv"], spec["env"]
    if spec.get("nofile"):  # the monitor's own soft limit (it needs a handful of descriptors): inherited
        _limit_open_files(int(spec["nofile"]))
    here = -1
    try:
        if spec.get("cwd"):  # the monitor's own cwd for the spawn (posix_spawn has no chdir), then back
            here = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            os.chdir(spec["cwd"])
        exe = _lookup(argv[0], env)
        if exe is None:
            return None
        return os.posix_spawn(exe, argv, env, setsid=True, setsigmask=(), setsigdef=_CATCHABLE, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, out_w, 2)])
    except (OSError, ValueError, TypeError, NotImplementedError):
        return None
    finally:
        if here >= 0:
            os.fchdir(here)
            os.close(here)


_CATCHABLE = [s for s in range(1, signal.NSIG) if s not in (signal.SIGKILL, signal.SIGSTOP)
              and not signal.SIGRTMIN > s > 31]  # the C library's own real-time signals cannot be named


def _lookup(name: str, env: dict) -> str | None:
    """Where ``os.execvpe(name, argv, env)`` would find ``name`` (a path as given; else the first
    executable file on the PATH of ``env``), relative to the current directory; None if nowhere."""
    places = [name] if os.path.dirname(name) else [os.path.join(d, name) for d in os.get_exec_path(env)]
    return next((p for p in places if os.path.isfile(p) and os.access(p, os.X_OK)), None)


CLONE_INTO_CGROUP = 0x200000000
SYS_CLONE3 = 435  # the same number on every architecture that has it (x86-64 and the generic table)


class _CloneArgs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack", "stack_size", "tls", "set_tid",
        "set_tid_size", "cgroup")]


def _fork_into(cgroup: str | None) -> tuple[int, bool]:
    """fork(), born in ``cgroup`` where the kernel can (clone3 with CLONE_INTO_CGROUP, Linux 5.7): a
    process that writes itself into cgroup.procs waits for the cgroup's migration lock, several ms and
    up to tens on a busy machine. (pid, whether it was born there); the child gets pid 0.

    Only from a single-threaded monitor (before its pump thread starts): the child of a raw clone3
    gets none of Python's after-fork care, and it only execs or exits."""
    if cgroup and os.uname().machine in ("x86_64", "aarch64", "riscv64"):
        fd = -1
        try:
            fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            args = _CloneArgs(flags=CLONE_INTO_CGROUP, exit_signal=signal.SIGCHLD, cgroup=fd)
            syscall = ctypes.PyDLL(None, use_errno=True).syscall  # the GIL stays held across the clone
            syscall.restype = ctypes.c_long
            pid = syscall(SYS_CLONE3, ctypes.byref(args), ctypes.c_size_t(ctypes.sizeof(args)))
            if pid >= 0:
                return pid, True
        except (OSError, AttributeError, ValueError):
            pass
        finally:
            if fd >= 0:
                os.close(fd)  # (in the child too: it execs with only what it needs)
    return os.fork(), False


def _join_cgroup(cgroup: str, err_w: int) -> None:
    """Move this process into the attempt's cgroup; a failure is a warning for the starter (``W`` line)."""
    try:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    except OSError as e:
        os.write(err_w, f"W cannot join cgroup {cgroup}: {e.strerror}\n".encode())


def _limit_open_files(nofile: int) -> None:
    """Lower the soft RLIMIT_NOFILE to what the supervisor itself started with."""
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(nofile, hard), hard))
    except (ValueError, OSError):
        pass


def _default_signals() -> None:
    """A child starts with default dispositions and an empty mask, whatever the monitor or the
    supervisor ignored (a daemon ignores SIGHUP; that must not leak into the component)."""
    for s in _CATCHABLE:
        try:
            signal.signal(s, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def _start_failure(e: BaseException) -> bytes:
    """The ``E`` line that tells the starter why the child could not become its command."""
    try:
        name = getattr(e, "filename", None)
        if isinstance(name, bytes):  # os.execvpe reports the last PATH entry it tried, as bytes
            name = os.fsdecode(name)
        msg = json.dumps({"errno": getattr(e, "errno", None) or 0, "type": type(e).__name__,
                          "error": str(getattr(e, "strerror", None) or e), "filename": name})
    except Exception:  # noqa: BLE001 - whatever happens, the starter must hear that we failed
        msg = json.dumps({"errno": 0, "type": "Error", "error": repr(e)})
    return ("E " + msg + "\n").encode()


def prepare_attempt() -> tuple[int, int, int, int, int]:
    """What a monitor sets up before it knows its command: its signals (:func:`_take_signals`: the wakeup
    pipe's read end), the pipe of the child's output and the pipe its start's errors come back on, as
    ``(wake_r, out_r, out_w, err_r, err_w)``. A spare monitor does it while it waits for its request."""
    wake_r = _take_signals()
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    _quiet(fcntl.fcntl, out_r, F_SETPIPE_SZ, PIPE_SIZE)  # a smaller pipe only costs throughput
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    return wake_r, out_r, out_w, err_r, err_w


def run_attempt(spec: dict, report: Callable[[dict[str, Any]], None],
                prepared: tuple[int, int, int, int, int] | None = None) -> int:
    """Start ``spec['argv']`` and monitor it until told to finish. ``report(dict)`` answers the starter
    once, with the child's pid or why it could not start. ``prepared``: :func:`prepare_attempt`'s, done
    ahead (by a spare), else done now."""
    wake_r, out_r, out_w, err_r, err_w = prepared or prepare_attempt()
    try:
        log = LogFile(spec["log"]["path"], int(spec["log"]["max_bytes"]), int(spec["log"]["backups"]))
    except OSError as e:
        report({"ok": False, "errno": e.errno, "error": f"cannot open the log {spec['log']['path']}: {e.strerror}",
                "type": "LogError"})
        return 1
    started, started_mono = _now()
    pid = _spawn_child(spec, out_w)
    joined = False
    if pid is None:
        pid, joined = _fork_into(spec.get("cgroup"))
    if pid == 0:
        os.close(out_r)
        os.close(err_r)
        _exec_child({**spec, "cgroup": None} if joined else spec, out_w, err_w)
    os.close(out_w)
    os.close(err_w)
    rec, err = _record_once_execd(spec, pid, started, started_mono, err_r, log, report)
    if rec is None:
        return 1
    report({"ok": True, "pid": pid, "shim_pid": os.getpid(), "started": started, "started_mono": started_mono,
            "warnings": [ln[2:].decode(errors="replace") for ln in err if ln.startswith(b"W ")]})
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    watch = _Loop(pid, spec.get("cgroup"), out_r, wake_r, log, rec, float(spec.get("rest_s") or REST_S))
    watch.run()
    watch.pump.close()
    rec.remove()
    return 0


def _take_signals() -> int:
    """Become a subreaper that ignores stray signals and hears SIGCHLD and SIGUSR1 (finish) through
    :data:`_flags` and a wakeup pipe; the pipe's read end."""
    set_subreaper()
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE, signal.SIGTTIN, signal.SIGTTOU,
              signal.SIGQUIT):
        signal.signal(s, signal.SIG_IGN)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, _on_signal)
    signal.signal(signal.SIGUSR1, _on_signal)
    return wake_r


def _record_once_execd(spec: dict, pid: int, started: float, started_mono: float, err_r: int, log: LogFile,
                       report: Callable[[dict[str, Any]], None]) -> tuple[Record | None, list[bytes]]:
    """The attempt's record, in place once the child exec'd, and what the child said on ``err_r`` (its
    warnings); None (the starter told why, the child killed) if the child could not start or the record
    cannot be written. The record is written and synced while the child execs (the sync waits for the disk, the exec for a
    CPU), and renamed into place once the exec is known to have succeeded."""
    rec = Record(spec["record"], {
        "protocol": PROTOCOL, "component": spec["component"], "attempt": spec["attempt"], "run_dir": spec["run_dir"],
        "shim_pid": os.getpid(), "pid": pid, "cgroup": spec.get("cgroup"), "log": spec["log"]["path"],
        "started": started, "started_mono": started_mono, "status": "running", "exit_code": None,
        "signal": None, "ended": None, "ended_mono": None, "log_end": None, "log_error": None, "lost_bytes": 0,
        "log_ok": False,
    })
    trouble: OSError | None = None
    try:
        rec.prepare()
    except OSError as e:
        trouble = e
    err = b"".join(iter(lambda: os.read(err_r, 65536), b"")).splitlines()  # EOF once the child exec'd or died
    os.close(err_r)
    failure = next((ln[2:] for ln in err if ln.startswith(b"E ")), None)
    if failure is not None:
        os.waitpid(pid, 0)
        rec.discard()
        report({"ok": False, **json.loads(failure)})
        log.close()
        return None, err
    if trouble is None:
        try:
            rec.commit()
        except OSError as e:
            trouble = e
    if trouble is not None:  # no record, no monitoring the next supervisor could adopt: the attempt is refused
        rec.discard()
        os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        report({"ok": False, "errno": trouble.errno, "error": f"cannot write {spec['record']}: {trouble.strerror}",
                "type": "RecordError"})
        return None, err
    return rec, err


class _Loop:
    """The monitor's loop over one attempt, and what it knows: one handler per thing that wakes it
    (output ready, the end of a rest, a child's exit, the finish request, the finish deadline).

    A plain class, not a dataclass: the monitor imports as little as it can (``dataclasses`` would
    cost every monitor started as its own interpreter tens of milliseconds)."""

    __slots__ = ("pid", "cgroup", "out_r", "wake_r", "log", "rec", "pump", "poller", "pipe_open", "status",
                 "ended", "ended_mono", "recorded", "reaped", "finishing", "finish_deadline", "resting_until",
                 "last_read", "recent", "rest_s", "restable")

    def __init__(self, pid: int, cgroup: str | None, out_r: int, wake_r: int, log: LogFile, rec: Record,
                 rest_s: float = REST_S):
        self.pid = pid
        self.cgroup = cgroup
        self.out_r = out_r
        self.wake_r = wake_r
        self.log = log
        self.rec = rec
        os.set_blocking(out_r, False)
        self.pump = Pump(out_r, log, lambda error, lost: rec.update(log_error=error, lost_bytes=lost,
                                                                    log_ok=error is None), record=rec.path)
        self.pump.start()
        self.poller = select.poll()
        self.poller.register(out_r, select.POLLIN)
        self.poller.register(wake_r, select.POLLIN)
        self.pipe_open = True
        self.status: int | None = None  # the child's waitpid status, once it exited
        self.ended = self.ended_mono = 0.0
        self.recorded = False  # the exit is in the record (a full disk can delay that)
        self.reaped = False  # the child reaped: until its exit is recorded it stays a zombie (see on_children_exited)
        self.finishing = False
        self.finish_deadline = 0.0
        self.resting_until = 0.0  # after a small read: leave the pipe alone until then (signals still wake us)
        self.last_read = 0.0
        self.recent = 0.0  # bytes read, decaying with a time constant of RATE_WINDOW_S: the recent rate * window
        self.rest_s = rest_s
        try:  # a rest may fill 1/16 of the pipe the kernel gave (F_SETPIPE_SZ may have been refused)
            self.restable = fcntl.fcntl(out_r, F_GETPIPE_SZ) // 16
        except OSError:
            self.restable = (64 << 10) // 16

    def run(self) -> None:
        """Until told to finish and done finishing."""
        while True:
            self.wait()
            if _flags["chld"]:
                _flags["chld"] = False
                self.on_children_exited()
            if self.status is not None and not self.recorded:
                self.record_exit(self.status)
            if _flags["finish"] and not self.finishing:  # SIGUSR1: end the tree, drain for at most FINISH_DRAIN_S
                self.finishing = True
                self.finish_deadline = time.monotonic() + FINISH_DRAIN_S
            if self.finishing and self.finish_round():
                return

    def wait(self) -> None:
        """Block until output or a signal, or until a rest is over. Wake every 100 ms only while
        something is pending (an exit the full disk would not let us record yet, or the end of a finish)."""
        timeout = 100 if self.finishing or (self.status is not None and not self.recorded) else None
        if self.resting_until:
            rest = int((self.resting_until - time.monotonic()) * 1000)
            if rest <= 0 or not self.pipe_open:
                self.on_rest_over()
                return
            timeout = rest if timeout is None else min(rest, timeout)
        for fd, _ev in self.poller.poll(timeout):  # (retried by Python after a signal: its wakeup fd shows)
            if fd == self.wake_r:  # a signal arrived (its flag is set): one byte a signal, one read takes them all
                _quiet(os.read, self.wake_r, 1 << 16)
            elif fd == self.out_r:
                self.rest_after(self.drain())
        if self.resting_until and time.monotonic() >= self.resting_until:
            self.on_rest_over()

    def on_rest_over(self) -> None:
        """Read what piled up straight away (no poll needed to learn it is there), and rest again if it
        was only a little; else listen to the pipe again."""
        self.resting_until = 0.0
        if self.pipe_open:
            self.poller.register(self.out_r, select.POLLIN)
            self.rest_after(self.drain())

    def rest_after(self, n: int) -> None:
        """A chatty component (small reads, one soon after another, at a low recent rate): let more pile
        up before the next wakeup, so a component printing every few ms costs a fraction of the
        wakeups. Never for a fast writer: the average rate over the last second decides, not one
        interval (writer and monitor take turns on the CPU, so a few lines read 2 ms apart say nothing):
        a writer that would fill 1/16 of the pipe during one rest is never rested."""
        now = time.monotonic()
        dt, self.last_read = now - self.last_read, now
        self.recent = self.recent * math.exp(-dt / RATE_WINDOW_S) + n
        if (self.pipe_open and 0 < n < SMALL_READ and dt < self.rest_s + 0.02
                and self.recent / RATE_WINDOW_S * self.rest_s < self.restable):
            self.poller.unregister(self.out_r)
            self.resting_until = now + self.rest_s

    def drain(self) -> int:
        """Move what the pipe holds to the log; the bytes moved."""
        if not self.pipe_open:
            return 0
        n = self.pump.pump()
        if self.pump.eof:
            self.pipe_open = False
            if not self.resting_until:
                self.poller.unregister(self.out_r)
        return n

    def on_children_exited(self) -> None:
        """Learn the attempt's own exit, and reap every other exited child (orphans re-parented to us,
        their subreaper: reaping is all we owe them). The attempt's own child is reaped only once its
        exit is in the record: until then the kernel keeps its exit status (a zombie), where the
        supervisor reads it when the record cannot be written (a read-only or failing disk)."""
        if self.status is None:
            self.status = exit_status(self.pid)
            if self.status is not None:
                self.ended, self.ended_mono = _now()
        held = self.status is not None and not self.reaped
        for got, status in reap_children(keep=self.pid if held else None):
            if got == self.pid:  # it exited between the look and the reaping
                self.reaped = True
                if self.status is None:
                    self.status = status
                    self.ended, self.ended_mono = _now()

    def record_exit(self, status: int) -> None:
        """Write the exit into the record (tried again each round while the disk refuses)."""
        self.drain()  # what the child wrote just before it died, written before the exit is recorded
        self.recorded = self.rec.update(status="exited", **exit_fields(status), ended=self.ended,
                                        ended_mono=self.ended_mono, log_end=self.log.position())
        if self.recorded:
            self.reap()

    def reap(self) -> None:
        if not self.reaped:
            _quiet(os.waitpid, self.pid, 0)
            self.reaped = True

    def finish_round(self) -> bool:
        """End whatever is left (again each round: a process may have forked meanwhile); done once the
        exit is known and the pipe reached EOF or the drain time is up."""
        _kill_tree(self.pid, self.cgroup)
        self.drain()
        done = self.status is not None and not (self.pipe_open and time.monotonic() < self.finish_deadline)
        if done:
            self.reap()  # the supervisor has what it needs of it, from the record or from the kernel
        return done


def exit_status(pid: int) -> int | None:
    """The waitpid status of our child ``pid`` if it has exited, without reaping it (None: it runs)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    if info is None:
        return None
    if info.si_code == os.CLD_EXITED:
        return (info.si_status & 0xFF) << 8
    return info.si_status | (0x80 if info.si_code == os.CLD_DUMPED else 0)


def reap_children(keep: int | None = None) -> list[tuple[int, int]]:
    """Reap every child that has exited, without blocking: their (pid, waitpid status) pairs; all but
    ``keep``. The monitor's loop and the supervisor's (when a monitor's pidfd fires, and each tick) both use it."""
    out: list[tuple[int, int]] = []
    if keep is not None:  # waitpid(-1) could reap it: each other child by its pid
        mine = children_of(os.getpid())
        for child in _children_map().get(os.getpid(), []) if mine is None else mine:
            if child == keep:
                continue
            try:
                got, status = os.waitpid(child, os.WNOHANG)
            except ChildProcessError:
                continue
            if got:
                out.append((got, status))
        return out
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return out
        if pid == 0:
            return out
        out.append((pid, status))


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15; ``SIG<n>`` for a number no signal has."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def exit_fields(status: int) -> dict:
    """A waitpid status as the record's ``exit_code`` / ``signal`` (exactly one is not None)."""
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        return {"exit_code": code, "signal": None}
    return {"exit_code": None, "signal": signal_name(-code)}


def _kill_tree(pid: int, cgroup: str | None) -> None:
    """SIGKILL every process of the attempt (the cgroup's members, and our descendants)."""
    targets = set(descendants(os.getpid()))
    if cgroup:
        try:
            with open(os.path.join(cgroup, "cgroup.kill"), "w") as f:
                f.write("1")
        except OSError:
            targets.update(cgroup_pids(cgroup))
    for p in targets:
        _quiet(os.kill, p, signal.SIGKILL)
    _quiet(os.killpg, pid, signal.SIGKILL)


# ---------------------------------------------------------------------- how the supervisor starts monitors


def _report_to(fd: int) -> Callable[[dict[str, Any]], None]:
    def report(msg: dict[str, Any]) -> None:
        _quiet(write_all, fd, (json.dumps(msg) + "\n").encode())  # no starter: the record tells the next supervisor
        _quiet(os.close, fd)
    return report


def _recv_msg(sock: socket.socket) -> tuple[dict, int] | None:
    """One request: a 4-byte length, the descriptors passed with it (SCM_RIGHTS: the reply fd, -1 for
    none; any more are closed), a JSON body. None at EOF or on a broken request."""
    try:
        head, fds, _flags_, _addr = socket.recv_fds(sock, 4, 4)
        for extra in fds[1:]:
            os.close(extra)
        head += _recv_exact(sock, 4 - len(head)) if head else b""
        if len(head) < 4:
            return None
        (n,) = struct.unpack("!I", head)
        body = _recv_exact(sock, n)
        return (json.loads(body), (fds[0] if fds else -1)) if len(body) == n else None
    except (OSError, ValueError):
        return None


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes from ``sock``, fewer only at EOF."""
    data = b""
    while len(data) < n and (chunk := sock.recv(min(n - len(data), 1 << 20))):
        data += chunk
    return data


def encode_request(spec: dict) -> tuple[bytes, bytes]:
    """The supervisor's side of :func:`_recv_msg`: the length header (sent with the reply fd
    attached) and the body."""
    body = json.dumps(spec).encode()
    return struct.pack("!I", len(body)), body


SPARE_AFTER_MS = 20  # the zygote forks its next spare monitor once no request came for this long


def zygote(sock_fd: int) -> int:
    """Serve start requests on ``sock_fd``: fork a monitor for each (a fork of this small, idle
    interpreter costs a fraction of the ~40 ms of CPU and ~4 MB a new one takes). The monitor is forked
    twice so that it re-parents to the supervisor (a child subreaper), not to the zygote.

    So that a restart does not wait for those two forks, one monitor is forked ahead of need, a
    *spare* (:func:`_spare`): a request is handed to it, and the next spare is forked once the zygote
    has been idle for :data:`SPARE_AFTER_MS` (not while the monitor just handed a request starts its
    command, nor during a burst of starts, which are served as before). A spare that cannot take a
    request (it died) is replaced by the two forks."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for s in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(s, signal.SIG_IGN)
    import gc
    import resource  # noqa: F401 - imported once here, not in each monitor that limits its child's files

    gc.freeze()  # keep the forks' pages shared: collections would otherwise copy them
    sock = socket.socket(fileno=sock_fd)
    idle = select.poll()
    idle.register(sock.fileno(), select.POLLIN)
    spare: socket.socket | None = None
    while True:
        if spare is None and not idle.poll(SPARE_AFTER_MS):
            spare = _fork_spare(sock)
        got = _recv_msg(sock)
        if got is None:
            return 0  # the supervisor closed its end: its life is over, and so is ours (a spare sees EOF)
        spec, reply_fd = got
        handed = spare is not None and _hand_to_spare(spare, spec, reply_fd)
        if spare is not None:
            spare.close()
            spare = None
        if not handed:
            _fork_twice((sock,), run_attempt, spec, _report_to(reply_fd))
        os.close(reply_fd)


def _fork_twice(closing: tuple[socket.socket, ...], body: Callable[..., int], *args: Any) -> None:
    """Run ``body(*args)`` in a grandchild in a session of its own, ``closing`` closed there (forked twice, it
    re-parents to the supervisor, a child subreaper, not to the zygote); returns once the middle one exits."""
    mid = os.fork()
    if mid == 0:
        try:
            for s in closing:
                s.close()
            if os.fork() == 0:
                os.setsid()
                os._exit(body(*args))
        finally:
            os._exit(0)
    os.waitpid(mid, 0)


def _fork_spare(sock: socket.socket) -> socket.socket | None:
    """A monitor forked ahead of need (twice, like any other), waiting for its request on a socket of its
    own; the zygote's end of that socket (None: no fork)."""
    try:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        _fork_twice((sock, ours), _spare, theirs)
    except OSError:
        ours.close()
        return None
    finally:
        theirs.close()
    return ours


def _spare(sock: socket.socket) -> int:
    """A spare monitor: one request from the zygote, then the attempt as any monitor runs it; exits at
    once, having started nothing, when the zygote is gone (EOF). What does not depend on the request is set up while it waits."""
    prepared = prepare_attempt()
    got = _recv_msg(sock)
    sock.close()
    if got is None:
        return 0
    spec, reply_fd = got
    return run_attempt(spec, _report_to(reply_fd), prepared)


def _hand_to_spare(spare: socket.socket, spec: dict, reply_fd: int) -> bool:
    """Pass a request on to the spare, the reply descriptor with it; False if it could not take it."""
    head, body = encode_request(spec)
    try:
        if socket.send_fds(spare, [head], [reply_fd]) != len(head):
            return False
        spare.sendall(body)
    except OSError:
        return False
    return True


def main(argv: list[str]) -> int:
    if len(argv) > 2 and argv[1] == "--zygote":
        return zygote(int(argv[2]))
    # One attempt, spec as JSON on stdin, the answer on stdout (`rlsup` falls back to this if the
    # zygote cannot run).
    spec = json.loads(sys.stdin.buffer.read())
    out = os.dup(1)
    return run_attempt(spec, _report_to(out))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
