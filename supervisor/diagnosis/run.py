"""Run-level diagnosis: the root cause of a run, across its components, with the symptoms it caused.

One component's exit diagnosis says what killed that process. A run of an RL stack fails as a
cascade: the inference server dies of a CUDA error, and for hours afterwards the orchestrator
and the trainer log refused connections, time out, restart and die in turn. Each of those exits
is diagnosed right and none of them is the cause. :func:`diagnose_run` reads the journal
(``events.jsonl``) and every component's log (``logs/NAME.log`` and its rotations) and names the
first *primary* failure in time across components (one that is not itself the consequence of
another component's failure: not a refused connection, a collective or store timeout, a dead
engine seen from its API server or a dependency flag), then lists what followed as its symptoms.

Pure apart from reading the run directory; never raises on a torn journal, unknown event kinds or
unreadable logs (they are reported in ``notes``).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections import deque
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from ..records.diagnosis import Diagnosis
from ..records.events import (
    ComponentAdopted,
    ComponentCompleted,
    ComponentExited,
    ComponentFatal,
    ComponentReady,
    ComponentStarted,
    ComponentStopped,
    ComponentStopping,
    Event,
    FlagCleared,
    FlagRaised,
    Record,
    RestartScheduled,
    RunEnded,
    RunStarted,
)
from ..records.phrases import fmt_duration
from ..rundir.journal import DAMAGE, read_records
from ..rundir.logs import LogFile, log_chain
from .engine import diagnose
from .hints import NO_RECURRENCE, WRITE_FAILED
from .normalize import clean_line
from .signatures import benign_veto, match_span
from .stamps import LineClock

# Failures that are usually the consequence of another component's failure.
SYMPTOM_CATEGORIES = frozenset({
    "connection_refused", "distributed_timeout", "nccl_timeout", "nccl_error", "watchdog_timeout",
    "inference_engine_dead",
})
SYMPTOM_FLAGS = frozenset({"dependency_down", "stall", "repeated_error", "crash_loop"})
OWN_DEATH = frozenset({"inference_engine_dead"})
# The host's, not a component's: another component failing of the same kind at or after it met the same cause
HOST_CAUSES = frozenset({"disk_full"})
# What the stack's own code or behaviour did (a bug, an OOM, a crash, a hang, a false success): a
# root cause of this kind outranks a process death the run shrugged off (a kill, an engine that
# died and was back in seconds), whatever came first.
OWN_FAILURES = frozenset({
    "python_exception", "cuda_oom", "host_oom", "cuda_error", "segfault", "fatal_python_error", "disk_full",
    "port_in_use", "inference_memory_config", "ray_actor_died", "false_success", "stall",
})

TAIL_LINES = 2000  # what the exit diagnosis reads
LOG_SCAN_BYTES = 64 * 1024 * 1024  # per component, newest first: enough for days of symptoms


@dataclass
class RunFailure:
    """One component's failure: an exit the journal recorded, or what a log ends with."""

    component: str
    ts: float | None
    category: str
    summary: str
    source: str  # "exit" (journal), "log" (the log's tail, no exit recorded), "flag"
    attempt: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    diagnosis: dict[str, Any] = field(default_factory=dict)
    # when the component was running again afterwards (its next ``ready``/``completed``); None: never
    recovered_ts: float | None = None
    # a flag that is the component's own failure (a false success, a hang no dependency explains)
    own: bool = False

    @property
    def primary(self) -> bool:
        if self.source == "flag":
            return self.own
        # An engine that died, seen at the exit of the component that runs it, is that component's own
        # failure (an inference server's engine core), not the symptom of another's.
        return self.category not in SYMPTOM_CATEGORIES or (self.category in OWN_DEATH and self.source == "exit")

    def to_dict(self) -> dict[str, Any]:
        return {
            "component": self.component, "ts": self.ts, "time": _iso(self.ts), "category": self.category,
            "summary": self.summary, "source": self.source, "attempt": self.attempt,
            "exit_code": self.exit_code, "signal": self.signal, "diagnosis": self.diagnosis,
            "recovered": _iso(self.recovered_ts),
        }


@dataclass
class RunSymptom:
    """What one component showed after the root cause: its failures and matching log lines."""

    component: str
    category: str
    count: int  # failures (exits, flags) of this kind
    log_lines: int  # log lines of this kind
    first_ts: float | None
    last_ts: float | None
    summary: str
    samples: list[str] = field(default_factory=list)

    def extent(self) -> tuple[list[str], str]:
        """How much of it there was, in words: (["3 exits", "5,021 log lines"], " over 12h40m")."""
        what = []
        if self.count:
            noun = "flag" if self.category in SYMPTOM_FLAGS else "exit"
            what.append(f"{self.count} {noun}{'s' if self.count > 1 else ''}")
        if self.log_lines:
            what.append(f"{self.log_lines:,} log line{'s' if self.log_lines > 1 else ''}")
        span = ""
        if self.first_ts is not None and self.last_ts is not None and self.last_ts > self.first_ts:
            span = f" over {fmt_duration(self.last_ts - self.first_ts)}"
        return what, span

    def to_dict(self) -> dict[str, Any]:
        span = (self.last_ts - self.first_ts) if self.first_ts is not None and self.last_ts is not None else None
        return {
            "component": self.component, "category": self.category, "count": self.count,
            "log_lines": self.log_lines, "first_ts": self.first_ts, "last_ts": self.last_ts,
            "first": _iso(self.first_ts), "last": _iso(self.last_ts),
            "span_s": round(span, 3) if span is not None else None, "summary": self.summary,
            "samples": self.samples,
        }


