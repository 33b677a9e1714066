"""One attempt of a component as an OS process tree: spawn, track descendants, signal, reap.

Every child runs in its own session (its pid is its process group), with stdout and stderr on
one pipe, stdin on /dev/null, and marker variables (``RLSUP_RUN_DIR``, ``RLSUP_COMPONENT``,
``RLSUP_ATTEMPT``) in its environment. Descendants are found three ways, because any one
alone misses some: the root's live process tree (psutil), orphans re-parented to the
supervisor (it is a child subreaper), and the marker variables (for processes that called
setsid and whose parent is gone, or that a supervisor which died hard left behind).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import signal as signal_mod
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import psutil

F_SETPIPE_SZ = 1031
PIPE_SIZE = 1 << 20
PR_SET_CHILD_SUBREAPER = 36
ENV_RUN_DIR = "RLSUP_RUN_DIR"
ENV_COMPONENT = "RLSUP_COMPONENT"
ENV_ATTEMPT = "RLSUP_ATTEMPT"


def set_child_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process (Linux); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def signal_name(signum: int) -> str:
    try:
        return signal_mod.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def decode_status(status: int) -> tuple[int | None, str | None]:
    """waitpid status -> (exit code, signal name); exactly one is not None."""
    if os.WIFSIGNALED(status):
        return None, signal_name(os.WTERMSIG(status))
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), None
    return None, None


@dataclass(frozen=True)
class Member:
    pid: int
    create_time: float

    def process(self) -> psutil.Process | None:
        """The live process, or None if it is gone (or the pid was reused)."""
        try:
            p = psutil.Process(self.pid)
            if abs(p.create_time() - self.create_time) > 0.05 or p.status() == psutil.STATUS_ZOMBIE:
                return None
            return p
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None


class ProcessTree:
    """One spawned attempt and every process descended from it."""

    def __init__(self, argv: Sequence[str], *, cwd: str | None, env: Mapping[str, str]):
        self.argv = list(argv)
        self.cwd = cwd
        self.env = dict(env)
        self.pid: int | None = None
        self.popen: subprocess.Popen[bytes] | None = None
        self.read_fd: int | None = None
        self.members: dict[int, Member] = {}
        self.exit_code: int | None = None
        self.exit_signal: str | None = None
        self.exited = False
        self.term_sent_at: float | None = None  # when stop began (supervisor clock): SIGKILL deadline

    def spawn(self) -> int:
        """Start the root process; returns the read end of its output pipe (non-blocking).

        Raises OSError (e.g. FileNotFoundError for a missing executable) without leaving a pipe open.
        """
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            try:
                fcntl.fcntl(r, F_SETPIPE_SZ, PIPE_SIZE)
            except OSError:
                pass  # a smaller pipe only costs throughput
            self.popen = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=w, stderr=w, cwd=self.cwd, env=self.env,
                start_new_session=True, close_fds=True,
            )
        except BaseException:
            os.close(r)
            os.close(w)
            raise
        os.close(w)
        os.set_blocking(r, False)
        self.pid = self.popen.pid
        self.read_fd = r
        try:
            self.members[self.pid] = Member(self.pid, psutil.Process(self.pid).create_time())
        except psutil.Error:
            pass  # it exited already; the reaper reports it
        return r

    def set_exit(self, status: int) -> None:
        self.exit_code, self.exit_signal = decode_status(status)
        self.exited = True
        if self.popen is not None:
            # We reaped it ourselves; tell Popen so it neither waits nor warns.
            self.popen.returncode = self.exit_code if self.exit_code is not None else -1

    def refresh(self, children_of: Mapping[int, Iterable[int]] | None = None) -> None:
        """Add the current descendants of every known live member."""
        frontier = [m.pid for m in self.members.values()]
        if children_of is None:
            children_of = ppid_map_children()
        seen = set(self.members)
        while frontier:
            pid = frontier.pop()
            for c in children_of.get(pid, ()):
                if c in seen:
                    continue
                seen.add(c)
                try:
                    self.members[c] = Member(c, psutil.Process(c).create_time())
                except psutil.Error:
                    continue
                frontier.append(c)

    def adopt(self, procs: Iterable[psutil.Process]) -> None:
        for p in procs:
            if p.pid not in self.members:
                try:
                    self.members[p.pid] = Member(p.pid, p.create_time())
                except psutil.Error:
                    pass

    def alive(self) -> list[psutil.Process]:
        out = []
        for m in list(self.members.values()):
            p = m.process()
            if p is None:
                if m.pid != self.pid:
                    del self.members[m.pid]
            else:
                out.append(p)
        return out

    def alive_pids(self) -> list[int]:
        return [p.pid for p in self.alive()]

    def send(self, signum: int) -> None:
        """Signal the process group and every known member (which may have left the group)."""
        if self.pid is not None:
            try:
                os.killpg(self.pid, signum)
            except OSError as e:
                if e.errno not in (errno.ESRCH, errno.EPERM):
                    raise
        for p in self.alive():
            try:
                p.send_signal(signum)
            except psutil.Error:
                pass


def ppid_map_children() -> dict[int, list[int]]:
    """pid -> child pids for every process on the host (one pass over /proc)."""
    out: dict[int, list[int]] = {}
    for p in psutil.process_iter(["ppid"]):
        ppid = p.info.get("ppid")
        if ppid is not None:
            out.setdefault(ppid, []).append(p.pid)
    return out


def find_marked(run_dir: str, component: str | None = None, *, exclude: Iterable[int] = ()) -> list[psutil.Process]:
    """Live processes whose environment says they belong to ``run_dir`` (and ``component``)."""
    skip = set(exclude) | {os.getpid()}
    me = os.getuid()
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
        if env.get(ENV_RUN_DIR) != run_dir:
            continue
        if component is not None and env.get(ENV_COMPONENT) != component:
            continue
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        out.append(p)
    return out


def terminate_processes(procs: Sequence[psutil.Process], sig: int, timeout: float) -> list[psutil.Process]:
    """Send ``sig``, wait up to ``timeout``, SIGKILL the rest (blocking). Returns what survived."""
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(alive, timeout=5)
    return alive
