"""inotify (Linux) through ctypes: one descriptor for the whole run, one watch per directory.

The supervisor learns of new log output and of monitor records changing from two directory
watches (``logs/`` and ``monitors/``), however many components there are, and without polling.
Where inotify is missing or its limits are reached, :class:`Inotify` raises ``OSError`` and the
caller polls instead.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from collections.abc import Iterator

IN_MODIFY = 0x00000002
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_Q_OVERFLOW = 0x00004000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_EVENT = struct.Struct("iIII")

_libc = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    return _libc


class Inotify:
    def __init__(self) -> None:
        lib = _lib()
        fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"inotify_init1: {os.strerror(e)}")
        self.fd = fd
        self.paths: dict[int, str] = {}

    def watch(self, path: str, mask: int) -> int:
        wd = _lib().inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"inotify_add_watch {path}: {os.strerror(e)}")
        self.paths[wd] = path
        return wd

    def read(self) -> Iterator[tuple[str, int, str]]:
        """(watched directory, mask, file name) for every pending event; nothing if none is pending.
        An overflow is reported as (``""``, IN_Q_OVERFLOW, ``""``): rescan everything."""
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            if not buf:
                return
            i = 0
            while i + _EVENT.size <= len(buf):
                wd, mask, _cookie, length = _EVENT.unpack_from(buf, i)
                name = buf[i + _EVENT.size:i + _EVENT.size + length].split(b"\0", 1)[0]
                i += _EVENT.size + length
                yield self.paths.get(wd, ""), mask, os.fsdecode(name)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
