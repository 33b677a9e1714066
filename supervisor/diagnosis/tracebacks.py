"""Find Python tracebacks (chained ones grouped), faulthandler stacks and torchelastic blocks.

Works on prefix-stripped :class:`Line` objects, one stream (rank/process) at a time, so that the
tracebacks of several ranks printed at once are not spliced together.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import takewhile
from typing import Any

from ..monitor.process import signal_name
from .normalize import Line

TRACEBACK_START = re.compile(r"Traceback \(most recent call last\):\s*$")
STACK_START = re.compile(
    r"^(?:Stack|Current thread 0x[0-9a-f]+|Thread 0x[0-9a-f]+) \(most recent call first\):\s*$"
)
FRAME = re.compile(r'^(?P<indent>\s*)File "(?P<file>[^"]+)", line (?P<line>\d+)(?:,?\s*in\s*(?P<func>.*))?$')
# A Python traceback frame (a faulthandler stack writes "line N in f", without the comma).
TB_FRAME = re.compile(r'^\s*File "[^"]+", line \d+, in ')
# The first line of a paste that starts inside a frame line: 'torch/distributed/distributed_c10d.py",
# line 1870, in all_gather'.
CUT_FRAME = re.compile(r'^(?P<indent>)(?P<file>[\w.~/\\-]+\.pyx?)", line (?P<line>\d+), in (?P<func>.*)$')
CHAIN_CAUSE = re.compile(
    r"^\s*(?:The above exception was the direct cause of the following exception:"
    r"|During handling of the above exception, another exception occurred:)\s*$"
)
# "ValueError: msg", "torch.OutOfMemoryError: msg", "ray.exceptions.RayTaskError(OutOfMemoryError): ..",
# "NotImplementedError", "safetensors_rust.SafetensorError: .."
EXCEPTION_LINE = re.compile(
    r"^(?P<type>[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*(?:\([\w.]+\))?)(?::(?P<msg>.*))?$"
)

_EXC_NAME = re.compile(
    r"(?:Error|Exception|Exit|Interrupt|Iteration|Warning|Fault|Failure|Failed|Timeout|Dead|Abort)"
    r"(?:\([\w.]+\))?$"
)


_RAY_REMOTE = re.compile(r"RayTaskError|RayActorError")
# A line that names an exception without any frame above it (a paste cut before the traceback,
# Ray's remote errors, logged exceptions): "torch.distributed.DistStoreError: Timed out after 6
# seconds", "ray.exceptions.OutOfMemoryError: Task was killed ...". A bare "Error: ..." is a log
# message, not an exception type; warnings are not failures.
_BARE_EXC_TYPE = re.compile(r"^(?:[a-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Fault|Failure|Timeout)"
                            r"(?:\([\w.]+\))?$")


def bare_exception(text: str) -> tuple[str, str] | None:
    """(type, message) when the whole line is ``Type: message`` for an exception type."""
    if not text or text[0].isspace() or ": " not in text:
        return None
    typ, _, msg = text.partition(": ")
    if typ == "Error" or not _BARE_EXC_TYPE.match(typ):
        return None
    return typ, msg.strip()


# Frames from these places are library code, not the user's. A file in a bin/ folder is library
# code only when it has no extension: the console-script entry points pip writes (bin/torchrun,
# bin/accelerate); a project's own bin/train.py is the user's. Of the pseudo-files, "<stdin>" (a script
# piped into python, a heredoc) and a notebook's "<ipython-input-..>" are the user's code; "<frozen
# runpy>", "<string>" (dataclasses' generated methods) and the like are not.
_LIBRARY_PATH = re.compile(
    r"(?:site-packages/|dist-packages/|/lib/python\d+(?:\.\d+)?/|^<(?!stdin>|ipython-input-)|(?:^|/)torch/|"
    r"\.pyx$|^python/ray/|/ray/_private/|uvloop/|/bin/[^/.]+$)",
    re.IGNORECASE,
)


def is_user_frame(path: str) -> bool:
    # Windows paths ("C:\\Users\\x\\anaconda3\\Lib\\site-packages\\torch\\serialization.py") by the same rules.
    return not _LIBRARY_PATH.search(path.replace("\\", "/"))


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str | None

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"


def locate(frames: Sequence[Frame]) -> tuple[str | None, bool]:
    """(location, is library code) of ``frames`` (outermost first): the innermost user frame's, else the
    innermost frame's."""
    user = [f for f in frames if is_user_frame(f.file)]
    return ((user or frames)[-1].location, not user) if frames else (None, False)


