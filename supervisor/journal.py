"""events.jsonl and state.json: what the run leaves on disk for people and scripts."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` so that readers see the old or the new file, never a torn one."""
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    try:
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def write_json_atomic(path: Path, obj: Any) -> None:
    write_atomic(path, (json.dumps(obj, indent=1, default=str) + "\n").encode())


class Journal:
    """Append-only events.jsonl; ``seq`` continues across supervisors of the same run dir.

    Every event is one whole line written by one ``write``. A write that fails or comes up short (a
    full disk) is cut back to the last complete record, and the event waits in memory (in order)
    until the disk takes it: the file never holds a torn line that later lines would be glued to.
    """

    MAX_PENDING = 100_000

    def __init__(self, path: Path):
        self.path = path
        self.last_seq = last_seq(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        self._repair_tail()
        self._pending: list[bytes] = []
        self.dropped = 0
        self.error: OSError | None = None

    def _repair_tail(self) -> None:
        """A line torn by a crash mid-write gets its newline, so the next record starts a line."""
        size = os.fstat(self._fd).st_size
        if size:
            rfd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            try:
                last = os.pread(rfd, 1, size - 1)
            finally:
                os.close(rfd)
            if last != b"\n":
                try:
                    os.write(self._fd, b"\n")
                except OSError:
                    pass

    def append(self, event: dict[str, Any], sync: bool = True) -> None:
        line = (json.dumps(event, default=str, ensure_ascii=False) + "\n").encode()
        self._pending.append(line)
        if len(self._pending) > self.MAX_PENDING:  # a disk full for a very long time: keep the newest
            del self._pending[0]
            self.dropped += 1
        self.flush(sync)

    def flush(self, sync: bool = True) -> bool:
        """Write what is pending; False while the disk refuses (it stays pending)."""
        while self._pending:
            line = self._pending[0]
            try:
                size = os.fstat(self._fd).st_size
                n = os.write(self._fd, line)
            except OSError as e:
                self.error = e
                return False
            if n != len(line):
                try:
                    os.ftruncate(self._fd, size)
                except OSError:
                    pass
                self.error = OSError(28, "short write (no space left on device?)")
                return False
            self._pending.pop(0)
        self.error = None
        if sync:
            try:
                os.fsync(self._fd)
            except OSError as e:
                self.error = e
        return True

    @property
    def pending(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        self.flush(sync=True)
        try:
            os.fsync(self._fd)
        except OSError:
            pass
        os.close(self._fd)


def last_seq(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 65536))
            tail = f.read().splitlines()
    except OSError:
        return 0
    for raw in reversed(tail):
        try:
            return int(json.loads(raw)["seq"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def read_events(path: Path, since_seq: int = 0) -> Iterator[dict[str, Any]]:
    """Events with ``seq > since_seq``; a torn last line (a crash mid-write) is skipped."""
    try:
        f = open(path, encoding="utf-8", errors="replace")
    except OSError:
        return
    with f:
        for raw in f:
            try:
                e = json.loads(raw)
            except ValueError:
                continue
            if isinstance(e, dict) and e.get("seq", 0) > since_seq:
                yield e
