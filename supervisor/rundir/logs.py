"""A component's output as the supervisor sees it: followed from the log file, normalised, kept in a ring.

The monitor (:mod:`~rlsup.supervisor.monitor.shim`) writes the byte-exact log; the supervisor follows that
file (:class:`LogFollower`) rather than a pipe, so it can die, be stopped or be upgraded while the
component writes on, and a new supervisor continues from a recorded position (inode, byte offset,
line sequence number) with no line seen twice or missed. The data path works on chunks: one
decode, one ANSI substitution and one split per chunk, never a Python object per line beyond the
line string itself. Rings are bounded in lines and, across the run, in bytes (:class:`RingBudget`).
"""

from __future__ import annotations

import contextlib
import heapq
import os
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

# CSI sequences (colours, cursor moves), OSC sequences (titles, hyperlinks), and lone escapes.
ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
TRUNC_MARK = " …[truncated {n} chars]"


def fold_cr(line: str) -> str:
    """What a terminal shows for a line rewritten with ``\\r``: its last non-empty segment."""
    line = line.rstrip("\r")
    i = line.rfind("\r")
    return line if i < 0 else line[i + 1:]


class LineNormaliser:
    """Turns raw chunks into complete, normalised lines (ANSI stripped, ``\\r`` folded, capped).

    The unterminated tail is kept as bytes (so a UTF-8 sequence split across chunks decodes
    whole) and is exposed, folded, as :attr:`partial` for progress bars that never print a newline.
    """

    def __init__(self, line_cap: int = 8192):
        self.line_cap = line_cap
        self._pending = b""
        self._pending_dropped = 0

    def feed(self, chunk: bytes) -> tuple[list[str], str]:
        """Return (complete lines, their text joined by newlines) for one chunk."""
        text, n, lines = self.feed_text(chunk)
        return (lines if lines is not None else text[:-1].split("\n")) if n else [], text

    def feed_text(self, chunk: bytes) -> tuple[str, int, list[str] | None]:
        """For one chunk: the text of its complete lines (each ended by a newline), how many, and the lines as
        strings where they had to be made (a line capped, or marked as cut), else None: a flood's chunk stays one
        string until somebody reads its lines."""
        nl = chunk.rfind(b"\n")
        if nl < 0:
            self._hold(chunk)
            return "", 0, None
        whole = memoryview(chunk)[: nl + 1]
        data = self._pending + whole if self._pending else whole
        dropped = self._pending_dropped
        self._pending, self._pending_dropped = b"", 0
        self._hold(chunk[nl + 1:])
        text = raw = str(data, "utf-8", "replace")
        if "\x1b" in text:
            text = ANSI_RE.sub("", text)
        if "\r" in text:
            text = "\n".join(fold_cr(x) if "\r" in x else x for x in text[:-1].split("\n")) + "\n"
        # (the held tail has no newline, so the chunk has all of the text's unless ANSI or \r changed it)
        n = _newlines(chunk) if text is raw else text.count("\n")
        if not dropped and (len(text) <= self.line_cap or _no_line_over(text, self.line_cap)):
            return text, n, None
        lines = text[:-1].split("\n")
        if dropped:
            lines[0] += TRUNC_MARK.format(n=dropped)
        if len(text) > self.line_cap and max(map(len, lines)) > self.line_cap:
            lines = [self._cap(x) for x in lines]
            text = "\n".join(lines) + "\n"
        return text, n, lines

    def _hold(self, tail: bytes) -> None:
        if not tail:
            return
        self._pending += tail
        if len(self._pending) > self.line_cap * 4:
            cr = self._pending.rfind(b"\r", 0, len(self._pending) - 1)
            if cr >= 0:  # a progress bar rewriting itself: only its latest state matters
                self._pending = self._pending[cr:]
            if len(self._pending) > self.line_cap * 4:
                keep = self.line_cap * 2
                self._pending_dropped += len(self._pending) - keep
                self._pending = self._pending[:keep]

    def _cap(self, line: str) -> str:
        if len(line) <= self.line_cap:
            return line
        return line[: self.line_cap] + TRUNC_MARK.format(n=len(line) - self.line_cap)

    @property
    def held_bytes(self) -> int:
        """Bytes of the unterminated tail, dropped ones included: where the current line began."""
        return len(self._pending) + self._pending_dropped

    @property
    def partial(self) -> str:
        if not self._pending:
            return ""
        text = self._pending.decode("utf-8", "replace")
        return self._cap(ANSI_RE.sub("", fold_cr(text)))

    def flush(self) -> tuple[list[str], str]:
        """At end of output: the unterminated tail as a last line."""
        if not self._pending:
            return [], ""
        return self.feed(b"\n")