@dataclass
class Exc:
    """One exception of a traceback: its frames (outermost first) and the ``Type: message`` line."""

    type: str
    message: str
    frames: list[Frame]
    start: int  # index of the "Traceback" line
    end: int  # index of the exception line
    stream: str
    exception_line: str = ""
    # the tail ended inside this traceback: frames, no exception line (kept only as the remote
    # part of a Ray task error, for its location)
    partial: bool = False
    # another traceback's header came before this one's exception line: two processes printed
    # theirs at once, and this one's rest follows the other one (see _rejoin)
    interrupted: bool = False
    # the next line when a terminal wrapped the exception line onto it (for classifying only)
    continuation: str = ""
    # the lines after the exception line that continue its message (for classifying only)
    message_more: str = ""
    # no traceback but frame pieces of several processes written into one pipe at once (see find_garbled)
    garbled: bool = False

    @property
    def text(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type

    def user_location(self) -> str | None:
        return next((f.location for f in reversed(self.frames) if is_user_frame(f.file)), None)

    @property
    def remote(self) -> bool:
        """A Ray task error: the exception of the remote task follows, with the remote frames."""
        return bool(_RAY_REMOTE.search(self.type)) or self.message.startswith("ray::")

    def funcs(self) -> set[str]:
        return {f.func or "" for f in self.frames}


@dataclass
class Chain:
    """Exceptions linked by "direct cause" / "during handling" in the order printed."""

    excs: list[Exc] = field(default_factory=list)

    @property
    def start(self) -> int:
        return self.excs[0].start

    @property
    def end(self) -> int:
        return self.excs[-1].end


@dataclass
class FatalStack:
    """A faulthandler dump: "Fatal Python error: X" followed by "most recent call first" frames."""

    kind: str  # "Segmentation fault", "Aborted", ...
    frames: list[Frame]  # most recent first
    index: int
    lines: list[str]


@dataclass
class ElasticFailure:
    """The "Root Cause (first observed failure)" entry of a torchelastic ChildFailedError block."""

    rank: int | None
    local_rank: int | None
    exitcode: int | None
    pid: int | None
    signal: str | None
    traceback: str | None
    index: int
    lines: list[str]


WRAP_MIN = 80  # a terminal wraps long lines; shorter ones end where the program ended them


def _carries_on(ln: Line) -> bool:
    """``ln`` may carry on the line above it: it is not blank, not indented, and starts no record, traceback,
    frame or chain of its own."""
    t = ln.text.rstrip()
    return not (not t.strip() or ln.prefixed or t[:1].isspace() or TRACEBACK_START.search(t) or TB_FRAME.match(t)
                or CHAIN_CAUSE.match(t))


def _continuation(lines: list[Line], k: int) -> str:
    """The line after lines[k] when a terminal wrapped lines[k] onto it: lines[k] is long and the
    next one starts no record of its own."""
    if k + 1 >= len(lines) or len(lines[k].text) < WRAP_MIN or not _carries_on(lines[k + 1]):
        return ""
    return lines[k + 1].text.rstrip()


_REPEATED = re.compile(r"^\s*\[Previous line repeated \d+ more times?\]\s*$")


def _message_more(lines: list[Line], k: int) -> str:
    """Up to six lines after an exception line that carry on its message: torch's multi-line
    RuntimeErrors ("port: 29500" / "name: EADDRINUSE"), a message a page or a logger wrapped at a
    word boundary. They stop at a blank line, a traceback, a frame, an indented line, another
    writer's record or another exception line."""
    more = takewhile(lambda x: _carries_on(x) and bare_exception(x.text.strip()) is None, lines[k + 1: k + 7])
    return " ".join(x.text.strip() for x in more)


def _parse_one(lines: list[Line], i: int, header: bool) -> tuple[Exc | None, int]:
    """Parse a traceback whose "Traceback ..." header is lines[i] (or, when ``header`` is False,
    whose first frame is lines[i]: a tail that begins mid-traceback). Returns (exception, next)."""
    # Python writes a traceback's lines without a log prefix (or all with the same logger's): a
    # prefixed record between its frames is another writer's line interleaved, not part of it.
    tb_prefixed = lines[i].prefixed
    frames: list[Frame] = []
    frame_indent = 0  # the first frame's
    after_frame = 0  # lines seen since the last frame line
    n = len(lines)
    for j in range(i + 1 if header else i, n):
        text = lines[j].text
        # a frame line (or, at the start of a tail that begins mid-traceback, a cut one)
        m = FRAME.match(text) or (CUT_FRAME.match(text) if j == i and not header else None)
        if m:
            frame_indent = frame_indent if frames else len(m.group("indent"))
            frames.append(Frame(m.group("file"), int(m.group("line")), m.group("func")))
            after_frame = 0
            continue
        if not text.strip():
            continue  # blank lines inside a traceback are rare; tolerate them
        if frames:
            # another writer's record between frames, a "[Previous line repeated 996 more times]" (a
            # RecursionError's frames): part of the traceback
            if (lines[j].prefixed and not tb_prefixed) or _REPEATED.match(text):
                continue
            # a frame's source line (in an unindented paste: the line after a frame)
            if len(text) - len(text.lstrip(" ")) > frame_indent or (frame_indent == 0 and after_frame == 0):
                after_frame += 1
                continue
            return _after_frames(lines, i, j, frames)
        # Text before any frame (e.g. "  <stack trace unavailable>")
        if j + 1 - i > 5:
            return None, j + 1
    return (_cut(lines, i, n - 1, frames) if frames else None), n


def _after_frames(lines: list[Line], i: int, j: int, frames: list[Frame]) -> tuple[Exc | None, int]:
    """(exception, next) of the traceback that lines[i] heads, whose frames end before lines[j]."""
    text = lines[j].text
    em = EXCEPTION_LINE.match(text.strip())
    typ = em.group("type") if em else ""
    # "ValueError", "ray.exceptions.RayTaskError(OSError)", "torch.OutOfMemoryError"; not "Message" (logging's), "File"
    if em and (_EXC_NAME.search(typ) or ("." in typ.split("(", 1)[0] and typ[:1].isalpha())):
        return Exc(em.group("type"), (em.group("msg") or "").strip(), frames, lines[i].index, lines[j].index,
                   lines[i].stream, text.strip(), continuation=_continuation(lines, j),
                   message_more=_message_more(lines, j)), j + 1
    if TRACEBACK_START.search(text):
        # another process's traceback began in the middle of this one: kept, to join its rest
        return _cut(lines, i, j - 1, frames, interrupted=True), j
    if j == len(lines) - 1:
        # the tail's last line, cut in the middle of a frame ('  F', 'File "/x/scheduler.py"'):
        # the traceback was cut off there
        return _cut(lines, i, j, frames), j
    return None, j  # something that isn't an exception line: give up on this traceback


def _cut(lines: list[Line], i: int, end: int, frames: list[Frame], interrupted: bool = False) -> Exc:
    """The traceback that lines[i] heads, cut off before its exception line at lines[end]."""
    return Exc("", "", frames, lines[i].index, lines[end].index, lines[i].stream, partial=True, interrupted=interrupted)


def find_chains(lines: list[Line], cut: list[Exc]) -> list[Chain]:
    """Every traceback in the tail, grouped into chains, parsed per stream. A traceback cut off before
    its exception line (by the end of the tail or a paste), which no chain holds, goes to ``cut``."""
    by_stream: dict[str, list[Line]] = {}
    for ln in lines:
        by_stream.setdefault(ln.stream, []).append(ln)
    return sorted((ch for sl in by_stream.values() for ch in _chains_in(sl, cut)), key=lambda c: c.end)


def _chains_in(lines: list[Line], cut: list[Exc]) -> list[Chain]:
    chains: list[Chain] = []  # the last one is the current one
    linked = False  # the previous exception said "the above ... following exception"
    first_part: Exc | None = None  # a traceback another one's header cut into, waiting for its rest

    def add(exc: Exc) -> bool:
        """Put ``exc`` on the chain it continues, or start a chain; whether the next one links to it
        (Ray prints the remote task's traceback right under RayTaskError(X): one chain)."""
        if linked and chains:
            chains[-1].excs.append(exc)
        else:
            chains.append(Chain([exc]))
        return exc.remote

    i = 0
    n = len(lines)
    while i < n:
        text = lines[i].text
        if CHAIN_CAUSE.match(text):
            linked = bool(chains)
            i += 1
            continue
        is_header = bool(TRACEBACK_START.search(text))
        if is_header or TB_FRAME.match(text) or (CUT_FRAME.match(text) and not chains):
            exc, nxt = _parse_one(lines, i, header=is_header)
            exc, first_part = _rejoin(exc, is_header, lines[i].index, first_part)
            if exc is not None and exc.partial and not (linked and chains and chains[-1].excs[-1].remote):
                # cut off before its exception line: it joins no chain, except as the remote part of a Ray task
                # error printed above it (where its frames say where the task failed)
                cut.append(exc)
                exc = None
            if exc is not None:
                linked = add(exc)
            else:
                linked = False
            i = max(nxt, i + 1)
            continue
        bare = bare_exception(text.strip()) if text[:1] not in (" ", "\t") else None
        if bare is not None:
            exc = Exc(bare[0], bare[1], [], lines[i].index, lines[i].index, lines[i].stream, text.strip(),
                      continuation=_continuation(lines, i), message_more=_message_more(lines, i))
            linked = add(exc)
            i += 1
            continue
        if text.strip():
            linked = False  # only "The above exception ..." (or Ray's remote part) links two tracebacks
        i += 1
    return chains


def _rejoin(exc: Exc | None, header: bool, start: int, first: Exc | None) -> tuple[Exc | None, Exc | None]:
    """Two processes printed the same traceback at once, unprefixed: the first one's header and frames,
    the second one whole, then the first one's remaining frames and exception line with no header. The
    remaining part is joined to its first part ``first`` (where the user's frames are); more than 80 lines
    below it, it stays a traceback of its own. Returns the traceback just parsed (starting at line ``start``) as it reads
    once rejoined (None for a first part, kept until its rest comes), and the first part still waiting."""
    if exc is None or exc.interrupted:
        return None, exc if exc is not None else first
    if header or first is None or start - first.end > 80:
        return exc, first if header else None
    exc.frames = first.frames + exc.frames
    exc.start = first.start
    return exc, None


# a frame's pieces out of place: several processes' frames written into one line at once, by chunk
# ('.../scheduler.py/sgl-workspace/...scheduler.py  File ", line  in , line   File run_event_loop"')
_FRAME_PIECE = re.compile(r'File "|", line|\.py", line|\.py"')


def find_garbled(lines: list[Line]) -> list[Exc]:
    """Per stream, frames garbled together at its end (the stream's last line holds frame pieces and
    at least two lines near it are frame pieces run together): a traceback nobody can read, but one
    that says the program failed, of a kind the log does not name."""
    by_stream: dict[str, list[Line]] = {}
    for ln in lines:
        if ln.text.strip():
            by_stream.setdefault(ln.stream, []).append(ln)
    out: list[Exc] = []
    for stream, sl in by_stream.items():
        # lines of the stream's last 20 holding two pieces or more that no frame line holds
        garbled = [ln for ln in sl[-20:] if not FRAME.match(ln.text) and len(_FRAME_PIECE.findall(ln.text)) >= 2]
        if len(garbled) >= 2 and _FRAME_PIECE.search(sl[-1].text) and not FRAME.match(sl[-1].text):
            out.append(Exc("", "", [], garbled[0].index, sl[-1].index, stream, partial=True, garbled=True))
    return out


_FATAL = re.compile(r"Fatal Python error: (?P<kind>[^\n]+?)\s*$")
_STACK_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


_CRASHED_THREAD = re.compile(r"^(?:Stack|Current thread 0x[0-9a-f]+) \(most recent call first\):\s*$")
# faulthandler.dump_traceback_later()'s dump when its timer ran out: "Timeout (0:00:03)!" and then every
# thread's stack ("Thread 0x... (most recent call first):"), none of them the current one: the program
# hung (with exit=True faulthandler then ends it).
_TIMEOUT_DUMP = re.compile(r"^Timeout \((?P<after>\d+:\d\d:\d\d(?:\.\d+)?)\)!\s*$")


def find_fatal_stacks(lines: list[Line]) -> list[FatalStack]:
    """faulthandler dumps: the kind ("Segmentation fault", "Aborted") and the frames of the thread
    that crashed ("Current thread ..." or "Stack ..."); other threads' stacks are not the crash site."""
    return _find_dumps(lines, _FATAL, lambda m: m["kind"],
                       lambda threads: next((f for head, f in threads if _CRASHED_THREAD.match(head)), []))


def find_timeout_dumps(lines: list[Line]) -> list[FatalStack]:
    """faulthandler's timeout dumps: the kind ("Timeout (0:00:03)") and the frames of the thread that
    waited. faulthandler lists the newest thread first; the main thread (its outermost frame
    ``<module>``), listed last, is where the program waited, else the last thread listed."""

    def waited(threads: list[tuple[str, list[Frame]]]) -> list[Frame]:
        main = [f for _head, f in threads if f and f[-1].func == "<module>"]
        return (main or [f for _head, f in threads] or [[]])[-1]

    return _find_dumps(lines, _TIMEOUT_DUMP, lambda m: f"Timeout ({m['after']})", waited)


def _find_dumps(lines: list[Line], head: re.Pattern[str], kind: Callable[[re.Match[str]], str],
                pick: Callable[[list[tuple[str, list[Frame]]]], list[Frame]]) -> list[FatalStack]:
    """A stack per dump whose first line ``head`` matches: the frames ``pick`` takes of its threads', and
    the lines shown for it (its first line and first frames)."""
    out: list[FatalStack] = []
    for i, ln in enumerate(lines):
        if m := head.search(ln.text.strip()):
            frames = pick(_thread_stacks(lines, i, head is _FATAL))
            shown = [ln.text.strip()] + [f'File "{f.file}", line {f.line} in {f.func}' for f in frames[:5]]
            out.append(FatalStack(kind(m), frames, ln.index, shown))
    return out


def _thread_stacks(lines: list[Line], i: int, crash: bool) -> list[tuple[str, list[Frame]]]:
    """Each thread's header and frames (most recent first) in the dump that lines[i] heads, up to the next dump or,
    after a thread's header, the first line of its stream that is no header, frame or blank; in a crash's dump,
    such a line (another writer's, interleaved) ends it only after the crashed thread's frames."""
    threads: list[tuple[str, list[Frame]]] = []
    # (200 lines: faulthandler lists every thread, and the crashed one may come last)
    for x in (x for x in lines[i + 1: i + 200] if x.stream == lines[i].stream):
        t = x.text.strip()
        if STACK_START.match(t):
            threads.append((t, []))
        elif (fm := _STACK_FRAME.match(x.text)) and threads:
            threads[-1][1].append(Frame(fm.group("file"), int(fm.group("line")), fm.group("func")))
        elif _FATAL.search(t) or _TIMEOUT_DUMP.match(t):
            break
        elif threads and t and t != "..." and (  # ("  ..." where faulthandler cut a deep stack)
                not crash or threads[-1][1] and _CRASHED_THREAD.match(threads[-1][0])):
            break
    return threads


_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):")
_FIELD = re.compile(r"^\s*(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:\s?(?P<val>.*)$")
_RANK = re.compile(r"(?P<rank>-?\d+)(?: \(local_rank: (?P<local>\d+)\))?")
_EXITCODE = re.compile(r"(?P<code>-?\d+)(?: \(pid: (?P<pid>\d+)\))?")
_SIGNAL_TB = re.compile(r"Signal (?P<num>\d+) \((?P<name>SIG\w+)\) received by PID (?P<pid>\d+)")


