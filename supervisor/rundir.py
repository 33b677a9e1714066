"""The run directory: layout, permissions, and the lock that makes one supervisor its owner."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOCK_NAME = "rlsup.lock"
SOCK_NAME = "rlsup.sock"


@dataclass
class RunPaths:
    root: Path

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def events(self) -> Path:
        return self.root / "events.jsonl"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def lock(self) -> Path:
        return self.root / LOCK_NAME

    @property
    def sock(self) -> Path:
        return self.root / SOCK_NAME

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def create(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self.logs.mkdir(exist_ok=True)


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

    def acquire(self, info: dict[str, Any]) -> None:
        fd = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = read_owner(self.paths)
            os.close(fd)
            raise LockHeld(owner or {}) from None
        self.previous = read_owner(self.paths)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({**info, "pid": os.getpid(), "host": socket.gethostname(),
                                 "started_at": time.time()}).encode())
        os.fsync(fd)
        self._fd = fd

    def update(self, info: dict[str, Any]) -> None:
        if self._fd is None:
            return
        cur = read_owner(self.paths) or {}
        cur.update(info)
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps(cur).encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_owner(paths: RunPaths) -> dict[str, Any] | None:
    try:
        data = json.loads(paths.lock.read_text() or "null")
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def is_locked(paths: RunPaths) -> bool:
    """Whether a live supervisor holds the lock (without taking it)."""
    try:
        fd = os.open(paths.lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


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
