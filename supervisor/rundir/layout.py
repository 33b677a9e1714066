"""The run directory: layout, permissions, and the lock that makes one supervisor its owner."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat as stat_mod
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOCK_NAME = "rlsup.lock"
SOCK_NAME = "rlsup.sock"
SUPERVISOR_LOG = "supervisor.log"  # the daemon's stdout and stderr
# Files rlsup itself opens in a run dir; none may be a link or belong to another user (nor may
# anything in logs/ or monitors/, nor the temporary files of atomic writes).
OWN_FILES = ("events.jsonl", "state.json", LOCK_NAME, SOCK_NAME, SUPERVISOR_LOG, ".state.json.slot0",
             ".state.json.slot1")


class UnsafeRunDir(Exception):
    """A run dir (or a path in it) that another user could read, write or redirect."""


class _In:
    """A read-only attribute of :class:`RunPaths`: the path of ``name`` in its run dir."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, paths: RunPaths, owner: object = None) -> Path:
        return paths.root / self.name


@dataclass
class RunPaths:
    root: Path

    logs = _In("logs")
    events = _In("events.jsonl")
    state = _In("state.json")
    lock = _In(LOCK_NAME)
    sock = _In(SOCK_NAME)
    monitors = _In("monitors")
    stacks = _In("stacks")  # full dumps of components' Python stacks (`rlsup stack`, a stall, a hung liveness probe)
    # The `--set` overrides the run started (or was last continued) with: a JSON list of strings, each
    # KEY.PATH=VALUE as typed; every later reading of its config (a take-over, `--resume`, a Slurm requeue,
    # `rlsup down` without a supervisor) applies them.
    overrides = _In("overrides.json")

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def monitor_record(self, component: str, attempt: int) -> Path:
        return self.monitors / f"{component}.{attempt}.json"

    def create(self) -> None:
        """Create the run dir (0700) and its folders, refusing anything another user controls.

        Logs can hold secrets a component printed, and the journal and socket steer the run, so a
        run dir (or ``logs/``, ``monitors/``) that is a symlink, is owned by another user, or is
        writable by others is refused, as is a parent that others can write without the sticky bit
        (where they could swap the run dir for their own). Run as root with ``run_dir`` under
        ``/tmp``, this is what keeps another user's prepared directory from being used.
        """
        parent = self.root.parent
        parent.mkdir(parents=True, exist_ok=True)
        check_parent(parent)
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.root, 0o700)
        check_owned_dir(self.root)
        os.chmod(self.root, 0o700, follow_symlinks=False)
        # Whoever could write here before it was tightened may have planted links or files.
        entries = [self.root / n for n in OWN_FILES]
        entries += [self.root / n for n in os.listdir(self.root) if n.startswith(".") and ".tmp." in n]
        for sub in (self.logs, self.monitors):
            with contextlib.suppress(FileExistsError):
                os.mkdir(sub, 0o700)
            check_owned_dir(sub)
            entries += [sub / n for n in os.listdir(sub)]
        for p in entries:
            check_owned_entry(p)


def check_parent(parent: Path) -> None:
    st = os.stat(parent)
    if st.st_uid not in (os.geteuid(), 0):
        raise UnsafeRunDir(f"{parent} belongs to another user ({_user(st.st_uid)}), who could rename the run dir "
                           "and put their own in its place: choose a run_dir elsewhere")
    if st.st_mode & 0o002 and not st.st_mode & 0o1000:
        raise UnsafeRunDir(f"{parent} is writable by every user without the sticky bit: another user could "
                           "replace the run dir; choose a run_dir elsewhere")
    if st.st_mode & 0o020 and st.st_uid != os.geteuid() and not st.st_mode & 0o1000:
        raise UnsafeRunDir(f"{parent} is writable by its group and owned by another user: choose a run_dir "
                           "elsewhere")


def check_owned_dir(path: Path) -> None:
    st = os.lstat(path)
    if stat_mod.S_ISLNK(st.st_mode):
        raise UnsafeRunDir(f"{path} is a symbolic link ({os.readlink(path)}); rlsup does not follow links in a "
                           "run dir: remove it or choose another run_dir")
    if not stat_mod.S_ISDIR(st.st_mode):
        raise UnsafeRunDir(f"{path} exists and is not a directory")
    if st.st_uid != os.geteuid():
        raise UnsafeRunDir(f"{path} belongs to user {_user(st.st_uid)}, not to you: it could hold links or files "
                           "they control; choose another run_dir (or remove it)")
    if st.st_mode & 0o022:
        # Ours but writable by others: tighten it (the run's own logs must not be readable either).
        os.chmod(path, 0o700, follow_symlinks=False)