# torchelastic's agent log: "failed (exitcode: -9) local_rank: 5 (pid: 2630) of binary: ..."
_AGENT_FAILED = re.compile(
    r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid: (?P<pid>\d+)\)"
)


def find_elastic_failures(lines: list[Line]) -> list[ElasticFailure]:
    """The root-cause entry of each torchelastic "FAILED" block (the first failing rank), and the
    agent's one-line "failed (exitcode: N)" reports (a block may be cut off the tail)."""
    out: list[ElasticFailure] = []
    for i, ln in enumerate(lines):
        am = _AGENT_FAILED.search(ln.text)
        if am:
            exitcode = int(am.group("code"))
            out.append(ElasticFailure(None, int(am.group("local")), exitcode, int(am.group("pid")),
                                      signal_name(-exitcode) if exitcode < 0 else None, None, ln.index,
                                      [ln.text[am.start():].strip()]))
        elif _ROOT_CAUSE.search(ln.text):
            out.append(_root_cause_entry(lines, i))
    return out


def _root_cause_entry(lines: list[Line], i: int) -> ElasticFailure:
    """The entry under the "Root Cause (first observed failure):" line lines[i], up to the block's
    rule or the next rank's header."""
    ln = lines[i]
    f: dict[str, Any] = dict.fromkeys(("rank", "local_rank", "exitcode", "pid", "signal", "traceback"))
    shown = [ln.text.strip()]
    for x in lines[i + 1: i + 40]:
        t = x.text.strip()
        rank_header = t.startswith("[") and t.endswith("]:")
        if t.startswith("===") or (rank_header and f["rank"] is not None):
            break
        fm = _FIELD.match(x.text)
        if fm or rank_header:
            shown.append(t)
        key, val = (fm.group("key"), fm.group("val").strip()) if fm else ("", "")
        if key == "rank" and (m := _RANK.match(val)):
            f["rank"], f["local_rank"] = int(m["rank"]), int(m["local"]) if m["local"] else None
        elif key == "exitcode" and (m := _EXITCODE.match(val)):
            f["exitcode"], f["pid"] = int(m["code"]), int(m["pid"]) if m["pid"] else f["pid"]
        elif key == "traceback" and (m := _SIGNAL_TB.search(val)):
            f["signal"], f["pid"] = m["name"], int(m["pid"])
        elif key == "traceback" and "To enable traceback" not in val:
            f["traceback"] = val
    if f["signal"] is None and f["exitcode"] is not None and f["exitcode"] < 0:
        f["signal"] = signal_name(-f["exitcode"])
    return ElasticFailure(**f, index=ln.index, lines=shown)
