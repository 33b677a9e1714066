"""Where a hung component waits: py-spy's stacks of its processes, read and put in words.

Pure: the text py-spy printed goes in, the short form (a few lines for a flag's evidence) and the full
dump (a file under ``<run_dir>/stacks/``) come out. Taking the stacks is the run's business
(:mod:`rlsup.supervisor.run.stacks`). The short form is the innermost frames of each process's main
thread, grouped where ranks agree::

    7 ranks (0-2,4-7) in all_reduce at train.py:212
    rank 3 in load_batch at data.py:88

"in F at L": F is the innermost Python function (where it waits), L the innermost line of the user's
own code on the way there (``diagnosis.tracebacks.is_user_frame``): the call that led into the library.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import groupby

MAX_SHORT_LINES = 6  # lines of the short form (a flag's evidence stays readable); the rest: "N more"


@dataclass(frozen=True)
class Frame:
    name: str
    file: str
    line: int
    native: bool = False

    @property
    def short_file(self) -> str:
        base = self.file.rsplit("/", 1)[-1]
        if base == "__init__.py" and "/" in self.file:  # the package says more than its __init__
            return "/".join(self.file.rsplit("/", 2)[-2:])
        return base

    @property
    def text(self) -> str:
        return f"{self.name} ({self.file})" if self.native else f"{self.name} ({self.short_file}:{self.line})"


@dataclass(frozen=True)
class Thread:
    name: str
    tid: int
    active: bool
    frames: tuple[Frame, ...]  # innermost first, as py-spy gives them

    @property
    def main(self) -> bool:
        return self.name == "MainThread"


@dataclass(frozen=True)
class Proc:
    """One process of the component's tree and what py-spy made of it."""

    pid: int
    name: str  # its command's name (``python``, ``torchrun``)
    rank: int | None = None  # $RANK of a torch.distributed worker
    threads: tuple[Thread, ...] = ()
    error: str | None = None  # why there are no stacks (see :func:`classify`)
    problem: str = ""  # "" | "not_python" | "gone" | "denied" | "timeout" | "failed"

    @property
    def who(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid} ({self.name})"


@dataclass(frozen=True)
class Stacks:
    """A component's stacks at one moment: every process, and why some could not be read."""

    component: str
    attempt: int
    procs: tuple[Proc, ...] = ()
    error: str | None = None  # nothing could be taken at all (py-spy missing, no process)
    path: str | None = None  # the full dump on disk
    hints: tuple[str, ...] = field(default=())

    @property
    def read(self) -> tuple[Proc, ...]:
        return tuple(p for p in self.procs if p.threads)


def parse_dump(text: str) -> tuple[Thread, ...]:
    """``py-spy dump --json``'s output: the process's threads, main thread first. ValueError if it is
    not that."""
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("py-spy's JSON is not a list of threads")
    threads = [Thread(str(t.get("thread_name") or f"thread {t.get('thread_id')}"), int(t.get("os_thread_id") or 0),
                      bool(t.get("active")), tuple(_frame(f) for f in t.get("frames") or []))
               for t in data if isinstance(t, dict)]
    threads.sort(key=lambda t: not t.main)
    return tuple(threads)


def _frame(f: dict[str, object]) -> Frame:
    line = f.get("line")
    n = int(line) if isinstance(line, int) else 0
    return Frame(str(f.get("name") or "?"), str(f.get("filename") or "?"), n, native=bool(f.get("module")) or n == 0)


# (what py-spy says when it printed no stacks, the problem, in words), the first that matches
_PROBLEMS = (
    (re.compile(r"Permission Denied|Operation not permitted|os error 1\)|os error 13\)|ptrace", re.I),
     "denied", "no permission to read its memory (ptrace)"),
    (re.compile(r"Failed to find python version|Failed to find a python interpreter|Failed to get python version", re.I),
     "not_python", "not a Python process"),
    (re.compile(r"No such process|Failed to get process executable name|os error 3\)|No such file", re.I),
     "gone", "it ended meanwhile"),
)


def classify(stderr: str) -> tuple[str, str]:
    """(problem, words) for a py-spy that printed no stacks: ``denied`` (no ptrace permission),
    ``not_python``, ``gone`` (the process ended meanwhile) or ``failed``."""
    known = next(((problem, words) for rx, problem, words in _PROBLEMS if rx.search(stderr)), None)
    first = next((ln.strip() for ln in stderr.splitlines() if ln.strip()), "no output")
    return known or ("failed", f"py-spy: {first[:200]}")


