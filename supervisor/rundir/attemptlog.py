"""One attempt's output, read back from the log files by the range its ``started`` event recorded.

Each ``started`` event says where its attempt's output begins: ``log_seq`` (the line's number in the
component's line stream) and ``log_ino``/``log_offset`` (the byte offset in the log file, by inode, its
monitor appended to). The attempt's output ends where the next attempt's begins. The monitor rotates
the log by renaming (``X.log`` -> ``X.log.1``), so a range may span files; they are found by inode.
What reads an attempt's output from disk (``rlsup logs --attempt``, the report, ``rlsup diagnose
RUN_DIR``) reads it here, so no verdict about an attempt rests on another attempt's lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..records.events import ComponentStarted, Record, as_record
from .logs import LineNormaliser, LogFile, log_chain


@dataclass(frozen=True)
class Mark:
    """Where an attempt's output begins: the log file (by inode; None: the log did not exist yet) and
    the byte offset in it."""

    ino: int | None
    offset: int


@dataclass(frozen=True)
class Range:
    attempt: int
    start: Mark | None  # None: the journal predates output ranges (rlsup < 0.3)
    end: Mark | None  # None: up to the end of the log (the latest attempt)
    started: Record  # its ``started`` record (a :class:`ComponentStarted`)


def mark_of(e: ComponentStarted) -> Mark | None:
    return None if e.log_offset is None else Mark(e.log_ino, e.log_offset)


# What the journal holds: typed records (``journal.read_records``); a caller still holding the dicts
# gets them parsed here.
Events = Iterable[Record | Mapping[str, Any]]


def ranges(events: Events, name: str) -> list[Range]:
    """Every attempt of ``name`` the journal started, oldest first, with its output range. (An
    attempt number of 0 is none: attempts count from 1, and an old start without one is numbered
    by its place.)"""
    starts = [(r, r.event) for r in map(as_record, events)
              if isinstance(r.event, ComponentStarted) and r.event.component == name]
    ends = [mark_of(e) for _, e in starts[1:]] + [None]  # each ends where the next begins
    return [Range(e.attempt or i + 1, mark_of(e), end, rec)
            for i, ((rec, e), end) in enumerate(zip(starts, ends, strict=False))]


def find(events: Events, name: str, attempt: int) -> Range | None:
    """The range of attempt ``attempt`` (the latest start of that number: a resumed run continues numbering)."""
    return next((r for r in reversed(ranges(events, name)) if r.attempt == attempt), None)


def read_bytes(log: Path, start: Mark | None, end: Mark | None, max_bytes: int = 4 << 20) -> tuple[bytes, bool]:
    """The bytes between ``start`` and ``end`` (the last ``max_bytes`` of them, from a line boundary),
    and whether the beginning is missing (rotated away or cut to ``max_bytes``)."""
    files = log_chain(log)
    if not files:
        return b"", False
    i, off, partial = _start_in(files, start)
    if end is not None and end.ino is None:
        return b"", partial  # the next attempt began before there was any log: this one wrote nothing
    data, cut = _read_last(_segments(files[i:], off, end), max_bytes)
    return data, partial or cut


def _start_in(files: list[LogFile], start: Mark | None) -> tuple[int, int, bool]:
    """Where in the chain ``files`` the range begins: (file index, byte offset, whether its file is gone).

    A mark without an inode (the log did not exist yet) counts only while there is a single file.
    """
    if start is None or start.ino is None:
        return 0, (start.offset if start is not None and len(files) == 1 else 0), False
    inos = [ino for _p, ino, _s in files]
    if start.ino in inos:
        return inos.index(start.ino), start.offset, False
    return 0, 0, True  # its file rotated out of existence: what is left of the range starts at the oldest file


def _segments(files: list[LogFile], off: int, end: Mark | None) -> list[tuple[Path, int, int]]:
    """``(path, from, to)`` byte ranges from ``off`` in the first of ``files`` up to ``end`` (or the end)."""
    segments: list[tuple[Path, int, int]] = []
    for p, ino, size in files:
        last = end is not None and ino == end.ino
        stop = min(size, end.offset) if end is not None and last else size
        if stop > off:
            segments.append((p, off, stop))
        off = 0
        if last:
            break
    return segments


def _read_last(segments: list[tuple[Path, int, int]], max_bytes: int) -> tuple[bytes, bool]:
    """The last ``max_bytes`` of ``segments`` (from a line boundary when cut), and whether the
    beginning is missing (cut, or a file could not be read)."""
    total = sum(b - a for _p, a, b in segments)
    skip = max(0, total - max_bytes)
    partial = False
    parts = []
    for p, a, b in segments:
        n = b - a
        if skip >= n:
            skip -= n
            continue
        a += skip
        skip = 0
        try:
            with open(p, "rb") as fh:
                fh.seek(a)
                parts.append(fh.read(b - a))
        except OSError:
            partial = True
    data = b"".join(parts)
    if total > max_bytes:
        partial = True
        data = data[data.find(b"\n") + 1:]
    return data, partial


def lines_of(data: bytes, line_cap: int = 8192) -> list[str]:
    """Bytes of a log as the supervisor shows them: ANSI stripped, ``\\r`` folded, long lines capped."""
    norm = LineNormaliser(line_cap)
    lines, _ = norm.feed(data)
    tail, _ = norm.flush()
    return lines + tail