def _newlines(data: bytes) -> int:
    """How many newlines ``data`` holds: a ``replace`` finds them with memchr, several times faster than ``count``,
    which compares byte by byte."""
    return len(data) - len(data.replace(b"\n", b""))


def _no_line_over(text: str, cap: int) -> bool:
    """Whether no line of ``text`` is longer than ``cap`` characters, known without splitting it: every aligned
    stretch of ``cap // 2`` characters holds a newline (a longer line would hold a whole stretch without one). A
    stretch without one may still be part of a short enough line: then this says False, and the caller splits."""
    step = max(1, cap // 2)
    find = text.find
    return all(find("\n", p, p + step) >= 0 for p in range(0, len(text) - step + 1, step))


LINE_OVERHEAD = 57  # bytes a short str and its deque slot cost beyond the characters (CPython, 64-bit)


class RingBudget:
    """A byte budget shared by the rings of a run: when the total is over, the largest ring gives up
    its oldest lines first, so one chatty component cannot push out a quiet one's tail."""

    def __init__(self, total_bytes: int):
        self.total = total_bytes
        self.used = 0
        self.rings: list[LogRing] = []
        # Largest ring first, lazily: an entry whose size is no longer its ring's is refreshed when
        # it reaches the top, so a batch costs O(log rings), not a scan of every ring.
        self._heap: list[tuple[int, int, LogRing]] = []
        self._pushes = 0

    def grew(self, ring: LogRing) -> None:
        self._pushes += 1
        heapq.heappush(self._heap, (-ring.bytes, self._pushes, ring))
        if len(self._heap) > 4 * len(self.rings) + 64:
            self._heap = [(-r.bytes, i, r) for i, r in enumerate(self.rings)]
            heapq.heapify(self._heap)

    def enforce(self) -> None:
        while self.used > self.total and self._heap:
            neg, _, big = self._heap[0]
            if -neg != big.bytes:
                self._pushes += 1
                heapq.heapreplace(self._heap, (-big.bytes, self._pushes, big))
                continue
            if len(big) <= 1:
                return
            big.evict(max(1, len(big) // 16), free=True)


CHUNK_LINES = 256  # a batch of fewer lines is made strings and joins the ring's newest list


class LogRing:
    """Bounded ring of normalised lines; line ``i`` of the stream has sequence number ``i``.

    Lines are kept in the batches they came in, so that adding and evicting cost per batch, not per line: a batch of
    :data:`CHUNK_LINES` or more as its text, split into lines only when somebody reads them, a shorter one as
    strings in the newest list. Whole batches are dropped; the oldest is cut at an offset. A text is counted in
    :attr:`bytes` whole until it goes or is split (its memory goes back only then); where the run's byte budget is
    half used, batches come as lines, so that the budget frees exactly the oldest."""

    def __init__(self, maxlen: int = 10_000, budget: RingBudget | None = None, first_seq: int = 0):
        self._chunks: deque[list[str] | str] = deque()
        self._counts: deque[int] = deque()  # lines in each chunk, those evicted from the oldest included
        self._sizes: deque[int] = deque()  # the bytes each chunk is counted for
        self._head = 0  # lines of the oldest chunk already evicted
        self._len = 0
        self.maxlen = maxlen
        self.next_seq = first_seq
        self.bytes = 0
        self.budget = budget
        if budget is not None:
            budget.rings.append(self)

    def extend(self, lines: list[str]) -> None:
        if lines:
            self._add(lines, len(lines), sum(map(len, lines)) + LINE_OVERHEAD * len(lines))

    def add_text(self, text: str, n: int, lines: list[str] | None = None) -> None:
        """Add the ``n`` lines of ``text`` (each ended by a newline), or ``lines`` when they are made already."""
        if not n:
            return
        roomy = self.budget is None or self.budget.used + len(text) <= self.budget.total // 2
        if lines is not None or n < CHUNK_LINES or not roomy:  # short, made, or memory tight: exact lines
            self.extend(lines if lines is not None else text[:-1].split("\n"))
        else:
            self._add(text, n, len(text) + LINE_OVERHEAD)

    def _add(self, chunk: list[str] | str, n: int, size: int) -> None:
        last = self._chunks[-1] if self._chunks else None
        if isinstance(chunk, list) and isinstance(last, list) and len(last) < CHUNK_LINES:
            last.extend(chunk)
            self._counts[-1] += n
            self._sizes[-1] += size
        else:
            self._chunks.append(list(chunk) if isinstance(chunk, list) else chunk)  # the caller's list stays theirs
            self._counts.append(n)
            self._sizes.append(size)
        self._len += n
        self.next_seq += n
        self._grow(size)
        over = self._len - self.maxlen
        if over > 0:
            self.evict(over)
        if self.budget is not None and self.budget.used > self.budget.total:
            self.budget.enforce()

    def _grow(self, size: int) -> None:
        self.bytes += size
        if self.budget is not None:
            self.budget.used += size
            if size > 0:
                self.budget.grew(self)

    def evict(self, n: int, free: bool = False) -> None:
        """Drop the oldest ``n`` lines; with ``free``, a text they are part of is split so that their memory goes
        now (the byte budget's need), not when the rest of it goes."""
        n = min(n, self._len)
        freed = 0
        while n > 0:
            if free and isinstance(self._chunks[0], str) and n < self._counts[0] - self._head:
                self._split(0)
            first = self._chunks[0]
            left = self._counts[0] - self._head
            if n >= left:
                self._chunks.popleft()
                self._counts.popleft()
                freed += self._sizes.popleft()
                self._head = 0
                self._len -= left
                n -= left
                continue
            if isinstance(first, list):
                cut = sum(map(len, first[self._head:self._head + n])) + LINE_OVERHEAD * n
                self._sizes[0] -= cut
                freed += cut
            self._head += n
            self._len -= n
            n = 0
            if isinstance(first, list) and self._head >= CHUNK_LINES:
                del first[:self._head]  # their memory goes back now, not when the rest of the chunk does
                self._counts[0] -= self._head
                self._head = 0
        self._grow(-freed)

    def reset(self, first_seq: int) -> None:
        self.evict(self._len)
        self.next_seq = first_seq

    @property
    def first_seq(self) -> int:
        return self.next_seq - self._len

    def since(self, seq: int, limit: int | None = None) -> tuple[int, list[str]]:
        """Lines from ``seq`` on (or from the oldest kept, if ``seq`` fell out of the ring)."""
        start = max(seq, self.first_seq)
        n = self.next_seq - start if limit is None else min(self.next_seq - start, limit)
        out: list[str] = []
        pos = self._head + start - self.first_seq
        for i, count in enumerate(self._counts):
            if len(out) >= n:
                break
            if pos >= count:
                pos -= count
                continue
            want = min(count - pos, n - len(out))
            chunk = self._chunks[i]
            if isinstance(chunk, str) and pos + want == count:  # its last lines (a reader keeping up): those alone
                out += chunk.rsplit("\n", want + 1)[-want - 1:-1]
            else:
                out += self._split(i)[pos:pos + want]
            pos = 0
        if self.budget is not None and self.budget.used > self.budget.total:  # split lines can cost more
            self.budget.enforce()
        return (start, out) if out else (self.next_seq, out)

    def _split(self, i: int) -> list[str]:
        """Chunk ``i`` as lines (a text is split once, and counted as its lines from then on)."""
        chunk = self._chunks[i]
        if isinstance(chunk, list):
            return chunk
        lines = chunk[:-1].split("\n")
        self._chunks[i] = lines
        kept = lines[self._head:] if i == 0 else lines
        size = sum(map(len, kept)) + LINE_OVERHEAD * len(kept)
        self._grow(size - self._sizes[i])
        self._sizes[i] = size
        return lines

    def tail(self, n: int) -> tuple[int, list[str]]:
        return self.since(self.next_seq - n)

    def __len__(self) -> int:
        return self._len


class LogFile(NamedTuple):
    """One file of a log on disk: ``X.log`` or one of its rotations ``X.log.N``."""

    path: Path
    ino: int
    size: int


def log_chain(path: Path, backups: int | None = None) -> list[LogFile]:
    """``path`` and its rotations (``path.N``, N up to ``backups`` when given), oldest first: the
    one reader of how a log lies on disk (the highest N is the oldest; ``path`` itself the newest).
    Files that vanish while they are listed are left out."""
    name = path.name
    numbered = []
    with contextlib.suppress(OSError), os.scandir(path.parent) as entries:
        for entry in entries:
            suffix = entry.name[len(name) + 1:]
            if entry.name.startswith(name + ".") and suffix.isascii() and suffix.isdigit():  # not '²': int() refuses it
                k = int(suffix)
                if backups is None or 0 < k <= backups:
                    numbered.append((k, Path(entry.path)))
    out = []
    for _k, p in sorted(numbered, reverse=True) + [(0, path)]:
        try:
            st = os.stat(p)
        except OSError:
            continue
        out.append(LogFile(p, st.st_ino, st.st_size))
    return out


TAIL_BLOCK = 1 << 16  # bytes read at a time from the end of a file


def last_lines(path: str | Path, n: int, *, max_bytes: int | None = None, skip_blank: bool = False) -> list[str]:
    """The last ``n`` lines of the file at ``path``, oldest first: the one reader of a file's tail.

    The file is read backwards a block at a time, so memory holds those lines and never the rest of
    the file; ``max_bytes`` bounds it further to the file's last ``max_bytes`` (whose first line may
    then be cut). Lines end at ``\n`` only (a ``\r`` stays for the caller to fold), each decoded as
    UTF-8 with replacement; a final newline ends the last line, it starts no empty one. With
    ``skip_blank``, blank lines are left out and do not count. Raises OSError when unreadable.
    """
    out: list[str] = []
    if n <= 0:
        return out
    with open(path, "rb") as fh:
        for raw in lines_backwards(fh, max_bytes):
            line = raw.decode("utf-8", "replace")
            if skip_blank and not line.strip():
                continue
            out.append(line)
            if len(out) == n:
                break
    out.reverse()
    return out


def lines_backwards(fh: BinaryIO, max_bytes: int | None) -> Iterator[bytes]:
    """The lines of ``fh`` without their ``\n``, the last first, read a block at a time from its end
    (only from its last ``max_bytes`` when given)."""
    pos = fh.seek(0, os.SEEK_END)
    floor = 0 if max_bytes is None else max(0, pos - max_bytes)
    pending: list[bytes] = []  # the end of a line whose start lies further back, newest piece first
    at_end = True  # no newline met yet: an empty piece after one is the file's final newline, not a line
    while pos > floor:
        size = min(TAIL_BLOCK, pos - floor)
        pos -= size
        fh.seek(pos)
        block = fh.read(size)
        parts = block.split(b"\n")
        if len(parts) == 1:
            pending.append(block)
            continue
        last = parts[-1] + b"".join(reversed(pending))
        pending = [parts[0]]
        if not (at_end and last == b""):
            yield last
        at_end = False
        yield from reversed(parts[1:-1])
    if pending:
        yield b"".join(reversed(pending))


@dataclass
class Position:
    """Where a follower is: the file (by inode), the byte offset of the next unread line in it, and the
    sequence number of that line. Recorded in ``state.json`` so the next supervisor continues there."""

    ino: int | None = None
    offset: int = 0
    seq: int = 0

    def to_dict(self) -> dict[str, int | None]:
        return {"ino": self.ino, "offset": self.offset, "seq": self.seq}

    @classmethod
    def from_dict(cls, d: object) -> Position | None:
        if not isinstance(d, dict):
            return None
        try:
            return cls(int(d["ino"]) if d.get("ino") is not None else None, int(d.get("offset", 0)),
                       int(d.get("seq", 0)))
        except (TypeError, ValueError):
            return None


class LogFollower:
    """Reads one component's log as its monitor writes it, across rotations (``X.log`` -> ``X.log.1``).

    The monitor rotates only by renaming and never writes to a renamed file, so once ``X.log`` is a
    new inode, what the old descriptor still holds is final: read it to its end, then go on with the
    next file in order. Files that rotated out of existence meanwhile are reported as a gap.
    """

    def __init__(self, path: Path, backups: int, start: Position | None = None):
        self.path = path
        self.backups = backups
        self.fd: int | None = None
        self.ino: int | None = None
        self.offset = 0
        self.gaps = 0  # files skipped because they were deleted before we read them
        # With ``rotation_events`` the owner sets ``maybe_rotated`` when the directory saw the log created
        # or renamed; without them, every read that reaches the end checks for a rotation.
        self.rotation_events = False
        self.maybe_rotated = True
        if start is not None and start.ino is not None:
            self._open_ino(start.ino, start.offset)

    def _open(self, p: Path, offset: int) -> bool:
        try:
            fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return False
        if self.fd is not None:
            os.close(self.fd)
        self.fd, self.ino, self.offset = fd, os.fstat(fd).st_ino, offset
        return True

    def _open_ino(self, ino: int, offset: int) -> None:
        chain = log_chain(self.path, self.backups)
        path = next((f.path for f in chain if f.ino == ino), None)
        if path is not None:
            self._open(path, offset)
        elif chain:  # the recorded file rotated out of existence: start at the oldest that is left
            self.gaps += 1
            self._open(chain[0].path, 0)

    def read_back(self, ino: int, offset: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` of the log just before ``offset`` of the file ``ino`` (what a new supervisor
        puts back in its ring so that a client reconnecting by sequence number misses nothing)."""
        path = next((f.path for f in log_chain(self.path, self.backups) if f.ino == ino), None)
        if path is None:
            return b""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return b""
        try:
            start = max(0, offset - max_bytes)
            data = os.pread(fd, offset - start, start)
        finally:
            os.close(fd)
        return data[data.find(b"\n") + 1:] if start > 0 else data  # from a line boundary

    def read(self, limit: int = 4 << 20) -> bytes:
        """Up to ``limit`` new bytes (possibly from more than one file, in order)."""
        if self.fd is None and not self._open(self.path, 0):
            return b""
        parts: list[bytes] = []
        got = 0
        while got < limit:
            assert self.fd is not None
            want = min(limit - got, 1 << 20)
            chunk = os.pread(self.fd, want, self.offset)
            parts.append(chunk)
            got += len(chunk)
            self.offset += len(chunk)
            if len(chunk) == want:
                continue
            # At the end of our file (a short read is the end too): if it is still X.log, that is all for now.
            if not self._rotated():
                break
            tail = os.pread(self.fd, 1 << 30, self.offset)  # final now: the monitor moved on
            parts.append(tail)
            got += len(tail)
            self.offset += len(tail)
            nxt = self._next_file()
            if nxt is None or not self._open(nxt, 0):
                break
            # The file just opened may have rotated too, its event consumed with the one that brought
            # us here: check again at its end (a fast writer otherwise left the follower stuck for good).
            self.maybe_rotated = True
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _rotated(self) -> bool:
        """At the end of our file: whether ``X.log`` is another file now (asked of the file system only
        when the directory said it may be, or always without rotation events)."""
        if self.rotation_events and not self.maybe_rotated:
            return False
        self.maybe_rotated = False
        try:
            cur = os.stat(self.path).st_ino
        except OSError:
            return False
        return cur != self.ino

    def _next_file(self) -> Path | None:
        """The log file after ours in the chain; the oldest left (counted as a gap) if ours is gone."""
        chain = log_chain(self.path, self.backups)
        inos = [f.ino for f in chain]
        if self.ino in inos:
            k = inos.index(self.ino) + 1
            return chain[k].path if k < len(chain) else None
        self.gaps += 1
        return chain[0].path if chain else None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