@dataclass
class _LogScan:
    lines: int = 0
    truncated: bool = False
    mtime: float | None = None
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    # category -> [count, first_ts, last_ts, samples, {stamp kind: [first, last] on its running clock}]
    by_category: dict[str, list[Any]] = field(default_factory=dict)
    clock: LineClock = field(default_factory=LineClock)
    # the time of the last line that carried one (None: none did), and how many lines came after it
    last_ts: float | None = None
    last_partial: tuple[str, float] | None = None  # the last stamp, when partial (placed after the scan)
    since_stamp: int = 0


@dataclass
class RunDiagnosis:
    run_dir: str
    name: str | None
    started_ts: float | None
    ended_ts: float | None
    root_cause: RunFailure | None
    symptoms: list[RunSymptom]
    failures: list[RunFailure]
    components: dict[str, dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    # flags that waited on what a person stopped (a consumer of a stopped server, a stall it starved): no failures
    waits: list[RunFailure] = field(default_factory=list)

    @property
    def recurrences(self) -> int:
        """Later failures of the root cause's component with the same category (restarts that
        failed the same way)."""
        rc = self.root_cause
        if rc is None:
            return 0
        return sum(1 for f in self.failures if f is not rc and f.component == rc.component
                   and f.category == rc.category and (rc.ts is None or f.ts is None or f.ts >= rc.ts))

    @property
    def root_first(self) -> bool:
        """The root cause is also the first failure of its own in time (no earlier one it outranked)."""
        rc = self.root_cause
        return rc is not None and not any(
            f.primary and f is not rc and f.ts is not None and rc.ts is not None and f.ts < rc.ts
            for f in self.failures)

    @property
    def verdict(self) -> str:
        rc = self.root_cause
        if rc is None:
            waited = sorted({f.component for f in self.waits})
            return "no failure found in the journal or the logs" + (
                f"; {', '.join(waited)} waited on what was stopped or restarted on purpose" if waited else "")
        when = f" at {_iso(rc.ts)}" if rc.ts is not None else ""
        text = f"{rc.component} failed{' first' if self.root_first else ''}{when}: {rc.summary}"
        failed = sorted({s.component for s in self.symptoms if s.component != rc.component and s.count})
        logged = sorted({s.component for s in self.symptoms if s.component != rc.component} - set(failed))
        if failed:
            text += f"; then {', '.join(failed)} failed as a consequence"
        if logged:
            text += f"; {', '.join(logged)} logged errors as a consequence"
        independent = self.independent
        if independent:
            text += "; independently, " + "; ".join(
                f"{f.component}: {f.summary}" + (" (recovered)" if f.recovered_ts is not None else "")
                for f in independent[:3])
        return text

    @property
    def independent(self) -> list[RunFailure]:
        """Failures of other components that are failures of their own (an exception in their code, an
        engine death the run recovered from, before or after the root cause), not its consequences."""
        rc = self.root_cause
        if rc is None:
            return []
        out: dict[tuple[str, str], RunFailure] = {}  # the first of each component and kind
        for f in self.failures:
            if f is not rc and f.primary and not _same_host_cause(f, rc) and (
                    f.component != rc.component or _after_recovery(f, rc)):
                out.setdefault((f.component, f.category), f)
        return list(out.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir,
            "name": self.name,
            "started": _iso(self.started_ts),
            "ended": _iso(self.ended_ts),
            "verdict": self.verdict,
            "root_cause": self.root_cause.to_dict() if self.root_cause else None,
            "recurrences": self.recurrences,
            "symptoms": [s.to_dict() for s in self.symptoms],
            "failures": [f.to_dict() for f in self.failures],
            "components": self.components,
            "notes": self.notes,
            "waits": [f.to_dict() for f in self.waits],
        }


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------------------------
# reading


def scan_log(files: list[LogFile], window: tuple[float, float] | None) -> _LogScan:
    """Every line of the newest LOG_SCAN_BYTES of a component's logs (``log_chain``'s files, with their sizes):
    the failure lines of each category (count, first and last time a line carries), the tail the exit diagnosis
    would read. ``window``: from when to when the journal says the component ran (places lines stamped with a
    time of day only; see stamps.py)."""
    scan = _LogScan()
    for f in files:
        with contextlib.suppress(OSError):
            mtime = f.path.stat().st_mtime
            scan.mtime = mtime if scan.mtime is None else max(scan.mtime, mtime)
    # skip the oldest bytes beyond the budget
    skip = max(0, sum(f.size for f in files) - LOG_SCAN_BYTES)
    scan.truncated = skip > 0
    for f in files:
        if skip >= f.size:
            skip -= f.size
            continue
        try:
            fh = open(f.path, "rb")
        except OSError:
            continue
        with fh:
            if skip:
                fh.seek(skip)
                fh.readline()  # resume at a line boundary
                skip = 0
            for raw in fh:
                line = clean_line(raw.decode("utf-8", errors="replace"))
                scan.lines += 1
                scan.tail.append(line)
                _count(scan, line)
    _place_partial_stamps(scan, window)
    return scan


def _place_partial_stamps(scan: _LogScan, window: tuple[float, float] | None) -> None:
    """Lines stamped with a time of day or a month-day only, placed by the log's last write (or the
    journal's end, when that is earlier), and only where that agrees with the journal."""
    anchor = scan.mtime if window is None or scan.mtime is None else min(scan.mtime, window[1])
    resolve = scan.clock.resolver(anchor, window)
    for entry in scan.by_category.values():
        for kind, (lo, hi) in entry[4].items():
            for naive in (lo, hi):
                entry[1:3] = _stretch(entry[1], entry[2], resolve(kind, naive))
    if scan.last_partial is not None:
        scan.last_ts = resolve(*scan.last_partial)


def _count(scan: _LogScan, line: str) -> None:
    text = line.strip()
    ts, partial = scan.clock.read(text)
    if ts is not None or partial is not None:
        scan.last_ts, scan.last_partial, scan.since_stamp = ts, partial, 0
    else:
        scan.since_stamp += 1
    hit = match_span(text)
    if hit is None:
        return
    sig, at = hit
    if benign_veto(text, at):
        return
    entry = scan.by_category.setdefault(sig.category, [0, None, None, [], {}])
    entry[0] += 1
    if ts is not None:
        entry[1:3] = _stretch(entry[1], entry[2], ts)
    elif partial is not None:
        kind, naive = partial
        span = entry[4].setdefault(kind, [naive, naive])
        span[0], span[1] = min(span[0], naive), max(span[1], naive)
    if len(entry[3]) < 3:  # samples
        entry[3].append(text[:300])


# ---------------------------------------------------------------------------------------------
# the run


def diagnose_run(run_dir: Path) -> RunDiagnosis:
    """The root cause of the run in ``run_dir`` and the symptoms it caused."""
    run_dir = Path(run_dir)
    events, notes = _journal_events(run_dir)
    facts = _JournalFacts()
    for r in events:
        facts.read(r)
    scans = _scan_logs(run_dir, events, facts, notes)
    _place_recoveries(facts)
    failures = facts.failures
    failures.sort(key=lambda f: (f.ts is None, f.ts or 0.0))
    root = _root(failures, journal=bool(events))
    symptoms = _symptoms(root, failures, scans) if root else []
    return RunDiagnosis(str(run_dir), facts.name, facts.started, facts.ended, root, symptoms, failures,
                        dict(sorted(facts.comps.items())), notes, facts.waits)


def _journal_events(run_dir: Path) -> tuple[list[Record], list[str]]:
    """The journal's events in order, as typed records, through the one journal reader (a damaged line is
    skipped, noted with its line number), and the notes on what it lacked."""
    notes: list[str] = []
    path = run_dir / "events.jsonl"
    events = list(read_records(path))
    if bad := len(DAMAGE.get(str(path), {})):
        notes.append(f"{bad} journal line(s) were not events (damaged: torn, foreign or corrupt) and were skipped "
                     "or mended")
    if not events:
        notes.append("no journal events; the diagnosis rests on the logs alone")
    return events, notes


class Span(NamedTuple):
    """From ``start`` to ``end`` (None: still open): a flag raised .. cleared, a component down .. back."""

    start: float
    end: float | None = None
    names: frozenset[str] = frozenset()  # the dependencies a dependency_down flag named


Spans = dict[str, list[Span]]  # per component


@dataclass
class _JournalFacts:
    """What the journal says about the run and each component, read event by event."""

    name: str | None = None
    started: float | None = None
    ended: float | None = None
    seen: float | None = None  # the journal's last time: how long a stall still stood, what a log can cover
    lived: dict[str, float] = field(default_factory=dict)  # when each component first started
    comps: dict[str, dict[str, Any]] = field(default_factory=dict)
    failures: list[RunFailure] = field(default_factory=list)
    waits: list[RunFailure] = field(default_factory=list)  # flags that waited on what a person stopped
    # a stop came in this attempt: True where rlsup or the user asked for it, False where rlsup forced it on its
    # own verdict (a failed liveness probe, a readiness timeout: the attempt failed, its exit is a failure,
    # diagnosed from its log; a stall restart's failure is the stall flag)
    asked: dict[str, bool] = field(default_factory=dict)
    attempt: dict[str, int | None] = field(default_factory=dict)
    exited_last: dict[str, bool] = field(default_factory=dict)  # the journal's last word on it is an exit/stop
    back: dict[str, list[float]] = field(default_factory=dict)  # when each component was running again
    # dependency_down raised .. cleared: for a dependency that failed, and for one a person stopped (``waiting``:
    # the consumer waits on that person, no failure)
    dep_down: Spans = field(default_factory=dict)
    waiting: Spans = field(default_factory=dict)
    stall_cleared: dict[str, list[float]] = field(default_factory=dict)  # progress resumed after a stall
    # stopped or restarted on purpose (a person's `rlsup stop`/`restart`, a shutdown, the platform; a stop that
    # ends it for good) .. running again (ready) or failed: its peers wait, they do not hang
    let_down: Spans = field(default_factory=dict)
    # a signal's kill nobody asked for, counted a failure until rlsup says what followed it: a restart or a fatal
    # keeps it; a `stopped` withdraws it (a run's end under way, the platform's SIGTERM to every process at once:
    # the kills come before the stop). An exit rlsup forced (`stopping` by rlsup: a liveness or readiness
    # verdict) and a failure of its own (a crash, an engine's death) stay failures whatever followed.
    unjudged: dict[str, RunFailure] = field(default_factory=dict)

    def comp(self, c: str) -> dict[str, Any]:
        return self.comps.setdefault(c, {"attempts": 0, "exits": 0, "failures": 0, "state": None})

    def read(self, r: Record) -> None:
        # (a record without a time: the parser gives it the time 0, and no journal was written in 1970)
        e, c, ts = r.event, r.component, r.ts or None
        self.seen = ts if ts is not None and (self.seen is None or ts > self.seen) else self.seen
        if isinstance(e, RunStarted):
            self.name = e.name or self.name
            self.started = ts if self.started is None else self.started
            self.ended = None  # resumed: the run's end is this run's, not an earlier one's
            if e.how != "adopted":  # started afresh: what the earlier run's flags said is over
                for spans in (*self.dep_down.values(), *self.waiting.values()):
                    _close(spans, ts)
            for n in e.components:
                if isinstance(n, str):
                    self.comp(n)
        elif isinstance(e, RunEnded):
            self.ended = ts
        elif c is not None:
            self._component_event(c, ts, e, self.comp(c))

    def _component_event(self, c: str, ts: float | None, e: Event, info: dict[str, Any]) -> None:
        """What each event of a component says (other kinds only make the component known)."""
        match e:
            case ComponentStarted():
                self._started(c, ts, e, info)
            case ComponentReady() | ComponentCompleted() | ComponentAdopted():
                self._running_again(c, ts, e, info)
            case FlagCleared(type="dependency_down"):
                _close(self.dep_down.get(c), ts)
                _close(self.waiting.get(c), ts)
            case FlagCleared(type="stall") if ts is not None and e.by != "attempt_ended":
                self.stall_cleared.setdefault(c, []).append(ts)  # (the attempt's end is not progress resumed)
            case ComponentStopping():
                self._stopping(c, ts, e)
            case ComponentStopped() | ComponentFatal():
                self._ended(c, ts, e, info)
            case RestartScheduled():
                self.unjudged.pop(c, None)  # the exit was a failure: it is restarted
            case ComponentExited():
                self._exited(c, ts, e, info)
            case FlagRaised():
                self._flag(c, ts, e)

    def _stopping(self, c: str, ts: float | None, e: ComponentStopping) -> None:
        self.asked[c] = not (e.by == "rlsup" and "stall" not in str(e.reason or ""))
        # a person, the run's end, the platform (not a verdict); or the budget's stop of a consumer that waited on
        # what a person stopped: its own consumers wait on that person too
        if e.by in ("user", "shutdown", "preemption") or e.by == "dependency_down" and _is_open(self.waiting, c):
            _open(self.let_down, c, ts)

    def _started(self, c: str, ts: float | None, e: ComponentStarted, info: dict[str, Any]) -> None:
        info["attempts"] += 1
        info["state"] = "running"
        if ts is not None:
            self.lived.setdefault(c, ts)
        self.exited_last[c] = False
        self.attempt[c] = e.attempt or info["attempts"]  # (attempts count from 1: 0 is an old start without one)
        self.unjudged.pop(c, None)
        self.asked.pop(c, None)

    def _running_again(self, c: str, ts: float | None, e: Event, info: dict[str, Any]) -> None:
        _close(self.let_down.get(c), ts)
        if ts is not None:
            self.back.setdefault(c, []).append(ts)
        if isinstance(e, ComponentCompleted):
            info["state"] = "completed"
            self.exited_last[c] = True

    def _ended(self, c: str, ts: float | None, e: ComponentStopped | ComponentFatal, info: dict[str, Any]) -> None:
        info["state"] = e.kind
        self.exited_last[c] = True
        judged = self.unjudged.pop(c, None)
        if isinstance(e, ComponentStopped):
            if judged is not None:  # its exit was a stop, not a failure
                self.failures.remove(judged)
                info["failures"] -= 1
            _open(self.let_down, c, ts)

    def _exited(self, c: str, ts: float | None, e: ComponentExited, info: dict[str, Any]) -> None:
        info["exits"] += 1
        self.exited_last[c] = True
        diag = e.diagnosis.to_dict() if e.diagnosis else {}
        cat = str(diag.get("category") or "unknown")
        if self.asked.get(c) or cat == "none":
            return
        info["failures"] += 1
        _close(self.let_down.get(c), ts)  # (restarted by a person, it failed on its own)
        self.failures.append(RunFailure(
            c, ts, cat, str(diag.get("summary") or cat), "exit", self.attempt.get(c), e.exit_code, e.signal, diag))
        if cat == "killed" and c not in self.asked:
            self.unjudged[c] = self.failures[-1]

    def _flag(self, c: str, ts: float | None, e: FlagRaised) -> None:
        ftype = e.type or "flag"
        evidence = [str(x) for x in e.evidence]
        message = e.message or ftype
        # a consumer of a server a person stopped waits for that person to start it again, and so does the
        # server's own flag (its consumers stopped after the budget): no failure
        named = (_dependencies_named(message) or set()) if ftype == "dependency_down" else set()
        down = {d for d in self.let_down if _is_open(self.let_down, d)}
        waits = ftype == "dependency_down" and (c in down or bool(named) and named <= down)
        if ftype == "dependency_down" and ts is not None:
            (self.waiting if waits else self.dep_down).setdefault(c, []).append(Span(ts, names=frozenset(named)))
        if ftype == "stall":
            self.failures.append(_stall_failure(c, ts, message, evidence, self.attempt.get(c)))
        elif ftype == "false_success":
            self.failures.append(_false_success(c, ts, message, evidence, self.attempt.get(c)))
        elif ftype in SYMPTOM_FLAGS:
            (self.waits if waits else self.failures).append(
                RunFailure(c, ts, ftype, message, "flag", self.attempt.get(c), diagnosis={"evidence": evidence}))


def _open(spans: Spans, c: str, ts: float | None) -> None:
    """Opens a span of ``c`` at ``ts`` unless one is open (stopped again, never running between)."""
    if ts is not None and not _is_open(spans, c):
        spans.setdefault(c, []).append(Span(ts))


def _is_open(spans: Spans, c: str) -> bool:
    ss = spans.get(c) or []
    return bool(ss) and ss[-1].end is None


def _close(spans: list[Span] | None, ts: float | None) -> None:
    if spans and spans[-1].end is None and ts is not None:
        spans[-1] = spans[-1]._replace(end=ts)


def _false_success(c: str, ts: float | None, msg: str, evidence: list[str], att: int | None) -> RunFailure:
    """A false_success flag as the component's own failure: it exited 0 before its last step."""
    return RunFailure(c, ts, "false_success", f"a false success: {msg}", "flag", att,
                      diagnosis={"category": "false_success", "summary": f"a false success: {msg}",
                                 "evidence": evidence,
                                 "hint": "It exited 0 before its last step: read the lines "
                                         "before the exit for why it stopped early."},
                      own=True)


def _scan_logs(run_dir: Path, events: list[Record], facts: _JournalFacts, notes: list[str]) -> dict[str, _LogScan]:
    """Every component's log: the components the journal names and any log in logs/, with its files and
    how many lines of each failure kind it holds. A log that ends in a failure the journal has no exit for
    becomes a failure of its own."""
    logs_dir = run_dir / "logs"
    names = set(facts.comps) | _log_names(logs_dir)
    scans: dict[str, _LogScan] = {}
    for n in sorted(names):
        # NAME.log and its rotations, oldest first (NAME.log.3, NAME.log.2, NAME.log.1, NAME.log)
        files = log_chain(logs_dir / f"{n}.log")
        scan = scan_log(files, (facts.lived[n], facts.seen) if n in facts.lived and facts.seen is not None else None)
        scans[n] = scan
        info = facts.comp(n)
        info["log_files"] = [f.path.name for f in files]
        info["log_lines_scanned"] = scan.lines
        info["symptom_log_lines"] = {cat: v[0] for cat, v in sorted(scan.by_category.items())}
        if scan.truncated:
            notes.append(f"{n}: only the newest {LOG_SCAN_BYTES // (1024 * 1024)} MiB of its logs were scanned")
        failure = _log_tail_failure(run_dir, events, facts, n, scan)
        if failure is not None and failure.category in SYMPTOM_CATEGORIES and _is_open(facts.waiting, n):
            facts.waits.append(failure)  # (live: its refused connections wait on a server a person stopped)
        elif failure is not None:
            info["failures"] += 1
            facts.failures.append(failure)
    return scans


def _log_names(logs_dir: Path) -> set[str]:
    """The components logs/ holds a log of (NAME.log or a rotation of it)."""
    if not logs_dir.is_dir():
        return set()
    return {m.group("n") for p in logs_dir.iterdir() if (m := re.match(r"^(?P<n>.+?)\.log(?:\.\d+)?$", p.name))}


def _log_tail_failure(run_dir: Path, events: list[Record], facts: _JournalFacts, n: str,
                      scan: _LogScan) -> RunFailure | None:
    """A log that ends in a failure the journal has no exit for (a journal lost, a process that
    outlived its supervisor): the log's last write is when it happened. (Not for a component whose
    last journal word is an exit, a stop or its completion: its log ends where that exit was diagnosed.)"""
    if (facts.exited_last.get(n) or any(f.component == n and f.source == "exit" for f in facts.failures)
            or not scan.tail):
        return None
    d = diagnose(_last_attempt_tail(run_dir, events, n, list(scan.tail)))
    if d.category == "none":
        return None
    # when: the last stamped line among the tail the exit diagnosis read, else the log's last write
    when = (scan.last_ts if scan.since_stamp < TAIL_LINES else None) or scan.mtime
    return RunFailure(n, when, d.category, d.summary, "log", diagnosis=d.to_dict())


def _place_recoveries(facts: _JournalFacts) -> None:
    """When each failure's component was running again; then whether each stall was a hang of its own, and
    which were no failure at all (they waited on what a person stopped)."""
    for f in facts.failures:
        if f.ts is not None:
            f.recovered_ts = next((t for t in facts.back.get(f.component, []) if t > f.ts), None)
    # In the journal's order, each wait out of the failures as soon as it is judged one: a stall that only waited on
    # what a person stopped explains no later stall as a failure (the trainer starved by a stopped orchestrator,
    # then the orchestrator waiting for the trainer's weights after a resume with the trainer stopped)
    for f in [f for f in facts.failures if f.category == "stall" and f.source == "flag"]:
        if _judge_stall(f, facts):
            facts.failures.remove(f)
            facts.waits.append(f)


def _judge_stall(f: RunFailure, facts: _JournalFacts) -> bool:
    """A stall that cleared by itself (progress resumed, no restart) was a slow stretch, not a hang;
    one that never cleared, or ended in a restart, is a hang unless something explains it. True: only what a
    person stopped explains it (a peer stopped, a server stopped that its dependency_down flag waited on): the
    component waited, it did not fail."""
    flagged = f.diagnosis.get("flag_ts") if isinstance(f.diagnosis.get("flag_ts"), float | int) else f.ts
    cleared = next((t for t in facts.stall_cleared.get(f.component, []) if flagged is not None and t >= flagged),
                   None)
    # running again means a new attempt after the flag, not the start of the attempt that stalled
    restarted = next((t for t in facts.back.get(f.component, []) if flagged is not None and t > flagged), None)
    f.recovered_ts = min((x for x in (cleared, restarted) if x is not None), default=None)
    stood = f.recovered_ts if f.recovered_ts is not None else facts.ended or facts.seen
    by_failure = _explained_stall(f, facts.failures, _down_at(f, facts), {}, stood)
    by_person = _explained_stall(f, [], facts.waiting, facts.let_down, stood)
    f.own = not (cleared is not None and (restarted is None or cleared <= restarted)) and \
        not by_failure and not by_person
    return by_person and not by_failure


def _last_attempt_tail(run_dir: Path, events: list[Record], name: str, tail: list[str]) -> list[str]:
    """The latest attempt's own output (by the range its ``started`` event recorded), not its
    predecessors'; a journal without ranges (rlsup < 0.3): the log's tail."""
    from ..rundir.attemptlog import lines_of, ranges, read_bytes

    rs = ranges(events, name)
    if not rs or rs[-1].start is None:
        return tail
    data, _partial = read_bytes(run_dir / "logs" / f"{name}.log", rs[-1].start, None, max_bytes=8 << 20)
    return [clean_line(x) for x in lines_of(data)[-TAIL_LINES:]]


def _names_dependency(message: str, component: str) -> bool:
    """A dependency_down flag's message names the dependency that was down ("trainer cannot reach its
    dependency inference ...", "inference is down")."""
    named = _dependencies_named(message)
    if named is not None:
        return component in named
    return re.search(rf"(?<![\w-]){re.escape(component)}(?![\w-])", message) is not None


def _dependencies_named(message: str) -> set[str] | None:
    """The dependencies a dependency_down flag's message says were down ("trainer cannot reach its dependency
    inference (stopped), rm (backoff, down for 2m): ..." -> {inference, rm}); None: not a message of that form."""
    m = re.search(r"\bdependenc(?:y|ies) (.+?)(?::|$)", message)
    if not m:
        return None
    return {n for n in re.split(r",\s*", re.sub(r"\s*\([^)]*\)", "", m.group(1))) if n}


def _stall_failure(c: str, ts: float | None, message: str, evidence: list[str], att: int | None) -> RunFailure:
    """A stall flag as a failure, placed when the component stopped making progress (the flag comes
    ``stall_after`` seconds later) and described by the last line it printed."""
    m = re.search(r"no new step for (\d+(?:\.\d+)?)s", message)
    start = ts - float(m.group(1)) if ts is not None and m else ts
    last = next((x.split(":", 1)[1].strip() for x in evidence if x.startswith("last line:")), None)
    summary = f"hung: {message}" + (f"; its last line: {last}" if last else "")
    diag = {"category": "stall", "summary": summary, "evidence": evidence, "flag_ts": ts,
            "hint": "It stopped making progress without exiting: its last line says where it waits; "
                    "`progress.on_stall: restart` restarts a stalled component."}
    return RunFailure(c, start, "stall", summary, "flag", att, diagnosis=diag)


def _down_at(stall: RunFailure, facts: _JournalFacts) -> Spans:
    """The stalled component's dependency_down spans that can explain its stall: not one whose every named
    dependency had failed and was running again before the stall's last step, and did not fail again before the
    flag (the component stepped with its dependencies back; the flag only cleared later, as it does when a
    loaded supervisor reads the component's connection errors late)."""
    c, t = stall.component, stall.ts
    flagged = stall.diagnosis.get("flag_ts")
    until = float(flagged) if isinstance(flagged, float | int) else t
    if t is None or until is None:
        return facts.dep_down

    def back_before(d: str) -> bool:
        fails = [f.ts for f in facts.failures if f.component == d and f.ts is not None]
        last = max((x for x in fails if x <= t), default=None)
        return last is not None and any(last <= x <= t for x in facts.back.get(d, [])) and \
            not any(t < x <= until for x in fails)

    spans = [s for s in facts.dep_down.get(c, []) if not (s.names and all(map(back_before, s.names)))]
    return {**facts.dep_down, c: spans}


def _explained_stall(stall: RunFailure, failures: list[RunFailure], dep_down: Spans, let_down: Spans,
                     stood: float | None = None) -> bool:
    """A stall some other failure explains: a dependency reported down, or another component down (failed
    and not running again yet) at some moment between the stall's last step and the flag, or a component
    stopped or restarted on purpose and not running again at the flag (a person's `rlsup stop trainer` starves
    the orchestrator waiting for its weights). A producer
    usually dies a few seconds after its consumer's last step (the consumer had what it needed until
    then): its death explains the stall all the same. A stall that began after everything else had
    recovered, and during which nothing else failed, is a hang of its own; so is one that still stood (until
    ``stood``: cleared, restarted, or the journal's end) twice its own ``stall_after`` after the failure that
    would explain it had recovered: a component whose peer is back makes progress again."""
    t = stall.ts
    if t is None:
        return True
    flagged = stall.diagnosis.get("flag_ts")
    until = float(flagged) if isinstance(flagged, float | int) else t
    if any(s.start <= until and (s.end is None or s.end >= t) for s in dep_down.get(stall.component, [])):
        return True
    # a peer let down on purpose, still down when the stall was called (one back from a restart explains nothing)
    if any(s.start <= until and (s.end is None or s.end >= until)
           for c, ss in let_down.items() if c != stall.component for s in ss):
        return True
    waits_on = _waits_on(stall)
    # another component's own stall explains this one only where this one's last line says it waits on it
    # ("Waiting for trainer weights step 14"): two stalls side by side are otherwise two hangs
    grace = 2 * (until - t) if until > t else None  # stall_after, twice: the peer back, then a step's worth
    return any(f.ts <= until and (f.recovered_ts is None or f.recovered_ts >= t) for f in failures
               if f is not stall and f.component != stall.component and f.ts is not None
               and (f.source != "flag" or (f.category == "stall" and f.component in waits_on))
               and (f.recovered_ts is None or stood is None or grace is None or stood <= f.recovered_ts + grace))


def _waits_on(stall: RunFailure) -> set[str]:
    """The components a stalled component's last line says it waits for ("Waiting for trainer weights")."""
    last = next((str(x).split(":", 1)[1] for x in stall.diagnosis.get("evidence") or []
                 if str(x).startswith("last line:")), "")
    m = re.search(r"\bwait(?:s|ing)?\b(.*)", last, re.I)
    return set(re.findall(r"[\w-]+", m.group(1).lower())) if m else set()


def _root(failures: list[RunFailure], journal: bool) -> RunFailure | None:
    """The run's root cause: among the primary failures (those no other failure explains), one the
    run never recovered from, else one of the stack's own code or behaviour (a bug, an OOM, a hang, a
    false success), else a process death it recovered from; the first in time of that rank (a
    recurrence counts from its first occurrence). Without a primary failure, the first failure."""
    primary = [f for f in failures if f.primary]
    if primary:
        def rank(f: RunFailure) -> int:
            if journal and f.recovered_ts is None and f.source != "log":
                return 0
            return 1 if f.category in OWN_FAILURES else 2
        pick = min(primary, key=rank)  # (the first of the best rank)
        # the same failure of the same component earlier (then recovered): count from there
        return next((f for f in primary if f.component == pick.component and f.category == pick.category), pick)
    timed = [f for f in failures if f.source != "flag"]
    return timed[0] if timed else (failures[0] if failures else None)


def _symptoms(root: RunFailure, failures: list[RunFailure], scans: dict[str, _LogScan]) -> list[RunSymptom]:
    """Per component and kind, what followed the root cause: later failures and flags, other logs' symptom lines."""
    groups: dict[tuple[str, str], RunSymptom] = {}
    for f in failures:  # the later failures and flags it explains
        if _is_consequence(f, root):
            s = groups.setdefault((f.component, f.category), RunSymptom(f.component, f.category, 0, 0, f.ts, f.ts,
                                                                         f.summary))
            s.count += 1
            s.first_ts, s.last_ts = _stretch(s.first_ts, s.last_ts, f.ts)
    _log_symptoms(root, failures, scans, groups)
    return sorted(groups.values(), key=lambda s: (s.first_ts is None, s.first_ts or 0.0, s.component, s.category))


def _is_consequence(f: RunFailure, root: RunFailure) -> bool:
    """A failure or flag at or after the root cause that the root cause explains."""
    # a stall is dated back to its last step, which may come before the failure that starved it: it counts
    # from when it was called
    ts = f.diagnosis.get("flag_ts", f.ts) if f.category == "stall" and f.source == "flag" else f.ts
    if f is root or (root.ts is not None and isinstance(ts, float | int) and ts < root.ts):
        return False
    if f.component == root.component and f.category == root.category:
        return False  # the same failure again after a restart: counted as a recurrence
    if _same_host_cause(f, root):
        return True  # the same full disk, met by another component
    if f.primary and (f.component != root.component or _after_recovery(f, root)):
        return False  # a failure of its own (RunDiagnosis.independent), not a consequence
    # another dependency was down: a consequence of that one's failure
    return f.category != "dependency_down" or _names_dependency(f.summary, root.component)


def _same_host_cause(f: RunFailure, root: RunFailure) -> bool:
    """``f``, another component's failure at or after the root cause, is of the host's kind the root cause is
    (:data:`HOST_CAUSES`): the same cause met again, not a fault of its own. After a full disk, that includes a
    write that failed without saying why (:data:`~.hints.WRITE_FAILED`: torch's checkpoint writer)."""
    same = f.category == root.category or (root.category == "disk_full" and f.category == "python_exception"
                                           and WRITE_FAILED.search(f.summary) is not None)
    return (f.component != root.component and same and root.category in HOST_CAUSES
            and (root.ts is None or f.ts is None or f.ts >= root.ts))


def _after_recovery(f: RunFailure, root: RunFailure) -> bool:
    """``f`` is a later failure of the root's own component, of another kind, after it was running again and
    went past the step where the root cause struck (resumed, then healthy steps; where the root struck before any
    step, as in a server that counts none, running again is enough): a fault of its own, not what the root cause
    left behind (a crash at step 30, resumed, then the OOM killer at step 80)."""
    if f.component != root.component or f.category == root.category or root.recovered_ts is None:
        return False
    if f.ts is None or f.ts <= root.recovered_ts:
        return False
    then, now = root.diagnosis.get("step"), f.diagnosis.get("step")  # (step 0: no progress to go past)
    return not (isinstance(then, int) and then > 0 and isinstance(now, int) and now <= then)


def _log_symptoms(root: RunFailure, failures: list[RunFailure], scans: dict[str, _LogScan],
                  groups: dict[tuple[str, str], RunSymptom]) -> None:
    """The symptom lines of the other components' logs, counted per component and kind."""
    # what each other component failed of by itself: its own lines of that kind are not symptoms
    own = {(f.component, f.category) for f in failures if f.primary and f.component != root.component}
    for n, scan in scans.items():
        if n == root.component:
            continue
        for cat, (count, first, last, samples, _partial) in scan.by_category.items():
            if cat not in SYMPTOM_CATEGORIES or (n, cat) in own:
                continue
            # lines known to predate the root cause are a startup wait, not its consequence
            if root.ts is not None and last is not None and last < root.ts:
                continue
            # lines that carry no time follow a root cause that took its component down (an exit),
            # not one that left it up (a hang, a false success): those are some other outage's
            if last is None and root.source == "flag":
                continue
            s = groups.setdefault((n, cat), RunSymptom(n, cat, 0, 0, first, last, samples[0] if samples else cat))
            s.log_lines += count
            s.samples = list(samples)
            for ts in (first, last):
                s.first_ts, s.last_ts = _stretch(s.first_ts, s.last_ts, ts)


def _stretch(lo: float | None, hi: float | None, ts: float | None) -> tuple[float | None, float | None]:
    """The span lo..hi (None: empty) stretched to hold ``ts`` (None: a time not known)."""
    if ts is None:
        return lo, hi
    return (ts if lo is None else min(lo, ts)), (ts if hi is None else max(hi, ts))


# ---------------------------------------------------------------------------------------------
# human form


def format_run(rd: RunDiagnosis) -> str:
    out = [f"{rd.run_dir}: {rd.verdict}"]
    rc = rd.root_cause
    if rc is not None:
        out.extend(_root_cause_lines(rd, rc))
    if rd.symptoms:
        out.extend(_symptom_lines(rd, rc))
    if rd.notes:
        out.append("")
        out.extend(f"note: {n}" for n in rd.notes)
    return "\n".join(out)


def _root_cause_lines(rd: RunDiagnosis, rc: RunFailure) -> list[str]:
    out = ["", f"root cause  {rc.component} ({rc.category})" + (f", attempt {rc.attempt}" if rc.attempt else "")]
    if rc.ts is not None:
        out.append(f"  when:      {_iso(rc.ts)}" + (f" ({fmt_duration(rc.ts - rd.started_ts)} into the run)"
                                                     if rd.started_ts is not None and rc.ts >= rd.started_ts else ""))
    out.append(f"  summary:   {rc.summary}")
    if rd.recurrences:
        out.append(f"  recurred:  {rd.recurrences} more time{'s' if rd.recurrences > 1 else ''} after restarts")
    if rc.diagnosis:  # what its own diagnosis adds: the exception, where, what next, its evidence
        d = replace(Diagnosis.from_dict(rc.diagnosis), hint=root_hint(rd))
        out += exception_and_location(d, rc.summary) + ([f"  next:      {d.hint}"] if d.hint else [])
        out.extend(f"    | {ev[:300]}" for ev in d.evidence[:6])
    return out


def root_hint(rd: RunDiagnosis) -> str:
    """What to do about the root cause: its diagnosis' hint, said of a failure that did not recur after its
    restart without claiming that it will."""
    rc = rd.root_cause
    hint = str((rc.diagnosis or {}).get("hint") or "") if rc is not None else ""
    if rc is not None and not rd.recurrences and rc.recovered_ts is not None:
        return NO_RECURRENCE.get(hint, hint)
    return hint


def waited(rd: RunDiagnosis) -> set[str]:
    """The components whose every stall another failure or a person's stop explains (they waited; they did not
    hang)."""
    stalls = [f for f in rd.failures + rd.waits if f.category == "stall" and f.source == "flag"]
    return {f.component for f in stalls} - {f.component for f in stalls if f.own}


def exception_and_location(d: Diagnosis, summary: str) -> list[str]:
    """The lines that show a diagnosis' exception and location under ``summary`` (here and in
    ``rlsup diagnose FILE``'s human form)."""
    out = []
    # the exception once: not again under the summary that already quotes it whole
    if d.exception and " ".join(d.exception.split())[:200] not in summary:
        out.append(f"  exception: {d.exception[:300]}")
    if d.location:
        out.append(f"  location:  {d.location}" + ("  (library code)" if d.library_location else ""))
    return out


def _symptom_lines(rd: RunDiagnosis, rc: RunFailure | None) -> list[str]:
    out = ["", "symptoms it caused:"]
    for s in rd.symptoms:
        what, span = s.extent()
        after = ""
        if rc is not None and rc.ts is not None and s.first_ts is not None and s.first_ts >= rc.ts:
            after = f", from {fmt_duration(s.first_ts - rc.ts)} after the root cause"
        out.append(f"  {s.component}: {s.category}, {' and '.join(what) or 'seen'}{span}{after}")
        out.append(f"    | {s.summary[:300]}")
    return out


def is_run_dir(path: str | os.PathLike[str]) -> bool:
    """A directory holding a run's journal (what ``rlsup diagnose RUN_DIR`` reads)."""
    return (Path(path) / "events.jsonl").is_file()
