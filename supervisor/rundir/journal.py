"""events.jsonl and state.json: what the run leaves on disk for people and scripts."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..monitor import shim
from ..records.events import Record, misfits, parse
from .logs import lines_backwards

# Space rlsup keeps allocated ahead of its own records, so that a disk a component filled still
# takes the run's next events and state (what databases do with preallocated files): blocks
# allocated past the end of events.jsonl (fallocate KEEP_SIZE: the file's size does not change),
# and state.json written in place into one of two preallocated slots.
JOURNAL_RESERVE = 256 << 10
STATE_HEADROOM = 64 << 10
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
UNWRITABLE = (errno.EROFS, errno.EIO)  # a file system turned read-only, or failing
_FALLOC_FL_KEEP_SIZE = 1


def has_room(folder: Path, size: int) -> bool:
    """Whether the file system of ``folder`` has ``size`` bytes free for us (True when it cannot tell)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return True
    return st.f_bavail * st.f_frsize >= size


def reserve_space(fd: int, offset: int, length: int) -> bool:
    """Allocate blocks for ``[offset, offset + length)`` without changing the file's size; False where
    the disk has no room or the file system cannot (then nothing is reserved)."""
    fallocate = _fallocate()
    if fallocate is None:
        return False
    if fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return True
    if ctypes.get_errno() in (errno.EOPNOTSUPP, errno.ENOSYS):
        raise NotImplementedError("fallocate is not supported here")
    return False


@functools.cache
def _fallocate() -> Any:
    """libc's ``fallocate``; None where there is none."""
    try:
        fallocate = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    return fallocate


def _write_new(tmp: Path, data: bytes, mode: int = 0o600) -> None:
    """``tmp`` created (or truncated) holding ``data``, synced; removed again when that fails (a
    half-written temporary file would hold the blocks it got)."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
    try:
        shim.write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink(tmp)
        raise
    os.close(fd)


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` so that readers see the old or the new file, never a torn one."""
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    _write_new(tmp, data, mode)
    os.replace(tmp, path)
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


class Journal:
    """Append-only events.jsonl; ``seq`` continues across supervisors of the same run dir.

    Every event is one whole line written by one ``write``. A write that fails or comes up short (a
    full disk) is cut back to the last complete record, and the event waits in memory (in order)
    until the disk takes it: the file never holds a torn line that later lines would be glued to.
    Events that could not be kept at all (memory bound, or the supervisor ending with the disk still
    full; :data:`JOURNAL_RESERVE` makes that rare) are counted in ``dropped``.
    """

    MAX_PENDING = 100_000

    def __init__(self, path: Path, reserve: int = JOURNAL_RESERVE):
        self.path = path
        self.last_seq = last_seq(path)
        self._pending: list[bytes] = []
        self.dropped = 0
        self.unsaid = 0  # dropped events not yet told about (see take_unsaid)
        self.error: OSError | None = None
        self.reserve = reserve
        self._reserved_end = 0
        self._fd: int | None = None
        self._closing = threading.Lock()  # a sync in another thread and close() never overlap (fd reuse)
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as e:
            if e.errno not in UNWRITABLE:
                raise
            self.error = e  # a read-only or failing disk: events wait in memory (rlsup down without a supervisor)
            return
        self._repair_tail()
        self._top_up(os.fstat(self._fd).st_size)

    def _top_up(self, size: int) -> None:
        """Keep ``reserve`` bytes allocated past ``size``: asked again once half of it is used."""
        assert self._fd is not None
        try:
            if (self.reserve and size + self.reserve // 2 >= self._reserved_end
                    and has_room(self.path.parent, self.reserve)  # a failed fallocate churns blocks
                    and reserve_space(self._fd, size, self.reserve)):
                self._reserved_end = size + self.reserve
        except NotImplementedError:  # a file system without it (NFS, some FUSE): no reserve, no retries
            self.reserve = 0

    def take_unsaid(self) -> int:
        """Events dropped since the last call (to be told once the journal takes records again)."""
        n, self.unsaid = self.unsaid, 0
        return n

    def _repair_tail(self) -> None:
        """A line torn by a crash mid-write gets its newline, so the next record starts a line."""
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        if size:
            rfd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            try:
                last = os.pread(rfd, 1, size - 1)
            finally:
                os.close(rfd)
            if last != b"\n":
                with contextlib.suppress(OSError):
                    os.write(self._fd, b"\n")

    def append(self, event: dict[str, Any], sync: bool = True) -> None:
        line = (json.dumps(event, default=str, ensure_ascii=False) + "\n").encode()
        self._pending.append(line)
        if len(self._pending) > self.MAX_PENDING:  # a disk full for a very long time: keep the newest
            del self._pending[0]
            self.dropped += 1
            self.unsaid += 1
        self.flush(sync)

    def flush(self, sync: bool = True) -> bool:
        """Write what is pending; False while the disk refuses (it stays pending)."""
        if self._fd is None:
            return not self._pending
        while self._pending:
            line = self._pending[0]
            try:
                size = os.fstat(self._fd).st_size
                n = os.write(self._fd, line)
            except OSError as e:
                self.error = e
                return False
            if n != len(line):
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, size)
                self.error = OSError(28, "short write (no space left on device?)")
                return False
            self._pending.pop(0)
            self._top_up(size + n)
        self.error = None
        if sync:
            self.sync()
        return True

    def sync(self) -> None:
        """fsync what was written (not what is pending): safe to call from another thread than the writer's,
        and after :meth:`close` (then it does nothing)."""
        with self._closing:
            if self._fd is None:
                return
            try:
                os.fsync(self._fd)
            except OSError as e:
                self.error = e

    @property
    def pending(self) -> int:
        return len(self._pending)

    def close(self) -> int:
        """Write what is pending and close; the number of events the disk would not take (lost)."""
        self.flush(sync=True)
        lost = len(self._pending)
        self.dropped += lost
        self._pending.clear()
        with self._closing:
            if self._fd is not None:
                with contextlib.suppress(OSError):  # a failing disk may refuse even that
                    os.fsync(self._fd)
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = None
        return lost


