"""events.jsonl and state.json: what the run leaves on disk for people and scripts."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` so that readers see the old or the new file, never a torn one."""
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
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
    """Append-only events.jsonl; ``seq`` continues across supervisors of the same run dir."""

    def __init__(self, path: Path):
        self.path = path
        self.last_seq = last_seq(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self.error: OSError | None = None

    def append(self, event: dict[str, Any], sync: bool = True) -> None:
        line = (json.dumps(event, default=str, ensure_ascii=False) + "\n").encode()
        try:
            os.write(self._fd, line)
            if sync:
                os.fsync(self._fd)
            self.error = None
        except OSError as e:  # a full disk must not stop supervision
            self.error = e

    def close(self) -> None:
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