def ptrace_hint(scope: str | None, root: bool) -> str:
    """What to do when py-spy may not read a process: where ptrace is refused, and the fix for each."""
    fixes = ["in a container: `docker run --cap-add SYS_PTRACE` (Kubernetes: securityContext.capabilities.add: "
             "[SYS_PTRACE])"]
    if scope not in (None, "0"):
        fixes.append(f"on this host kernel.yama.ptrace_scope is {scope}: `sudo sysctl kernel.yama.ptrace_scope=0`"
                     + ("" if root else ", or run rlsup as root"))
    return "py-spy needs ptrace: " + "; ".join(fixes)


# ---------------------------------------------------------------------- the short form


def where(t: Thread) -> str | None:
    """"in F at FILE:LINE" for one thread (None: no Python frame)."""
    py = [f for f in t.frames if not f.native]
    if not py:
        return None
    inner = py[0]
    from .tracebacks import is_user_frame  # here: the short form is wanted only once a stack was dumped

    user = next((f for f in py if is_user_frame(f.file)), None)
    at = user or inner
    return f"in {inner.name} at {at.short_file}:{at.line}"


def _places(p: Proc) -> list[tuple[str, str]]:
    """(thread label, where) for the main thread, and for other threads in the user's own code (a worker
    thread that hangs while the main thread only joins it)."""
    from .tracebacks import is_user_frame

    out: list[tuple[str, str]] = []
    for t in p.threads:
        w = where(t)
        if w is None:
            continue
        if t.main or (not out and t is p.threads[0]):
            out.append(("", w))
        elif any(is_user_frame(f.file) for f in t.frames if not f.native):
            out.append((f"thread {t.name} ", w))
    return out


def _ranges(nums: Sequence[int]) -> str:
    out: list[str] = []
    # consecutive numbers share their distance from their position in the sorted list
    for _, run in groupby(enumerate(sorted(set(nums))), lambda p: p[1] - p[0]):
        first, *rest = (n for _, n in run)
        out.append(f"{first}-{rest[-1]}" if rest else str(first))
    return ",".join(out)


def _group_who(procs: Sequence[Proc]) -> str:
    if len(procs) == 1:
        return procs[0].who
    ranks = [p.rank for p in procs if p.rank is not None]
    if len(ranks) == len(procs):
        return f"{len(procs)} ranks ({_ranges(ranks)})"
    return f"{len(procs)} processes ({', '.join(str(p.pid) for p in procs[:4])}{', ...' if len(procs) > 4 else ''})"


def short_form(s: Stacks) -> list[str]:
    """The few lines a flag's evidence, ``rlsup why`` and the report show: where each process waits,
    grouped where they agree; then why some could not be read, and where the full dump is."""
    if s.error:
        return [f"stacks: {s.error}"]
    groups: dict[str, list[Proc]] = {}
    for p in sorted(s.read, key=lambda p: (p.rank is None, p.rank if p.rank is not None else p.pid)):
        for label, w in _places(p):
            groups.setdefault(f"{label}{w}", []).append(p)
    lines = [f"stack: {_group_who(ps)} {key}" for key, ps in groups.items()]
    if len(lines) > MAX_SHORT_LINES:
        lines = lines[:MAX_SHORT_LINES - 1] + [f"stack: ... {len(lines) - MAX_SHORT_LINES + 1} more in the full dump"]
    lines += _unread_lines(s)
    if s.path:
        lines.append(f"stacks: {s.path}")
    return lines


def _unread_lines(s: Stacks) -> list[str]:
    """Processes whose stacks could not be read, by reason (non-Python processes are left out unless
    there is nothing else), and what to do about it."""
    out: list[str] = []
    by: dict[str, list[Proc]] = {}
    for p in s.procs:
        if p.problem:
            by.setdefault(p.problem, []).append(p)
    for problem, ps in by.items():
        if problem == "not_python" and s.read:
            continue
        names = ", ".join(p.who for p in ps[:4]) + (", ..." if len(ps) > 4 else "")
        out.append(f"stacks: not read for {names}: {ps[0].error}")
    out += [f"stacks: {h}" for h in s.hints]
    return out


# ---------------------------------------------------------------------- the full dump


def full_dump(s: Stacks, header: Iterable[str] = ()) -> str:
    """Every thread of every process, innermost frame first (as ``py-spy dump`` prints them)."""
    out = [*header, ""]
    if s.error:
        out.append(f"no stacks: {s.error}")
    for p in s.procs:
        out.append(f"== {p.who}" + (f": pid {p.pid} ({p.name})" if p.rank is not None else ""))
        if p.error:
            out.append(f"   not read: {p.error}")
        for t in p.threads:
            out.append(f"Thread {t.tid} ({'active' if t.active else 'idle'}): \"{t.name}\"")
            out += [f"    {f.text}" for f in t.frames]
        out.append("")
    out += [f"note: {h}" for h in s.hints]
    return "\n".join(out).rstrip() + "\n"