class StateFile:
    """``state.json``, replaced atomically, also on a full disk.

    Normally written as a new file renamed into place. Where the disk refuses, the new state is
    written in place into one of two slot files (``.state.json.slot0``/``1``) whose blocks were
    allocated while there was room, padded with spaces (valid JSON whitespace) to what the slot held,
    and ``state.json`` becomes a hard link to it by an atomic rename: readers still see the old or
    the new state, never a torn one, and no new block is needed. The other slot keeps its name, so
    its blocks stay for the next write.
    """

    def __init__(self, path: Path):
        self.path = path
        self.slots = [path.with_name(f".{path.name}.slot{i}") for i in (0, 1)]
        self._next = 0

    def write(self, data: bytes) -> None:
        # Short of room, straight to a slot: trying a new file first would take blocks and give them back
        # on failure, which a component filling the disk grabs at once.
        if not has_room(self.path.parent, 2 * len(data) + STATE_HEADROOM) and self._write_slot(data):
            return
        try:
            write_atomic(self.path, data)
        except OSError as e:
            if e.errno not in NO_SPACE or not self._write_slot(data):
                raise
            return
        self._prepare(len(data))

    def _prepare(self, size: int) -> None:
        """With room on the disk: both slots hold at least ``size`` plus headroom of allocated bytes."""
        for slot in self.slots:
            try:
                fd = os.open(slot, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            except OSError:
                continue
            with contextlib.suppress(OSError, NotImplementedError):
                have = os.fstat(fd).st_size
                if have < size:  # written bytes (spaces: a slot is valid JSON only once it holds a state)
                    os.pwrite(fd, b" " * (size + STATE_HEADROOM - have), have)
                    os.fsync(fd)
                else:
                    reserve_space(fd, have, STATE_HEADROOM)
            os.close(fd)

    def _write_slot(self, data: bytes) -> bool:
        for _ in range(2):
            slot = self.slots[self._next]
            self._next ^= 1
            with contextlib.suppress(OSError):
                if os.path.samefile(slot, self.path):
                    continue  # the slot readers see now: never written in place
            try:
                fd = os.open(slot, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                have = os.fstat(fd).st_size
                if len(data) > have and not reserve_space(fd, have, len(data) - have):
                    continue
                os.pwrite(fd, data + b" " * max(0, have - len(data)), 0)
                os.fsync(fd)
            except (OSError, NotImplementedError):
                continue
            finally:
                os.close(fd)
            tmp = self.path.with_name(f".{self.path.name}.link.{os.getpid()}")
            try:
                _unlink(tmp)
                os.link(slot, tmp)
                os.replace(tmp, self.path)
                return True
            except OSError:
                _unlink(tmp)
        return False


def last_event(path: Path) -> dict[str, Any] | None:
    """The journal's last sound event (as :func:`read_records` judges a line), read from its tail (None: none);
    damaged lines at its end are passed over."""
    with contextlib.suppress(OSError), open(path, "rb") as f:
        for raw in lines_backwards(f, 65536):
            event, _ = _decode(raw)
            if event is not None:
                return event
    return None


def journal_id(path: Path) -> str | None:
    """Which journal this is (its file's device and inode): the same for every supervisor of a run (a resume,
    a take-over, a requeue append to it), another for a run started anew there (``--fresh`` moves the old run
    dir aside). None where it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{st.st_dev:x}:{st.st_ino:x}"


def last_seq(path: Path) -> int:
    """The ``seq`` of the journal's last sound line (0: none); damaged lines at its end are passed over."""
    event = last_event(path)
    return event["seq"] if event else 0


MAX_LINE = 16 << 20  # a journal line longer than this is damage (rlsup's longest events are kilobytes)
DAMAGE_SHOWN = 5  # line numbers named in the note; the rest are counted
MAX_TS = 1e11  # unix seconds of the year 5138: a later "time" is damage (time.gmtime would overflow)

# The damaged lines readers of this process met, by journal: path -> {line number: what is wrong}.
# Readers skip them (or, for a field of the wrong type, only that field); the command says so once
# (:func:`damage_notes`), however many times it read the journal.
DAMAGE: dict[str, dict[int, str]] = {}
_told: set[str] = set()


def _envelope_problem(e: Any) -> str | None:
    """What makes ``e`` no event at all (None: it is one)."""
    if not isinstance(e, dict):
        return f"not a JSON object ({type(e).__name__})"
    seq, kind = e.get("seq"), e.get("kind")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        return f"seq {_short(seq)} is not a positive integer"
    if not isinstance(kind, str):
        return f"kind {_short(kind)} is not a string"
    ts = e.get("ts", 0)
    if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not 0 <= ts < MAX_TS:  # NaN fails too
        return f"ts {_short(ts)} is not a time"
    comp = e.get("component")
    if comp is not None and not isinstance(comp, str):
        return f"component {_short(comp)} is not a string"
    return None


def _short(v: Any) -> str:
    text = json.dumps(v, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _lines(f: Any) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) of each line; None for a line over :data:`MAX_LINE` (read past, not kept)."""
    for n, raw in enumerate(iter(lambda: f.readline(MAX_LINE + 1), b""), 1):
        too_long = len(raw) > MAX_LINE and not raw.endswith(b"\n")
        while too_long and raw and not raw.endswith(b"\n"):  # the rest of it, read past
            raw = f.readline(MAX_LINE)
        yield n, None if too_long else raw


def _decode(raw: bytes | None) -> tuple[dict[str, Any] | None, str | None]:
    """A line as an event dict, or why it is none."""
    if raw is None:
        return None, f"longer than {MAX_LINE >> 20} MiB"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8"
    try:
        e = json.loads(text)
    except (ValueError, RecursionError):
        return None, "not JSON"
    problem = _envelope_problem(e)
    return (None, problem) if problem else (e, None)


def _sound_events(f: Any, damage: dict[int, str]) -> Iterator[dict[str, Any]]:
    """The events of the journal file ``f`` in ``seq`` order, each damaged line noted in ``damage``. The
    latest event is held back until the next shows whether its ``seq`` jumped (then it is the line out
    of order, not every line after it)."""
    held: dict[str, Any] | None = None
    held_line = before = 0  # ``before``: the seq of the last event let through
    for n, raw in _lines(f):
        if raw is not None and not raw.strip():
            continue  # a blank line holds nothing to lose
        e, problem = _decode(raw)
        if e is None:
            damage[n] = problem or "damaged"
            continue
        bad = misfits(e)
        if bad:
            damage[n] = "wrong type of " + ", ".join(f"{k} ({_short(e[k])})" for k in bad) + ": ignored"
            e = {k: v for k, v in e.items() if k not in bad}
        seq = e["seq"]
        if held is not None and seq > held["seq"]:
            yield held
            before = held["seq"]
        elif held is not None and seq == held["seq"]:
            damage[n] = f"seq {seq} again (line {held_line} has it): a duplicate"
            continue
        elif held is not None and seq > before:  # the held line's seq jumped: it is the one out of order
            damage[held_line] = f"seq {held['seq']} is above the next line's ({seq}): out of order"
        elif held is not None or seq <= before:
            damage[n] = f"seq {seq} is not above the line before ({held['seq'] if held else before}): out of order"
            continue
        held, held_line = e, n
    if held is not None:
        yield held


def read_records(path: Path, since_seq: int = 0, kinds: Callable[[str], bool] | None = None) -> Iterator[Record]:
    """The journal's events with ``seq > since_seq``, in order, as typed records (:func:`parse`; a
    caller that passes one on as JSON, ``rlsup events --json`` or the server, uses
    :meth:`Record.to_dict`, which gives the line's dict back). A damaged line is one damaged line: not JSON, not an
    object, invalid UTF-8, a NUL byte, over :data:`MAX_LINE`, an envelope (``seq``, ``kind``, ``ts``,
    ``component``) of the wrong type, or a ``seq`` that does not go up (a duplicate or a line out of
    order) is skipped; a field of the wrong type is dropped from its event. Each is noted in
    :data:`DAMAGE` with its line number; one bad ``seq`` costs one line, not the rest (:func:`_sound_events`).
    ``kinds``, where given, chooses the events wanted by their ``kind`` before any is parsed (parsing is
    most of a line's cost; the server wants only the lifecycle events of a long journal)."""
    try:
        f = open(path, "rb")
    except OSError:
        return
    with f:
        for e in _sound_events(f, DAMAGE.setdefault(str(path), {})):
            if e["seq"] > since_seq and (kinds is None or kinds(e.get("kind", ""))):
                yield parse(e)


def damage_notes() -> list[str]:
    """One note per journal with damaged lines not yet told of (each journal is told once)."""
    out = []
    for path, lines in DAMAGE.items():
        if not lines or path in _told:
            continue
        _told.add(path)
        shown = "; ".join(f"line {n}: {why}" for n, why in sorted(lines.items())[:DAMAGE_SHOWN])
        more = f"; and {len(lines) - DAMAGE_SHOWN} more" if len(lines) > DAMAGE_SHOWN else ""
        out.append(f"{path}: {len(lines)} damaged line(s) skipped or mended, the rest read ({shown}{more}). "
                   "rlsup leaves the file as it is; a copy without them: "
                   f"`rlsup events --json --run-dir {os.path.dirname(path) or '.'} > events.clean.jsonl`")
    return out


def keep_spare_records(monitors: Path, want: int) -> int:
    """Keep ``want`` spare monitor-record slots in ``monitors/`` (up to the monitors' own cap, for
    :meth:`shim.Record.prepare` on a full disk), written while the disk has room; how many there are."""
    want = min(want, shim.SPARE_SLOTS_MAX)
    try:
        have = sum(n.startswith(shim.SPARE_PREFIX) for n in os.listdir(monitors))
    except OSError:
        return 0
    if have < want and not has_room(monitors, (want - have + 4) * shim.RECORD_SIZE):
        return have  # a full disk: trying would only take blocks and give them back
    while have < want:
        tmp = monitors / f".new-spare.{os.getpid()}"
        try:
            _write_new(tmp, b" " * (shim.RECORD_SIZE - 1) + b"\n")
            os.rename(tmp, monitors / f"{shim.SPARE_PREFIX}{os.getpid()}.{time.monotonic_ns()}")
        except OSError:  # no room now: the next call tries again
            _unlink(tmp)
            break
        have += 1
    return have
