"""A component's whole log on disk, addressed by line sequence number: what a client pages through
when it scrolls or searches past the lines it holds (the ring keeps only the newest ones).

The files of a log (:func:`~rlsup.supervisor.rundir.logs.log_chain`), oldest first, hold the stream in
order. Line numbers are counted from the oldest file that is left; they are tied to the stream's sequence
numbers by an *anchor*: the position (inode, byte offset, seq) up to which the supervisor has read,
so line ``N - 1`` before the anchor is ``seq - 1`` and the disk meets the ring where the ring's
lines were read. Lines before the stream's first one (output of earlier runs in the same log) get
sequence numbers below zero: they are shown all the same.

A sparse index (a line count every :data:`STRIDE` bytes, per inode) makes a page anywhere in a
log of any size one seek and a read of at most about ``STRIDE`` bytes more than the page; the
index of a rotated file is built once, that of the live file is extended as it grows. Lines come
back normalised as the ring has them (:class:`~rlsup.supervisor.rundir.logs.LineNormaliser`). Blocking
file I/O: callers run it off the event loop.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .logs import LineNormaliser, Position, log_chain

STRIDE = 1 << 20  # bytes between index checkpoints
CHUNK = 1 << 20  # bytes per read
MAX_PAGE = 5000  # lines per request
SEARCH_BLOCK = 5000  # lines scanned per step of a search


@dataclass
class _FileIndex:
    """Line starts every ~STRIDE bytes of one file (by inode), up to ``size`` bytes."""

    size: int = 0
    offs: list[int] = field(default_factory=lambda: [0])  # checkpoint offsets (each a line start)
    lines: list[int] = field(default_factory=lambda: [0])  # newlines before each checkpoint
    total: int = 0  # newlines in [0, size)
    last: bytes = b""  # the byte at size - 1


@dataclass(frozen=True)
class _Span:
    path: Path
    ino: int
    end: int  # bytes of this file that belong to the stream (the anchor's offset in the anchor's file)
    first: int  # line number (from the oldest file) of its first line
    count: int  # its lines (an unterminated last line counts)
    index: _FileIndex


class LogPages:
    """Reads one component's log chain by sequence number; thread-safe (one request at a time)."""

    def __init__(self, path: Path, line_cap: int = 8192):
        self.path = Path(path)
        self.line_cap = line_cap
        self._idx: dict[int, _FileIndex] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ layout
    def _index(self, path: Path, ino: int, end: int) -> _FileIndex:
        ix = self._idx.get(ino)
        if ix is None or ix.size > end:
            ix = self._idx[ino] = _FileIndex()
        if ix.size < end:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            except OSError:
                return ix
            try:
                pos = ix.size
                while pos < end:
                    chunk = os.pread(fd, min(CHUNK, end - pos), pos)
                    if not chunk:
                        break
                    at = ix.offs[-1] + STRIDE - pos
                    if at < len(chunk):
                        nl = chunk.find(b"\n", max(0, at))
                        if nl >= 0 and pos + nl + 1 < end:
                            ix.offs.append(pos + nl + 1)
                            ix.lines.append(ix.total + chunk.count(b"\n", 0, nl + 1))
                    ix.total += chunk.count(b"\n")
                    ix.last = chunk[-1:]
                    pos += len(chunk)
                ix.size = pos
            finally:
                os.close(fd)
        return ix

    def _layout(self, anchor: Position) -> list[_Span]:
        """The files that hold the stream up to ``anchor``, oldest first (empty when the anchor's
        file is gone: nothing on disk can then be tied to sequence numbers)."""
        chain = log_chain(self.path)
        inos = [f.ino for f in chain]
        if anchor.ino is None or anchor.ino not in inos:
            return []
        chain = chain[: inos.index(anchor.ino) + 1]
        spans = []
        first = 0
        for k, (p, ino, size) in enumerate(chain):
            end = anchor.offset if k == len(chain) - 1 else size  # a rotated file never changes again
            ix = self._index(p, ino, end)
            end = min(end, ix.size)
            count = ix.total + (1 if end > 0 and ix.last != b"\n" else 0)
            spans.append(_Span(p, ino, end, first, count, ix))
            first += count
        live = set(inos)
        for ino in [i for i in self._idx if i not in live]:
            del self._idx[ino]  # rotated out of existence
        return spans

    # ------------------------------------------------------------------ reading
    def bounds(self, anchor: Position) -> tuple[int, int]:
        """(sequence number of the first line on disk, of the line after the last)."""
        with self._lock:
            spans = self._layout(anchor)
        total = spans[-1].first + spans[-1].count if spans else 0
        return anchor.seq - total, anchor.seq

    def read(self, anchor: Position, start_seq: int | None, limit: int, *,
             before_seq: int | None = None) -> tuple[int, list[str], int, int]:
        """Up to ``limit`` lines from ``start_seq`` (None: the first line on disk), or the ``limit``
        lines just before ``before_seq``. Returns (seq of the first line, lines, first seq on disk,
        seq after the last line on disk)."""
        limit = max(1, min(limit, MAX_PAGE))
        with self._lock:
            spans = self._layout(anchor)
            total = spans[-1].first + spans[-1].count if spans else 0
            base = anchor.seq - total
            if before_seq is not None:
                stop = min(max(before_seq, base), anchor.seq)
                start = max(base, stop - limit)
                limit = stop - start
            else:
                start = base if start_seq is None else min(max(start_seq, base), anchor.seq)
            lines = self._lines(spans, start - base, limit) if limit > 0 else []
        return start, lines, base, anchor.seq

    def _lines(self, spans: list[_Span], g: int, limit: int) -> list[str]:
        """``limit`` lines from line number ``g`` (decoded and normalised)."""
        raw: list[bytes] = []
        if not spans:
            return []  # nothing on disk tied to sequence numbers yet (no file, or not the anchor's)
        k = max(0, bisect.bisect_right([s.first for s in spans], g) - 1)
        while k < len(spans) and len(raw) < limit:
            s = spans[k]
            local = max(0, g - s.first)
            if local < s.count:
                raw.extend(self._raw(s, local, limit - len(raw)))
            k += 1
        if not raw:
            return []
        return LineNormaliser(self.line_cap).feed(b"\n".join(raw) + b"\n")[0]

    def _raw(self, s: _Span, local: int, n: int) -> list[bytes]:
        ix = s.index
        c = bisect.bisect_right(ix.lines, local) - 1
        pos, at = ix.offs[c], ix.lines[c]
        out: list[bytes] = []
        try:
            fd = os.open(s.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return out
        try:
            carry = b""
            while pos < s.end and len(out) < n:
                chunk = carry + os.pread(fd, min(CHUNK, s.end - pos), pos)
                got = len(chunk) - len(carry)
                if got <= 0:
                    break
                pos += got
                parts = chunk.split(b"\n")
                carry = parts.pop()  # what follows the last newline: the start of the next line
                skip = min(len(parts), max(0, local - at))
                at += skip
                out.extend(parts[skip: skip + n - len(out)])
                at += len(parts) - skip
            if carry and len(out) < n and at >= local:
                out.append(carry)  # an unterminated last line
        finally:
            os.close(fd)
        return out

    # ------------------------------------------------------------------ searching
    def search(self, anchor: Position, query: str, *, before_seq: int | None = None, after_seq: int | None = None,
               redact: Callable[[list[str]], list[str]] | None = None) -> tuple[int, str] | None:
        """The nearest line holding ``query`` (case-insensitive) before ``before_seq`` (searching
        older lines) or after ``after_seq`` (newer): (its seq, the line), or None."""
        q = query.lower()
        if not q:
            return None
        first, end = self.bounds(anchor)
        older = before_seq is not None
        # Lines [lo, hi) are left to search, a block at a time: from hi back when older, else from lo on.
        lo, hi = (first, min(before_seq, end)) if before_seq is not None else (
            first if after_seq is None else max(first, after_seq + 1), end)
        while lo < hi:
            start, lines, _, _ = self.read(anchor, None if older else lo, SEARCH_BLOCK, before_seq=hi if older else None)
            if not lines:
                return None
            lines = redact(lines) if redact is not None else lines
            order = range(len(lines))
            i = _find_line(lines, q, reversed(order) if older else order)
            if i is not None:
                return start + i, lines[i]
            lo, hi = (lo, start) if older else (start + len(lines), hi)
        return None


def _find_line(lines: list[str], q: str, order: Iterable[int]) -> int | None:
    """The index of the first line, in ``order``, holding ``q`` (lower case); one look at the whole
    block first, since most blocks hold no match."""
    if q not in "\n".join(lines).lower():
        return None
    return next((i for i in order if q in lines[i].lower()), None)
