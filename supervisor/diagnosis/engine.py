"""diagnose(): name what killed a component from its exit status, log tail and host evidence.

Pure: a function of its arguments (no clock, no I/O), cheap enough to run once per exit on a
couple of thousand lines. Root cause beats symptom: every failure found in the tail becomes a
candidate with a tier (see :mod:`.signatures`); the lowest tier wins, and within a tier the
latest one, preferring a parsed traceback over a bare line of the same category.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from .model import Diagnosis, HostEvidence
from .normalize import Line, normalize
from .signatures import (
    BENIGN,
    COLLATERAL,
    PRIMARY,
    RECOVERED,
    SIGNAL,
    STEP_PATTERNS,
    SYMPTOM_FUNCS,
    WRAPPER,
    classify_exception,
    match_line,
)
from .tracebacks import (
    Chain,
    Exc,
    find_chains,
    find_elastic_failures,
    find_fatal_stacks,
    signal_name,
)

MAX_EVIDENCE = 12
_SUMMARY_MAX = 240
# A retried connection error this far from the end of the tail is history, not the cause.
_WEAK_RECENT_LINES = 50

_NATIVE = {"segfault", "fatal_python_error", "cuda_error", "nccl_error", "nccl_timeout", "watchdog_timeout"}
_KILL_SIGNALS = {"SIGKILL", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGPIPE", "SIGUSR1", "SIGUSR2"}
_CRASH_SIGNALS = {"SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE"}


@dataclass
class _Candidate:
    index: int
    category: str
    tier: int
    summary: str
    exception: str | None = None
    location: str | None = None
    evidence: list[str] = field(default_factory=list)
    weak: bool = False
    rich: bool = False  # a parsed traceback/stack, not a bare line
    streams: int = 1
    stream: str = ""


def normalize_signal(exit_code: int | None, signal: str | None) -> str | None:
    """The signal that ended the process, from an explicit name or a shell/Popen exit code."""
    if signal:
        s = signal.upper()
        return s if s.startswith("SIG") else f"SIG{s}"
    if exit_code is None:
        return None
    if exit_code < 0:
        return signal_name(-exit_code)
    if 128 < exit_code < 160:
        return signal_name(exit_code - 128)
    return None


def diagnose(
    lines: Sequence[str],
    *,
    exit_code: int | None = None,
    signal: str | None = None,
    step: int | None = None,
    pid: int | None = None,
    host: HostEvidence | None = None,
) -> Diagnosis:
    """Diagnose one exit.

    ``lines``: the component's last lines (ANSI-stripped, no newlines). ``exit_code`` and
    ``signal`` both None means only the log is known (offline). Exit code 0 is never a failure
    here (false success is a cross-attempt pattern). Never raises on odd input.
    """
    norm = normalize(list(lines))
    last_step = step if step is not None else find_step(norm)
    sig = normalize_signal(exit_code, signal)

    if exit_code == 0 and sig is None:
        return Diagnosis("none", "exited normally (exit code 0)", step=last_step)

    cands, elastic_pids = _candidates(norm)
    best = _choose(cands)

    # Host evidence: the kernel killed this process (or a rank torchrun reported dead) for memory.
    if host is not None and host.oom_killed_pids:
        pids = {p for p in (pid, *elastic_pids) if p is not None}
        hit = (not pids) or bool(pids & set(host.oom_killed_pids))
        if hit and sig in (None, "SIGKILL"):
            victims = sorted(host.oom_killed_pids & pids) if pids else sorted(host.oom_killed_pids)
            who = f"pid {victims[0]}" if victims else "a process of this component"
            return Diagnosis(
                "host_oom",
                f"killed by the kernel OOM killer ({who}): host memory exhausted",
                None,
                best.location if best else None,
                last_step,
                tuple(_dedup(list(host.kernel_lines))[:MAX_EVIDENCE]),
            )

    if sig is not None:
        if sig in _CRASH_SIGNALS:
            if best is None or best.category not in _NATIVE:
                loc = best.location if best and best.category == "segfault" else None
                ev = best.evidence if best and best.category == "segfault" else []
                return _finish(
                    _Candidate(-1, "segfault", PRIMARY, f"crashed with {sig}" + (f" in {_short(loc)}" if loc else ""),
                               None, loc, ev + [f"exit: {sig}" + (f" (exit code {exit_code})" if exit_code is not None else "")]),
                    last_step,
                )
        elif sig == "SIGABRT":
            if best is None or best.tier > SIGNAL:
                return _finish(_Candidate(-1, "fatal_python_error", SIGNAL, f"aborted ({sig})", None, None,
                                          (best.evidence if best else []) + [f"exit: {sig}"]), last_step)
        elif sig in _KILL_SIGNALS:
            if best is None or best.tier > COLLATERAL or best.weak:
                code = f" (exit code {exit_code})" if exit_code is not None else ""
                return _finish(_Candidate(-1, "killed", SIGNAL, f"killed by {sig}{code}; no kernel OOM evidence",
                                          None, None, [f"exit: {sig}{code}"]), last_step)
    if best is None:
        if exit_code is None and sig is None:
            return Diagnosis("none", "no failure found in the log", step=last_step)
        what = f"exited with code {exit_code}" if exit_code is not None else f"ended by {sig}"
        return Diagnosis("unknown", f"{what}; no known failure in the last {len(norm)} lines",
                         step=last_step, evidence=tuple(_tail_evidence(norm)))
    return _finish(best, last_step)


def _finish(c: _Candidate, step: int | None) -> Diagnosis:
    summary = c.summary
    if c.streams > 1:
        summary += f" (same error on {c.streams} ranks)"
    summary = _one_line(summary)
    return Diagnosis(c.category, summary, c.exception, c.location, step, tuple(_dedup(c.evidence)[:MAX_EVIDENCE]))


# ---------------------------------------------------------------------------------------------
# candidates


def _candidates(norm: list[Line]) -> tuple[list[_Candidate], list[int]]:
    cands: list[_Candidate] = []
    covered: set[int] = set()

    chains = find_chains(norm)
    for ch in chains:
        stream = ch.excs[0].stream
        for ln in norm[ch.start: ch.end + 1]:
            if ln.stream == stream:
                covered.add(ln.index)
        c = _chain_candidate(ch, norm)
        c.stream = stream
        cands.append(c)

    for fs in find_fatal_stacks(norm):
        cat = "segfault" if "Segmentation" in fs.kind or "Bus error" in fs.kind else "fatal_python_error"
        tier = PRIMARY if cat == "segfault" else SIGNAL
        loc = fs.user_location()
        summary = f"Fatal Python error: {fs.kind}" + (f" in {_short(loc)}" if loc else "")
        cands.append(_Candidate(fs.index, cat, tier, summary, None, loc, list(fs.lines), rich=True))
        covered.add(fs.index)

    elastic_pids: list[int] = []
    for ef in find_elastic_failures(norm):
        who = f"rank {ef.rank}" if ef.rank is not None else "a rank"
        if ef.local_rank is not None and ef.local_rank != ef.rank:
            who += f" (local_rank {ef.local_rank})"
        if ef.pid is not None:
            elastic_pids.append(ef.pid)
        if ef.signal:
            cat = {"SIGKILL": "killed", "SIGTERM": "killed", "SIGSEGV": "segfault", "SIGBUS": "segfault",
                   "SIGABRT": "fatal_python_error"}.get(ef.signal, "killed")
            summary = f"{who} died of {ef.signal} (exitcode {ef.exitcode}, pid {ef.pid}) - torchrun root cause"
            cands.append(_Candidate(ef.index, cat, SIGNAL, summary, None, None, ef.lines, rich=True))
        elif ef.traceback:
            cat, tier = classify_exception(ef.traceback)
            cands.append(_Candidate(ef.index, cat, max(tier, SIGNAL), f"{who} failed: {ef.traceback}",
                                    ef.traceback, None, ef.lines, rich=True))
        else:
            cands.append(_Candidate(ef.index, "unknown", WRAPPER,
                                    f"{who} exited with code {ef.exitcode} - torchrun root cause",
                                    None, None, ef.lines, rich=True))

    n = len(norm)
    recovered_after = _last_index(norm, RECOVERED)
    for ln in norm:
        if ln.index in covered:
            continue
        text = ln.text.strip()
        if not text or BENIGN.search(text):
            continue
        sig = match_line(text)
        if sig is None:
            continue
        if sig.weak and (ln.index < recovered_after or ln.index < n - _WEAK_RECENT_LINES):
            continue
        cands.append(_Candidate(ln.index, sig.category, sig.tier, text, None, None, [text], weak=sig.weak,
                                stream=ln.stream or _rank_tag(text)))
    return cands, elastic_pids


def _root_of(chain: Chain) -> tuple[Exc, str, int]:
    """The meaningful exception of a chain: the last, unless it only wraps an earlier one."""
    scored = []
    for e in chain.excs:
        cat, tier = classify_exception(e.text)
        if e.funcs() & SYMPTOM_FUNCS:
            tier = WRAPPER
        scored.append((e, cat, tier))
    last = scored[-1]
    if last[2] != WRAPPER and not _generic_over_user(scored):
        return last
    earlier = [s for s in scored[:-1] if s[2] != WRAPPER]
    if not earlier:
        return last
    with_user = [s for s in earlier if s[0].user_location()]
    return (with_user or earlier)[-1]


_GENERIC = re.compile(r"(?:^|\.)(?:RuntimeError|Exception|Error)$")


def _generic_over_user(scored: list[tuple[Exc, str, int]]) -> bool:
    """The last exception is a generic RuntimeError raised in library code on top of an earlier
    exception raised in user code: the earlier one is the meaningful one."""
    if len(scored) < 2:
        return False
    last, cat, _tier = scored[-1]
    if cat != "python_exception" or not _GENERIC.search(last.type) or last.user_location():
        return False
    return any(e.user_location() and t != WRAPPER for e, _c, t in scored[:-1])


def _chain_candidate(chain: Chain, norm: list[Line]) -> _Candidate:
    root, cat, tier = _root_of(chain)
    loc = root.user_location()
    if loc is None:
        # The outermost user frame of any exception in the chain still says where the user was.
        for e in reversed(chain.excs):
            loc = e.user_location()
            if loc:
                break
    evidence = [f'File "{f.file}", line {f.line}, in {f.func}' for f in root.frames[-3:]]
    evidence.append(root.exception_line or root.text)
    evidence.extend(_following(norm, root))
    exc_text = root.text
    summary = _shorten(exc_text) + (f" at {_short(loc)}" if loc else "")
    wrapped = chain.excs[-1]
    if wrapped is not root:
        evidence.append(wrapped.exception_line or wrapped.text)
    return _Candidate(root.end, cat, tier, summary, exc_text, loc, evidence, rich=True)


def _following(norm: list[Line], exc: Exc, limit: int = 2) -> list[str]:
    """Lines after an exception line that continue its message (NCCL "Last error:", CUDA hints)."""
    out: list[str] = []
    for ln in norm[exc.end + 1: exc.end + 8]:
        if ln.stream != exc.stream:
            continue
        t = ln.text.strip()
        if not t or t.startswith(("Traceback", "File ", "The above", "During handling")):
            break
        out.append(t)
        if len(out) >= limit:
            break
    return out


def _choose(cands: list[_Candidate]) -> _Candidate | None:
    if not cands:
        return None
    best_tier = min(c.tier for c in cands)
    top = [c for c in cands if c.tier == best_tier]
    chosen = max(top, key=lambda c: (c.index, c.rich))
    if not chosen.rich:
        richer = [c for c in top if c.rich and c.category == chosen.category]
        if richer:
            r = max(richer, key=lambda c: c.index)
            r.evidence = r.evidence + [chosen.evidence[0]] if chosen.evidence else r.evidence
            chosen = r
    # The same error on several ranks/processes is one error, counted: digits differ (timings, ids).
    key = _digitless(chosen.exception or chosen.summary)
    streams = {c.stream for c in cands if c.category == chosen.category
               and _digitless(c.exception or c.summary) == key}
    chosen.streams = max(chosen.streams, len(streams))
    # Corroborating lines of the winning category elsewhere in the tail (other ranks, hints).
    extra = [c.evidence[0] for c in cands if c is not chosen and not c.rich and c.category == chosen.category
             and c.evidence]
    if extra:
        chosen.evidence = chosen.evidence + extra[:3]
    return chosen


# ---------------------------------------------------------------------------------------------
# helpers


def find_step(norm: list[Line]) -> int | None:
    """The last training step the tail mentions ("Step 57/100", "step:3", "global_step=12")."""
    for ln in reversed(norm):
        t = ln.text
        if "tep" not in t or t.lstrip().startswith("File "):
            continue
        for pat in STEP_PATTERNS:
            ms = list(pat.finditer(t))
            if ms:
                try:
                    return int(ms[-1].group(1))
                except ValueError:
                    continue
    return None


_DIGITS = re.compile(r"\d+")
_RANK_TAG = re.compile(r"\[(?:PG [^\]]*)?Rank \d+\]")


def _digitless(text: str) -> str:
    return _DIGITS.sub("#", _RANK_TAG.sub("", text)).strip()


def _rank_tag(text: str) -> str:
    m = _RANK_TAG.search(text)
    return m.group(0) if m else ""


def _last_index(norm: list[Line], pat: re.Pattern[str]) -> int:
    for ln in reversed(norm):
        if pat.search(ln.text):
            return ln.index
    return -1


def _tail_evidence(norm: list[Line], n: int = 5) -> list[str]:
    out = [ln.text.strip() for ln in norm if ln.text.strip()]
    return out[-n:]


def _dedup(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for it in items:
        it = it.strip()
        if it and it not in seen:
            seen.add(it)
            out.append(it)
    return out


def _short(loc: str | None) -> str:
    if not loc:
        return ""
    path, _, line = loc.rpartition(":")
    return f"{os.path.basename(path)}:{line}" if path else loc


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SUMMARY_MAX else text[: _SUMMARY_MAX - 3] + "..."


def _one_line(text: str) -> str:
    return _shorten(text.replace("\n", " "))


