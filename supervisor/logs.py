"""Capture of a component's output: raw bytes to disk, normalised lines to a bounded ring.

The data path works on chunks: one decode, one ANSI substitution and one split per chunk,
never a Python object per line beyond the line string itself. Disk writes happen on a writer
thread so a slow or stuck disk never stops the pipe from draining.
"""

from __future__ import annotations

import os
import queue
import re
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

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
        nl = chunk.rfind(b"\n")
        if nl < 0:
            self._hold(chunk)
            return [], ""
        data = self._pending + chunk[: nl + 1] if self._pending else chunk[: nl + 1]
        dropped = self._pending_dropped
        self._pending, self._pending_dropped = b"", 0
        self._hold(chunk[nl + 1:])
        text = data.decode("utf-8", "replace")
        if "\x1b" in text:
            text = ANSI_RE.sub("", text)
        if "\r" in text:
            text = "\n".join(fold_cr(x) if "\r" in x else x for x in text[:-1].split("\n")) + "\n"
        lines = text[:-1].split("\n")
        if dropped:
            lines[0] += TRUNC_MARK.format(n=dropped)
        if len(text) > self.line_cap and max(map(len, lines)) > self.line_cap:
            lines = [self._cap(x) for x in lines]
            text = "\n".join(lines) + "\n"
        return lines, text

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


class LogRing:
    """Bounded ring of normalised lines; line ``i`` of the stream has sequence number ``i``."""

    def __init__(self, maxlen: int = 10_000):
        self._lines: deque[str] = deque(maxlen=maxlen)
        self.next_seq = 0

    def extend(self, lines: list[str]) -> None:
        self._lines.extend(lines)
        self.next_seq += len(lines)

    @property
    def first_seq(self) -> int:
        return self.next_seq - len(self._lines)

    def since(self, seq: int, limit: int | None = None) -> tuple[int, list[str]]:
        """Lines from ``seq`` on (or from the oldest kept, if ``seq`` fell out of the ring)."""
        start = max(seq, self.first_seq)
        skip = start - self.first_seq
        n = len(self._lines) - skip
        if limit is not None:
            n = min(n, limit)
        if n <= 0:
            return self.next_seq, []
        if skip == 0 and n == len(self._lines):
            return start, list(self._lines)
        lines = self._lines
        return start, [lines[skip + i] for i in range(n)] if n < 256 else list(lines)[skip: skip + n]

    def tail(self, n: int) -> tuple[int, list[str]]:
        return self.since(self.next_seq - n)

    def __len__(self) -> int:
        return len(self._lines)


class RotatingLog:
    """Byte-exact append-only log with size rotation (``X.log`` -> ``X.log.1`` -> ...)."""

    def __init__(self, path: Path, max_bytes: int, backups: int):
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self._size = os.fstat(self._fd).st_size

    def write(self, data: bytes) -> None:
        if self._size and self._size + len(data) > self.max_bytes:
            self._rotate()
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
            self._size += n

    def _rotate(self) -> None:
        os.close(self._fd)
        if self.backups > 0:
            for i in range(self.backups - 1, 0, -1):
                src = self.path.with_name(f"{self.path.name}.{i}")
                if src.exists():
                    os.replace(src, self.path.with_name(f"{self.path.name}.{i + 1}"))
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        else:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC
        self._fd = os.open(self.path, flags, 0o644)
        self._size = 0

    def close(self) -> None:
        try:
            os.fsync(self._fd)
        except OSError:
            pass
        os.close(self._fd)


class LogWriter:
    """Writes chunks to a :class:`RotatingLog` on a thread of its own.

    ``put`` never blocks. Chunks wait in memory up to ``max_pending`` bytes (a stuck disk);
    beyond that they are dropped and counted, and a marker saying how much was lost is
    written once the disk accepts data again. Write errors (a full disk) are reported through
    ``on_error(exc)`` once per episode and ``on_recovered(lost_bytes)`` when writing works again.
    """

    def __init__(self, log: RotatingLog, *, max_pending: int = 256 * 1024 * 1024,
                 on_error: Callable[[OSError], None] | None = None,
                 on_recovered: Callable[[int], None] | None = None, retry_s: float = 2.0):
        self.log = log
        self.max_pending = max_pending
        self.on_error = on_error
        self.on_recovered = on_recovered
        self.retry_s = retry_s
        self._q: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()
        self.lost = 0
        self.written = 0
        self._failing = False
        self._announced = 0
        self._closing = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._run, name=f"log-writer:{log.path.name}", daemon=True)
        self._thread.start()

    def put(self, chunk: bytes) -> None:
        with self._lock:
            if self._pending + len(chunk) > self.max_pending:
                self.lost += len(chunk)
                return
            self._pending += len(chunk)
            self._idle.clear()
        self._q.put(chunk)

    def _run(self) -> None:
        while True:
            chunk = self._q.get()
            if chunk is None:
                return
            # Coalesce what is queued into one write.
            parts = [chunk]
            size = len(chunk)
            stop = False
            while size < 4 * 1024 * 1024:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                parts.append(nxt)
                size += len(nxt)
            self._write(parts[0] if len(parts) == 1 else b"".join(parts))
            with self._lock:
                self._pending -= size
                if self._pending == 0 and self._q.empty():
                    self._idle.set()
            if stop:
                return

    def _write(self, data: bytes) -> None:
        try:
            unannounced = self.lost - self._announced
            if unannounced:
                self.log.write(f"\n[rlsup: {unannounced} bytes of output were lost while the log could "
                               f"not be written]\n".encode())
                self._announced += unannounced
            self.log.write(data)
            self.written += len(data)
            if self._failing:
                self._failing = False
                if self.on_recovered:
                    self.on_recovered(self.lost)
        except OSError as e:
            if not self._failing:
                self._failing = True
                if self.on_error:
                    self.on_error(e)
            with self._lock:
                self.lost += len(data)
            # Pace the retries: the next chunk tries again after a pause.
            self._closing.wait(self.retry_s)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until everything put so far is written (or dropped); True if idle."""
        return self._idle.wait(timeout)

    def close(self, timeout: float = 10.0) -> None:
        self._closing.set()
        self._q.put(None)
        self._thread.join(timeout)
        self.log.close()