def check_owned_entry(path: Path) -> None:
    """A file rlsup opens in a run dir: absent, or ours and not a link."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat_mod.S_ISLNK(st.st_mode):
        raise UnsafeRunDir(f"{path} is a symbolic link ({os.readlink(path)}); rlsup does not follow links in a run "
                           "dir: remove it (and look at who put it there), or choose another run_dir")
    if st.st_uid != os.geteuid():
        raise UnsafeRunDir(f"{path} belongs to user {_user(st.st_uid)}, not to you; rlsup does not write to "
                           "files others control: remove it, or choose another run_dir")


def _user(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class LockHeld(Exception):
    def __init__(self, owner: dict[str, Any]):
        self.owner = owner
        super().__init__(f"run dir is owned by a live supervisor (pid {owner.get('pid')})")


class RunLock:
    """An flock on ``rlsup.lock`` held for the supervisor's lifetime.

    The kernel drops the lock when the holder dies, so a stale file is never mistaken for a live
    owner; the file's content (pid, host, start time) tells what the previous owner was.
    """

    def __init__(self, paths: RunPaths):
        self.paths = paths
        self._fd: int | None = None
        self.previous: dict[str, Any] | None = None

    def acquire(self, info: dict[str, Any], *, read_only_ok: bool = False) -> None:
        """Take the lock (``LockHeld`` if a live supervisor has it) and write ``info`` into it.
        ``read_only_ok``: on a run dir that turned read-only (or fails), hold the lock without writing
        it (flock works on a file opened for reading): ``rlsup down`` of a run whose supervisor is gone."""
        try:
            fd = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as e:
            if not read_only_ok or e.errno not in (errno.EROFS, errno.EIO):
                raise
            fd = os.open(self.paths.lock, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            info = {}
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = read_owner(self.paths)
            os.close(fd)
            raise LockHeld(owner or {}) from None
        self.previous = read_owner(self.paths)
        self._fd = fd
        if info:
            _rewrite(fd, json.dumps({**info, "pid": os.getpid(), "host": socket.gethostname(),
                                     "started_at": time.time()}).encode())
            os.fsync(fd)

    def update(self, info: dict[str, Any]) -> None:
        if self._fd is None:
            return
        _rewrite(self._fd, json.dumps({**(read_owner(self.paths) or {}), **info}).encode())

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


LOCK_SIZE = 4096


def _rewrite(fd: int, data: bytes) -> None:
    """Rewrite the lock file in place, padded with JSON whitespace to what it held (at least
    LOCK_SIZE): truncating first would give its block back, and on a full disk a component writing
    flat out takes it before the new content could be written (a new supervisor could not take the
    run over)."""
    size = os.fstat(fd).st_size
    os.pwrite(fd, data + b" " * max(0, max(size, LOCK_SIZE) - len(data) - 1) + b"\n", 0)


def read_owner(paths: RunPaths) -> dict[str, Any] | None:
    return read_json_object(paths.lock)


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object the file at ``path`` holds; None when it is absent, unreadable or holds no object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "null")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_locked(paths: RunPaths) -> bool:
    """Whether a live supervisor holds the lock (without taking it). On a run dir whose disk fails
    (EIO: not even the lock file opens), whether a supervisor answers on its socket."""
    try:
        fd = os.open(paths.lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        return e.errno == errno.EIO and socket_answers(paths.sock)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def socket_answers(sock: Path) -> bool:
    """Whether something listens on the unix socket ``sock``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2.0)
        try:
            with sock_address(sock) as addr:
                s.connect(addr)
        except OSError:
            return False
    return True


SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes on Linux, NUL included


@contextlib.contextmanager
def sock_address(path: Path) -> Iterator[str]:
    """An address for ``bind``/``connect`` that works for run dirs with very long paths.

    A unix socket path is limited to 107 bytes; longer ones go through ``/proc/self/fd/N``
    of an ``O_PATH`` descriptor of the directory (Linux), held open for the call.
    """
    s = str(path)
    if len(os.fsencode(s)) <= SUN_PATH_MAX:
        yield s
        return
    fd = os.open(path.parent, os.O_PATH | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)
