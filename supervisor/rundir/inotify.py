"""inotify (Linux) through ctypes: one descriptor for the whole run, one watch per directory.

The supervisor learns of new log output and of monitor records changing from two directory
watches (``logs/`` and ``monitors/``), however many components there are, and without polling;
the directories it watches for steps and checkpoints share a second descriptor (:mod:`.dirwatch`).
Where inotify is missing, its limits are reached or ``RLSUP_INOTIFY=off``, :class:`Inotify` raises
``OSError`` and the caller polls instead.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import struct
from collections.abc import Iterator

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
_EVENT = struct.Struct("iIII")


@functools.cache
def _lib() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _checked(result: int, call: str) -> int:
    """A libc call's result; OSError with its errno where it failed."""
    if result < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{call}: {os.strerror(e)}")
    return result


class Inotify:
    def __init__(self) -> None:
        if os.environ.get("RLSUP_INOTIFY", "auto") == "off":
            raise OSError("disabled by RLSUP_INOTIFY=off")
        self.fd = _checked(_lib().inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC), "inotify_init1")
        self.paths: dict[int, str] = {}

    def watch(self, path: str, mask: int) -> None:
        wd = _checked(_lib().inotify_add_watch(self.fd, os.fsencode(path), mask), f"inotify_add_watch {path}")
        self.paths[wd] = path

    def read(self) -> Iterator[tuple[str, int, bytes]]:
        """(watched directory, mask, file name as bytes) for every pending event; nothing if none is
        pending. Names stay bytes (a busy run has thousands of events a second; the caller maps the
        few distinct names). An overflow is reported as (``""``, IN_Q_OVERFLOW, ``b""``): rescan all."""
        unpack = _EVENT.unpack_from
        size = _EVENT.size
        paths = self.paths
        while True:
            try:
                buf = os.read(self.fd, 1 << 18)
            except BlockingIOError:
                return
            if not buf:
                return
            i = 0
            end = len(buf)
            while i + size <= end:
                wd, mask, _cookie, length = unpack(buf, i)
                name = buf[i + size:i + size + length].rstrip(b"\0")
                i += size + length
                yield paths.get(wd, ""), mask, name

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
