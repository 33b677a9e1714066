"""diagnose(): name what killed a component from its exit status, log tail and host evidence.

Pure: a function of its arguments (no clock, no I/O), cheap enough to run once per exit on a
couple of thousand lines. Root cause beats symptom: every failure found in the tail becomes a
candidate with a tier (see :mod:`.signatures`); the lowest tier wins, and within a tier the
latest one, preferring a parsed traceback over a bare line of the same category.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from itertools import takewhile

from ..monitor.process import signal_name
from ..records.diagnosis import Diagnosis, HostEvidence, short_location
from .hints import hint_for
from .normalize import Line, normalize
from .ray_deaths import describe as describe_ray_death
from .signatures import (
    COLLATERAL,
    HANDLED_FUNCS,
    HYDRA_FAILED,
    LAUNCHER_EXIT,
    NAMED_TRAINING_BAR_DESC,
    ORDERLY_SHUTDOWN,
    POINTS_ABOVE,
    PRIMARY,
    RAY_TASK_HEADER,
    RECOVERED,
    RETRY_NOTICE,
    SIGNAL,
    SLURM_DAEMON,
    STEP_PATTERNS,
    SYMPTOM_FUNCS,
    TQDM_BAR,
    TRAINING_BAR_DESC,
    UNEXPECTED_EXIT,
    WRAPPER,
    WRAPPER_TYPES,
    Signature,
    benign_veto,
    classify_exception,
    match_span,
)
from .tracebacks import (
    FRAME,
    TRACEBACK_START,
    WRAP_MIN,
    Chain,
    ElasticFailure,
    Exc,
    Frame,
    bare_exception,
    find_chains,
    find_elastic_failures,
    find_fatal_stacks,
    find_garbled,
    find_timeout_dumps,
    is_user_frame,
    locate,
)

MAX_EVIDENCE = 12

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
    library: bool = False  # location is the innermost frame, in library code
    hint: str = ""  # what to do next, where the category's hint does not fit this failure
    vague: bool = False  # names no failure of its own (torchrun: "exitcode 1", no traceback)
    job_report: bool = False  # a shell's report of a job it ran ("line 30: 7946 Killed  ray start ...")
    teardown: bool = False  # a process group's watchdog taking the process down: the cause is another line


def normalize_signal(exit_code: int | None, signal: str | None) -> str | None:
    """The signal that ended the process, from an explicit name or a shell/Popen exit code."""
    if signal:
        s = signal.upper()
        return s if s.startswith("SIG") else f"SIG{s}"
    if exit_code is not None and (exit_code < 0 or 128 < exit_code < 160):
        return signal_name(-exit_code if exit_code < 0 else exit_code - 128)
    return None


def diagnose(
    lines: Sequence[str],
    *,
    exit_code: int | None = None,
    signal: str | None = None,
    step: int | None = None,
    pid: int | None = None,
    host: HostEvidence | None = None,
    stopped_by: str | None = None,
    log_error: str | None = None,
) -> Diagnosis:
    """Diagnose one exit.

    ``lines``: the component's last lines (ANSI-stripped, no newlines). ``exit_code`` and
    ``signal`` both None means only the log is known (offline). Exit code 0 is never a failure
    here (false success is a cross-attempt pattern). ``stopped_by``: rlsup's reason when rlsup itself
    ended the attempt (readiness timeout, failed liveness, stall restart): its signal and exit code are then
    rlsup's doing, and the cause is what the log names. ``log_error``: why the component's log could not be written when it
    exited (its monitor's word, ``ENOSPC: No space left on device``), so that an exit its output cannot
    explain is not called unknown when that output was lost. Never raises on odd input.
    """
    norm = normalize(list(lines))
    last_step = step if step is not None else find_step(norm)
    if stopped_by is not None:
        return _stopped_by_rlsup(norm, stopped_by, last_step)
    sig = normalize_signal(exit_code, signal)

    if exit_code == 0 and sig is None:
        return _clean_exit(norm, last_step)

    cands, elastic_pids = _candidates(norm)
    best = _choose(cands)

    if host is not None and host.oom_killed_pids:
        oom = _host_oom(host, (pid, *elastic_pids), sig, best, last_step)
        if oom is not None:
            return oom
    if sig is not None:
        by_signal = _signal_verdict(sig, exit_code, best)
        if by_signal is not None:
            if by_signal.category == "killed":  # what it was doing when killed ("Allocating 61.5 GiB ..."): its
                # last line that is not a mere step or progress line
                last = [x for x in reversed(norm[-20:]) if x.text.strip() and not _PROGRESS_ONLY.match(x.text)][:1]
                by_signal.evidence[:0] = [f"last line: {x.text}" for x in last]
            return _finish(by_signal, last_step)
    if best is not None and best.category == "ray_actor_died":
        _describe_ray(best, norm)
    if best is None:
        return _nothing_found(norm, exit_code, sig, last_step, log_error)
    return _finish(best, last_step)


_PROGRESS_ONLY = re.compile(r"^\W*(?:step\b|\d+%\|)", re.I)


def _stopped_by_rlsup(norm: list[Line], reason: str, last_step: int | None) -> Diagnosis:
    """An attempt rlsup ended: the failure its log names, even one that only wraps another (an inference
    engine whose API server outlived its engine core: "EngineCore encountered an issue" is all there is), with
    rlsup's reason; else rlsup's reason alone. Never the exit signal's own reading: a SIGTERM or SIGKILL rlsup
    sent is no sign of the kernel's OOM killer."""
    best = _choose(_candidates(norm)[0])
    if best is not None and not best.vague:
        found = _finish(best, last_step)
        return replace(found, summary=_shorten(f"{found.summary}; rlsup ended it: {reason}"))
    return Diagnosis("killed", _shorten(f"ended by rlsup: {reason}"), step=last_step,
                     evidence=tuple(_tail_evidence(norm)),
                     hint="rlsup stopped it for the reason above; the lines before the stop say why it got there.")


def _clean_exit(norm: list[Line], last_step: int | None) -> Diagnosis:
    """Exit 0. One exit 0 is not a success: an inference server whose engine died. vLLM 0.32.0's API server logs
    "EngineCore encountered an issue" / EngineDeadError and then shuts uvicorn down cleanly, exit 0
    (vllm/entrypoints/launcher.py terminate_if_errored). Looked for near the end only, so a client that
    once logged such a line from a server's reply and later finished is not taken for a dead engine."""
    tail = [replace(ln, index=k) for k, ln in enumerate(norm[-200:])]  # (a line's index is its position)
    dead = [c for c in _candidates(tail)[0] if c.category == "inference_engine_dead"]
    if dead:
        return _finish(max(dead, key=lambda c: c.index), last_step)
    return Diagnosis("none", "exited normally (exit code 0)", step=last_step)


def _host_oom(host: HostEvidence, pids_seen: tuple[int | None, ...], sig: str | None, best: _Candidate | None,
              last_step: int | None) -> Diagnosis | None:
    """Host evidence: the kernel killed this process (or a rank torchrun reported dead) for memory."""
    pids = {p for p in pids_seen if p is not None}
    if sig not in (None, "SIGKILL") or (pids and not pids & host.oom_killed_pids):
        return None
    # (never empty: the kernel killed one of pids, or, with no pid known, some process)
    victim = min(pids & host.oom_killed_pids or host.oom_killed_pids)
    return Diagnosis(
        "host_oom",
        f"killed by the kernel OOM killer (pid {victim}): host memory exhausted",
        None,
        best.location if best else None,
        last_step,
        tuple(_dedup(list(host.kernel_lines))[:MAX_EVIDENCE]),
        library_location=bool(best and best.location and best.library),
        hint=hint_for("host_oom"),
    )


def _signal_verdict(sig: str, exit_code: int | None, best: _Candidate | None) -> _Candidate | None:
    """The signal that ended the process, as the failure, where the log names nothing that outranks it: a crash
    (SIGSEGV and the like) unless the log names a native failure that explains it, an abort unless a failure of
    a lower tier, a kill from outside unless a failure of its own (not a collateral or weak one) or Slurm's
    word on who sent it and why (a requeue, a preemption, the time limit, scancel)."""
    code = f" (exit code {exit_code})" if exit_code is not None else ""
    if sig in _CRASH_SIGNALS:
        if best is not None and best.category in _NATIVE:
            return None
        seg = best if best is not None and best.category == "segfault" else None
        loc = seg.location if seg else None
        return _Candidate(-1, "segfault", PRIMARY, f"crashed with {sig}{_at(loc, ' in ')}", None, loc,
                          (seg.evidence if seg else []) + [f"exit: {sig}{code}"], library=bool(seg and seg.library))
    if sig == "SIGABRT":
        if best is not None and best.tier <= SIGNAL:
            return None
        return _Candidate(-1, "fatal_python_error", SIGNAL, f"aborted ({sig})", None, None,
                          (best.evidence if best else []) + [f"exit: {sig}"])
    if sig not in _KILL_SIGNALS or (best is not None and (
            (best.tier <= COLLATERAL and not best.weak) or (best.evidence and _SLURM_WHY.search(best.evidence[0])))):
        return None
    return _Candidate(-1, "killed", SIGNAL, f"killed by {sig}{code}; no kernel OOM evidence",
                      None, None, [f"exit: {sig}{code}"])


def _nothing_found(norm: list[Line], exit_code: int | None, sig: str | None, last_step: int | None,
                   log_error: str | None = None) -> Diagnosis:
    """No failure in the log: none where only the log is known, else an unknown exit; while the log could
    not be written, what would have said why was lost: on a full disk (or quota) that is the likely cause."""
    if exit_code is None and sig is None:
        return Diagnosis("none", "no failure found in the log", step=last_step)
    what = f"exited with code {exit_code}" if exit_code is not None else f"ended by {sig}"
    if log_error:
        lost = f"its log could not be written ({log_error}), so the output that would say why was lost"
        evidence = (f"log: {log_error}", *_tail_evidence(norm))
        full = log_error.startswith(("ENOSPC", "EDQUOT"))
        cat, summary = ("disk_full", f"{what} on a full disk: {lost}") if full else ("unknown", f"{what}; {lost}")
        return Diagnosis(cat, summary, step=last_step, evidence=evidence, hint=hint_for(cat))
    return Diagnosis("unknown", f"{what}; no known failure in the last {len(norm)} lines",
                     step=last_step, evidence=tuple(_tail_evidence(norm)), hint=hint_for("unknown"))


def _finish(c: _Candidate, step: int | None) -> Diagnosis:
    summary = _shorten(c.summary + (f" (same error on {c.streams} ranks)" if c.streams > 1 else ""))
    evidence = tuple(_dedup(c.evidence)[:MAX_EVIDENCE])
    hint = c.hint or hint_for(c.category, " ".join((c.exception or "", summary, *evidence)))
    return Diagnosis(c.category, summary, c.exception, c.location, step, evidence,
                     library_location=bool(c.location) and c.library, hint=hint)


# ---------------------------------------------------------------------------------------------
# candidates


@dataclass
class _Tail:
    """What the candidate finders share about one tail."""

    norm: list[Line]
    # a retried connection error before the dependency was back, or before training made progress
    # again, is history
    recovered_after: int
    covered: set[int] = field(default_factory=set)  # lines a parsed traceback or stack accounts for
    # tracebacks cut off before their exception line (no chain holds them)
    cut: list[Exc] = field(default_factory=list)

    def is_history(self, index: int) -> bool:
        """A retried error at this line is history: before the last recovery, or 50 lines or more from the end."""
        return index < self.recovered_after or index < len(self.norm) - 50


def _candidates(norm: list[Line]) -> tuple[list[_Candidate], list[int]]:
    """Every failure the tail names, found by each finder in turn (parsed tracebacks first: the
    lines they cover are not read again as bare lines), and the pids torchrun reported for its ranks."""
    tail = _Tail(norm, max(_last_index(norm, RECOVERED), _last_index(norm, STEP_PATTERNS[0])))
    elastic = find_elastic_failures(norm)  # torchrun's reports (their pids: host OOM evidence)
    cands = [*_chain_candidates(tail), *_cut_traceback_candidates(tail), *_fatal_stack_candidates(tail),
             *map(_elastic_candidate, elastic), *_line_candidates(tail)]
    _locate_by_cut_traceback(cands, norm, tail.covered)
    cands.extend(_fatal_message_candidate(tail))
    if elastic:
        # torchelastic's block parsed whole names the rank: its bare "traceback : Signal 11" line is part of it
        cands = [c for c in cands if c.rich or not (c.evidence and _ELASTIC_SIGNAL_LINE.match(c.evidence[0]))]
    return _drop_orderly_shutdown(cands, norm), [ef.pid for ef in elastic if ef.pid is not None]


def _chain_candidates(tail: _Tail) -> list[_Candidate]:
    """A candidate per parsed traceback chain that was not logged and carried on from."""
    norm = tail.norm
    out: list[_Candidate] = []
    prev: tuple[Chain, _Candidate] | None = None
    for ch in find_chains(norm, tail.cut):
        tail.covered.update(ln.index for ln in norm[ch.start: ch.end + 1] if ln.stream == ch.excs[0].stream)
        if any(e.funcs() & HANDLED_FUNCS for e in ch.excs) or _logged_and_carried_on(ch, norm):
            continue  # logged and carried on from
        c = _chain_candidate(ch, norm)
        # right after a record that says a process died and its error is printed above (SGLang's "Rank 0
        # scheduler is dead. Please check if there are relevant logs." before its EOFError): a pointer
        if any(POINTS_ABOVE.search(ln.text) for ln in norm[max(0, ch.start - 3):ch.start]):
            c.tier = WRAPPER
        if c.library and prev is not None:
            _locate_at_driver(c, ch, *prev)
        prev = (ch, c)
        if _refusal_is_history(c, ch, tail):
            continue
        out.append(c)
    return out


def _logged_and_carried_on(ch: Chain, norm: list[Line]) -> bool:
    """A traceback a logger printed under its record (``logger.exception("eval failed; skipping")``,
    ``exc_info=True``: the record's line, then the traceback's own lines unprefixed) and after which
    training went on to a later step: the program handled it. A rank's crash does not count: its
    peers wait for it at the next collective and complete no later step."""
    first, last = ch.start, ch.end
    if first == 0 or norm[first].prefixed:
        return False
    record = norm[first - 1]
    if not (record.prefixed and record.stream == norm[first].stream and record.text.strip()):
        return False
    return _stepped_past(norm, first, last)


def _locate_at_driver(c: _Candidate, ch: Chain, pch: Chain, pc: _Candidate) -> None:
    """A Ray task's remote part printed as a traceback of its own under the driver's RayTaskError,
    with only Ray's frames (cloudpickle failing on the return value): the driver's own line that
    waited for it is where it failed, for the user."""
    if (pch.excs[-1].remote and pc.location and not pc.library and 0 <= ch.start - pch.end <= 8
            and not any(e.frames and e.user_location() for e in ch.excs)):
        c.location, c.library = pc.location, False
        c.summary = _shorten(c.exception or c.summary) + _at(c.location)


def _cut_traceback_candidates(tail: _Tail) -> list[_Candidate]:
    """A candidate per traceback cut off before its exception line (a paste, the end of the tail, frames
    of several processes garbled together): a failure of a kind the log does not name, at the
    innermost user frame, the weakest there is. One the program handled, or after which training
    made progress, is history."""
    norm = tail.norm
    out: list[_Candidate] = []
    for cut in tail.cut + find_garbled(norm):
        if cut.funcs() & HANDLED_FUNCS or _stepped_past(norm, cut.start, cut.end):
            continue
        loc = cut.user_location()
        what = "frames of a traceback garbled together" if cut.garbled else "a traceback cut off before its exception line"
        evidence = ([ln.text.strip()[:200] for ln in norm[cut.start: cut.end + 1]][:3] if cut.garbled
                    else [f'File "{f.file}", line {f.line}, in {f.func}' for f in cut.frames[-3:]])
        out.append(_Candidate(cut.end, "unknown", WRAPPER, what + _at(loc), None, loc,
                              evidence, rich=True, stream=cut.stream))
    return out


def _stepped_past(norm: list[Line], first: int, last: int) -> bool:
    """Training went on to a later step after norm[first..last] (positions in ``norm``)."""
    after = find_step(norm[last + 1:])
    before = find_step(norm[:first])
    return after is not None and (before is None or after > before)


def _refusal_is_history(c: _Candidate, ch: Chain, tail: _Tail) -> bool:
    """A refused connection logged as a bare exception line is how a client reports a retry, like
    the plain lines: it is marked weak, and counts only near the end and after the last recovery."""
    if c.category != "connection_refused" or any(e.frames for e in ch.excs):
        return False
    c.weak = True
    return tail.is_history(c.index)


def _fatal_stack_candidates(tail: _Tail) -> list[_Candidate]:
    """A candidate per faulthandler dump: a fatal error's ("Fatal Python error: Segmentation fault" and its
    frames), and a timeout's ("Timeout (0:00:03)!" and the threads' stacks: the program hung where its main
    thread waited; one that training progress follows, a periodic ``dump_traceback_later(repeat=True)`` for
    debugging, is history)."""
    out: list[_Candidate] = []
    for fs in find_fatal_stacks(tail.norm):
        tail.covered.add(fs.index)
        seg = "Segmentation" in fs.kind or "Bus error" in fs.kind
        loc, library = locate(fs.frames[::-1])
        out.append(_Candidate(fs.index, "segfault" if seg else "fatal_python_error", PRIMARY if seg else SIGNAL,
                              f"Fatal Python error: {fs.kind}{_at(loc, ' in ')}", None, loc, list(fs.lines),
                              rich=True, library=library))
    for fs in find_timeout_dumps(tail.norm):
        tail.covered.add(fs.index)
        if fs.index >= tail.recovered_after:
            loc, library = locate(fs.frames[::-1])
            out.append(_Candidate(fs.index, "watchdog_timeout", COLLATERAL,
                                  f"hung: faulthandler's {fs.kind} dump{_at(loc, ', waiting in ')}", None, loc,
                                  list(fs.lines), rich=True, library=library))
    return out


# what a death by each signal is, as a launcher or torchelastic reports it (any other: killed)
_SIGNAL_CATEGORY = {"SIGSEGV": "segfault", "SIGBUS": "segfault", "SIGABRT": "fatal_python_error"}


def _elastic_candidate(ef: ElasticFailure) -> _Candidate:
    """The candidate of a torchelastic root-cause entry or agent report."""
    who = f"rank {ef.rank}" if ef.rank is not None else "a rank"
    if ef.local_rank is not None and ef.local_rank != ef.rank:
        who += f" (local_rank {ef.local_rank})"
    if ef.signal:
        cat = _SIGNAL_CATEGORY.get(ef.signal, "killed")
        summary = f"{who} died of {ef.signal} (exitcode {ef.exitcode}, pid {ef.pid}) - torchrun root cause"
        return _Candidate(ef.index, cat, SIGNAL, summary, None, None, ef.lines, rich=True)
    if ef.traceback:
        cat, tier = classify_exception(ef.traceback)
        return _Candidate(ef.index, cat, max(tier, SIGNAL), f"{who} failed: {ef.traceback}",
                          ef.traceback, None, ef.lines, rich=True)
    return _Candidate(ef.index, "unknown", WRAPPER,
                      f"{who} exited with code {ef.exitcode} - torchrun root cause",
                      None, None, ef.lines, rich=True, vague=True,
                      stream=f"rank{ef.rank}" if ef.rank is not None else "")


def _line_candidates(tail: _Tail) -> list[_Candidate]:
    """A candidate per line no traceback or stack covers that names a failure: a Ray task's header,
    a launcher's report, a known failure line (joined with its continuation where a terminal wrapped it)."""
    return [c for k, ln in enumerate(tail.norm) if ln.index not in tail.covered and (text := ln.text.strip())
            and (c := _ray_task_candidate(tail.norm, k, ln, text) or _line_candidate(tail, k, ln, text))]


def _line_candidate(tail: _Tail, k: int, ln: Line, text: str) -> _Candidate | None:
    """A launcher's report or a known failure on this line, or on it joined with the next one it wrapped onto."""
    for joined, t in enumerate((text, _wrapped(tail.norm, k, text))):
        if t is None:
            return None
        launcher = _launcher_candidate(ln, t)
        if launcher is not None:
            return launcher
        hit = match_span(t)
        if hit is not None:
            # (joined: unless the next line names a failure by itself, its own record, not the rest of this one:
            # a long "Step 26/60 | ... load_ms 1.59" line followed by "ERROR Engine core proc ... died")
            return None if joined and match_span(tail.norm[k + 1].text.strip()) else _signature_candidate(
                tail, k, ln, t, hit)
    return None


def _signature_candidate(tail: _Tail, k: int, ln: Line, text: str, hit: tuple[Signature, int]) -> _Candidate | None:
    """The failure a signature matched on this line, unless a benign context vetoes it or, for a weak
    one (a retried error), it is history."""
    sig, at = hit
    if benign_veto(text, at):
        return None
    if sig.weak and (tail.is_history(ln.index) or RETRY_NOTICE.search(text)):
        return None
    if sig.category == "ray_actor_died" and _ray_retried(tail.norm, k):
        return None
    if sig.category == "connection_refused" and SLURM_DAEMON.match(text):
        return None  # Slurm's daemons talking among themselves (srun gone after a requeue or a cancel)
    loc, library = _engine_dead_location(tail, k, text) if sig.name == "engine_dead" else (None, False)
    return _Candidate(ln.index, sig.category, sig.tier, _signature_summary(sig.name, text, loc, library), None, loc,
                      [text], weak=sig.weak, stream=ln.stream or next((m[0] for m in _RANK_TAG.finditer(text)), ""), library=library,
                      job_report=sig.name == "shell_killed" and bool(_JOB_REPORT.match(text)),
                      teardown=sig.name == "collective_teardown")


# Ray's note that it retries the task a worker died in ("Task RewardWorker.score failed. There are 1
# retries remaining, so the task will be retried. Error: The actor is temporarily unavailable ...")
RAY_TASK_RETRIED = re.compile(r"\b[1-9]\d* retries remaining, so the task will be retried")


def _ray_retried(norm: list[Line], k: int) -> bool:
    """A Ray worker that died (norm[k]) in a task Ray then retried, after which the driver went on
    printing: Ray handled the death; a retry that failed too raises at the driver, or dies again with
    no retries left."""
    notice = next((j for j in range(k + 1, min(k + 4, len(norm)))  # (Ray's note comes within 3 lines)
                   if RAY_TASK_RETRIED.search(norm[j].text)), len(norm))
    return any(not ln.prefixed and ln.stream == "" and ln.text.strip() for ln in norm[notice + 1:])


def _engine_dead_location(tail: _Tail, k: int, text: str) -> tuple[str | None, bool]:
    """"Scheduler hit an exception: Traceback (most recent call last):" (or the header on the next
    line: "EngineCore failed to start.") with the traceback cut off or its frames unindented, so
    no traceback was parsed: its frames still say where the engine was. (location, is library code)"""
    norm = tail.norm
    if not (TRACEBACK_START.search(text) or (
            k + 1 < len(norm) and TRACEBACK_START.search(norm[k + 1].text) and norm[k + 1].index not in tail.covered)):
        return None, False
    return locate(_frames_after(norm, k))


def _signature_summary(name: str, text: str, loc: str | None, library: bool) -> str:
    """The summary of a failure named by a line: the line itself, except where it is not the failure's words."""
    if name == "engine_dead" and TRACEBACK_START.search(text):
        head = TRACEBACK_START.sub("", text).rstrip(" :")
        return f"{head} (its traceback is cut off before the exception){_at(loc, library=library)}"
    if name == "collective_teardown":
        return f"NCCL's watchdog took the process down (a collective failed or timed out; the log does not say which): {text}"
    if name == "cuda_boilerplate":
        # CUDA's note says how errors are reported, not which one: never the summary
        return "a CUDA error whose message is not in the log (only the note CUDA prints under its errors)"
    return text


def _fatal_message_candidate(tail: _Tail) -> list[_Candidate]:
    """The program's last word is an error message and nothing else: sys.exit("error: ...") prints only
    that, argparse's "prog: error: the following arguments are required"; any failure the log names
    outranks it."""
    last = next((ln for ln in reversed(tail.norm) if ln.text.strip()), None)
    if (last is None or last.index in tail.covered or not _FATAL_MESSAGE.match(last.text.strip())
            or SLURM_DAEMON.match(last.text.strip())):
        return []  # (Slurm's daemons' "slurmstepd: error: ..." is no word of the program's)
    return [_Candidate(last.index, "unknown", WRAPPER, last.text.strip(), None, None, [last.text.strip()],
                       vague=True, stream=last.stream)]


def _locate_by_cut_traceback(cands: list[_Candidate], norm: list[Line], covered: set[int]) -> None:
    """A failure named by a bare line (NCCL's "NCCL WARN init.cc:1815 -> 5" in a Ray actor's output) and,
    after it, a traceback cut off before its exception (the driver's, waiting in ``ray.get``): the
    traceback's innermost user frame is where the user's code met the failure."""
    cut = [ln.index for ln in norm if ln.index not in covered and TRACEBACK_START.match(ln.text.strip())]
    for c in cands:
        after = next((k for k in cut if k > c.index), None)
        if c.rich or c.location is not None or after is None:
            continue
        user = [f for f in _frames_after(norm, after) if is_user_frame(f.file)]
        if user:
            c.location = user[-1].location


def _drop_orderly_shutdown(cands: list[_Candidate], norm: list[Line]) -> list[_Candidate]:
    """vLLM's engine "death" after its API server was asked to stop is the shutdown's noise."""
    asked = next((ln.index for ln in norm if ORDERLY_SHUTDOWN.search(ln.text)), None)
    if asked is None or any(UNEXPECTED_EXIT.search(ln.text) for ln in norm if ln.index > asked):
        return cands
    return [c for c in cands if not (c.category == "inference_engine_dead" and c.index > asked)]


def _wrapped(norm: list[Line], k: int, text: str) -> str | None:
    """The line joined with the next one when a terminal wrapped it there ("... (4.26 GiB KV cach"
    + "e is needed, which is larger than ..."): a long line, followed by one of the same stream
    (or none) that starts no record of its own."""
    if len(text) < WRAP_MIN or k + 1 >= len(norm):
        return None
    nxt = norm[k + 1]
    cont = nxt.text.rstrip()
    if (not cont or nxt.prefixed or nxt.stream not in ("", norm[k].stream)
            or cont.lstrip().startswith(("File \"", "Traceback"))):
        return None
    return (norm[k].text + cont).strip()


def _launcher_candidate(ln: Line, text: str) -> _Candidate | None:
    """A launcher's one-line report of a child's exit (DeepSpeed's "... exits with return code = -9"),
    or Hydra's "Error executing job" whose traceback was cut off: what ended the run as far as the
    log says, below any error the child printed itself."""
    m = LAUNCHER_EXIT.search(text)
    if m:
        code = int(m.group("code"))
        if code == 0:
            return None
        shown = text if len(text) <= 200 else "... " + text[-160:]
        if code < 0:
            sig = signal_name(-code)
            cat = _SIGNAL_CATEGORY.get(sig, "killed")
            return _Candidate(ln.index, cat, SIGNAL, f"a launched process died of {sig} (return code {code})",
                              None, None, [shown], rich=True)
        return _Candidate(ln.index, "unknown", WRAPPER, f"a launched process exited with return code {code}",
                          None, None, [shown], rich=True)
    if HYDRA_FAILED.search(text):
        return _Candidate(ln.index, "unknown", WRAPPER, "the Hydra job raised; its traceback is not in the log",
                          None, None, [text[:200]], rich=True)
    return None


def _root_of(chain: Chain) -> tuple[Exc, str, int]:
    """The meaningful exception of a chain. A failure of a known kind (a refused connection, an
    OOM, a full disk) is the earliest exception of that kind: what follows re-raises or wraps it.
    Otherwise the last exception, unless it only wraps an earlier one."""
    scored = []
    for e in chain.excs:
        if e.partial:
            continue
        cat, tier = classify_exception(e.text + e.continuation)
        if cat == "python_exception" and e.message_more:
            # a message printed over several lines ("...the maximum number of" / "tokens that can be
            # stored in KV cache"; torch's "port: 29500 / name: EADDRINUSE"): read as one
            more_cat, more_tier = classify_exception(e.text + " " + e.message_more)
            if more_cat != "python_exception" and more_tier != WRAPPER and tier != WRAPPER:
                cat, tier = more_cat, more_tier
        if e.funcs() & SYMPTOM_FUNCS:
            tier = WRAPPER
        scored.append((e, cat, tier))
    specific = [s for s in scored if s[2] != WRAPPER and s[1] != "python_exception"]
    if specific:
        return min(specific, key=lambda s: s[2])  # (the first of the best tier)
    last = scored[-1]
    if last[2] != WRAPPER and not _generic_over_user(scored):
        # the same exception raised again across a process boundary (multiprocessing's pool re-raises the
        # worker's exception under its RemoteTraceback: "raise self._value"): where it was first raised says
        # where it failed
        same = [x for x in scored[:-1] if x[0].type == last[0].type and x[0].text == last[0].text
                and x[0].user_location()]
        return same[0] if same else last
    earlier = [s for s in scored[:-1] if s[2] != WRAPPER]
    return ([s for s in earlier if s[0].user_location()] or earlier or [last])[-1]


_GENERIC = re.compile(r"(?:^|\.)(?:RuntimeError|Exception|Error)$")


def _generic_over_user(scored: list[tuple[Exc, str, int]]) -> bool:
    """The last exception is a generic RuntimeError raised in library code on top of an earlier
    exception raised in user code: the earlier one is the meaningful one."""
    last, cat, _tier = scored[-1]
    return (cat == "python_exception" and bool(_GENERIC.search(last.type)) and not last.user_location()
            and any(e.user_location() and t != WRAPPER for e, _c, t in scored[:-1]))


def _chain_location(chain: Chain, root: Exc) -> tuple[str | None, bool]:
    """(location, is library code): the root's innermost user frame, else another exception's of
    the chain, else the innermost frame. Frames on the driver side of a Ray task error are where
    the driver waited (``ray.get``), not where the task failed: when the remote traceback printed
    under it shows frames (even cut off before its exception line), only those count."""
    excs = chain.excs
    remote_at = max((k for k, e in enumerate(excs) if e.remote), default=-1)
    remote_part = excs[remote_at + 1:] if remote_at >= 0 else []
    if any(e.user_location() for e in remote_part) or (
            any(e.frames for e in remote_part) and not any(e.user_location() for e in excs)):
        # (a remote part whose frames are all Ray's own, cloudpickle failing to pickle a task's return
        # value, says less than the driver's own line that waited for it)
        scope, first = remote_part, (root if root in remote_part else None)
    else:
        scope, first = excs, root
    order = ([first] if first is not None else []) + [e for e in reversed(scope) if e is not first]
    user = next((loc for e in order if (loc := e.user_location())), None)
    inner = None if user else next((e.frames[-1].location for e in order if e.frames), None)
    return (user, False) if user else (inner, inner is not None)


def _chain_candidate(chain: Chain, norm: list[Line]) -> _Candidate:
    root, cat, tier = _root_of(chain)
    loc, library = _chain_location(chain, root)
    evidence = [f'File "{f.file}", line {f.line}, in {f.func}' for f in root.frames[-3:]]
    evidence.append(root.exception_line or root.text)
    evidence.extend(_following(norm, root))
    wrapped = chain.excs[-1]
    if wrapped is not root:
        evidence.append(wrapped.exception_line or wrapped.text)
    return _Candidate(root.end, cat, tier, _shorten(root.text) + _at(loc, library=library), root.text, loc, evidence,
                      rich=True, library=library, stream=chain.excs[0].stream)


def _following(norm: list[Line], exc: Exc) -> list[str]:
    """Up to two lines after an exception line that continue its message (NCCL "Last error:", CUDA hints)."""
    same = (ln.text.strip() for ln in norm[exc.end + 1: exc.end + 8] if ln.stream == exc.stream)
    return list(takewhile(lambda t: t and not t.startswith(("Traceback", "File ", "The above", "During handling")),
                          same))[:2]


# bash's report of a job, naming its command: "./run.sh: line 30:  7946 Killed   setsid ray start ...",
# "[1]+  Killed   python serve.py"
_JOB_REPORT = re.compile(r"^(?:\S+: line \d+: +\d+ +|\[\d+\][+-]? +)\S.*\s{2,}\S")


# a program's fatal message as its last line: "error: ...", "train.py: error: ..." (argparse), "fatal: ..." (git)
_FATAL_MESSAGE = re.compile(r"^(?:[\w./\-]+: )?(?:error|fatal|ERROR|FATAL): \S")
_ELASTIC_SIGNAL_LINE = re.compile(r"traceback\s*: Signal \d+ ")

# srun's report of how a task ended, and Slurm's lines that say why it was ended
_SLURM_TASK_END = re.compile(r"srun: error: [^\s:]+: tasks? [\d,-]+: ")
_SLURM_WHY = re.compile(r"CANCELLED AT \S+|Node failure on ")


# vLLM's own line naming the engine process that died (v1 executor, engine core manager)
_NAMES_DEAD_PROC = re.compile(r"(?:Worker|Engine core) proc \S+ died unexpectedly")


def _choose(cands: list[_Candidate]) -> _Candidate | None:
    """The root cause among the candidates: the lowest tier, the latest of it, then each preference in
    turn (a candidate that says more about the same failure), counted over ranks, with the
    corroborating lines of its category as evidence."""
    if not cands:
        return None
    best_tier = min(c.tier for c in cands)
    top = [c for c in cands if c.tier == best_tier]
    if best_tier == WRAPPER:
        top = _named_wrappers(top)
    chosen = max(top, key=lambda c: (c.index, c.rich))
    for applies, says_more in _SAYS_MORE:
        if applies(chosen):
            chosen = _latest_instead(chosen, [c for c in top if says_more(c)])
    chosen = _rich_over_bare(_said_over_vague(chosen, top), top)
    _count_and_corroborate(chosen, cands)
    return chosen


def _named_wrappers(top: list[_Candidate]) -> list[_Candidate]:
    """Only pointers to a failure printed elsewhere: the ones that say what failed (an engine or an
    actor that died) over generic wrappers ("RuntimeError: cancelled", ChildFailedError)."""
    named = [c for c in top if c.category not in ("python_exception", "unknown") or c.vague]
    top = named or top
    # vLLM's line naming the process that died ("Worker proc VllmWorker-0 died unexpectedly") says more than
    # the wrappers printed after it (the engine core's "Executor failed.", EngineDeadError)
    dead = [c for c in top if not c.rich and c.evidence and _NAMES_DEAD_PROC.search(c.evidence[0])]
    if not dead:
        return top
    top = dead + [c for c in top if c.rich and c.category == dead[0].category]
    named_dead = max(dead, key=lambda c: c.index)
    named_dead.evidence = named_dead.evidence + [e for c in top if c.rich for e in c.evidence[:1]]
    return [named_dead]


_COLLECTIVE_CAUSES = {"nccl_timeout", "nccl_error", "watchdog_timeout", "distributed_timeout"}
# (does this rule apply to the chosen candidate, which candidates of its tier say more): the latest of those
# in its place, carrying its first line as evidence
_SAYS_MORE: tuple[tuple[Callable[[_Candidate], object], Callable[[_Candidate], object]], ...] = (
    # the shell reports a job the script ran that was killed (a Ray node started in the background, a server);
    # the exception the program printed says what broke for it, and where: the job's death is its evidence
    (lambda ch: ch.job_report, lambda c: c.rich and c.exception and not c.job_report),
    # srun's "task 0: Terminated" is how the task ended; slurmstepd's "CANCELLED AT ... DUE TO TIME LIMIT" or
    # srun's "Node failure on hq1" printed before it says why
    (lambda ch: ch.evidence and _SLURM_TASK_END.search(ch.evidence[0]),
     lambda c: c.evidence and _SLURM_WHY.search(c.evidence[0])),
    # the watchdog's "we are taking the entire process down" follows (or, since torch 2.3, precedes) the line
    # that says what failed: a collective that timed out, an NCCL error
    (lambda ch: ch.teardown, lambda c: not c.teardown and c.category in _COLLECTIVE_CAUSES),
)


def _latest_instead(chosen: _Candidate, better: list[_Candidate]) -> _Candidate:
    """The last of ``better`` in place of ``chosen``, carrying its first line as evidence; else ``chosen``."""
    if not better:
        return chosen
    r = max(better, key=lambda c: c.index)
    r.evidence = r.evidence + chosen.evidence[:1]
    return r


def _said_over_vague(chosen: _Candidate, top: list[_Candidate]) -> _Candidate:
    """torchrun's "exitcode: 1" says only that a rank failed: a traceback of the same rank's kind
    (a gloo peer that closed, another pointer) still says more."""
    if not chosen.vague:
        return chosen
    said = [c for c in top if not c.vague and c.rich and c.exception and c.stream and c.stream == chosen.stream
            and not WRAPPER_TYPES.search(c.exception.split(":", 1)[0].strip().split("(", 1)[0])]
    return max(said, key=lambda c: c.index) if said else chosen


def _rich_over_bare(chosen: _Candidate, top: list[_Candidate]) -> _Candidate:
    """A parsed traceback of the same category says more than a bare line, except the line that
    names a process that died."""
    if chosen.rich:
        return chosen
    richer = [c for c in top if c.rich and c.category == chosen.category]
    if chosen.evidence and _NAMES_DEAD_PROC.search(chosen.evidence[0]):
        # "Worker proc VllmWorker-7 died unexpectedly" says which process died; vLLM's
        # EngineDeadError ("EngineCore encountered an issue. See stack trace above") only reports
        # that one did: the line names the failure, the wrapper is its evidence
        chosen.evidence = chosen.evidence + [e for c in richer for e in c.evidence[:1]]
        return chosen
    return _latest_instead(chosen, richer)


def _count_and_corroborate(chosen: _Candidate, cands: list[_Candidate]) -> None:
    """The same error on several ranks/processes is one error, counted: digits differ (timings, ids).
    Corroborating lines of the winning category elsewhere in the tail (other ranks, hints) join its evidence."""
    key = _digitless(chosen.exception or chosen.summary)
    streams = {c.stream for c in cands if c.category == chosen.category
               and _digitless(c.exception or c.summary) == key}
    chosen.streams = max(chosen.streams, len(streams))
    extra = [c.evidence[0] for c in cands if c is not chosen and not c.rich and c.category == chosen.category
             and c.evidence]
    chosen.evidence = chosen.evidence + extra[:3]


def _frames_after(norm: list[Line], k: int) -> list[Frame]:
    """The frames of a traceback whose header is norm[k], even where the tail or a paste cut it off
    before its exception line (complete frame lines only)."""
    frames: list[Frame] = []
    flat = False  # frames printed without their indentation (a log record per line, its indent lost)
    for ln in norm[k + 1: k + 200]:
        if ln.stream != norm[k].stream:
            continue
        m = FRAME.match(ln.text)
        if m:
            frames.append(Frame(m.group("file"), int(m.group("line")), m.group("func")))
            flat = not m.group("indent")
        elif TRACEBACK_START.search(ln.text) and not frames:
            continue  # "EngineCore failed to start." then "Traceback (most recent call last):"
        elif not ln.text[:1].isspace() and not (flat and bare_exception(ln.text.strip()) is None):
            break
    return frames


def _ray_task_candidate(norm: list[Line], k: int, ln: Line, text: str) -> _Candidate | None:
    """A Ray task failure ("RayTaskError(X): ray::f() (pid=.., ip=..)", "Execution failed: ray::f()
    (pid=.., ip=..)", "Unhandled error (...): ray::A.f() (pid=..") that no parsed traceback covers: the remote
    frames under it say where the task failed, and the exception line that ends them (an ActorDiedError, whose
    lines below say which actor died and why), or else X, what failed."""
    m = RAY_TASK_HEADER.search(text)
    if m is None:
        return None
    cause = m.group("cause")
    frames = _frames_after(norm, k)
    exc = _exception_after_frames(norm, k) if frames else None
    cat, tier = classify_exception(exc[1] if exc else f"{cause}: ") if exc or cause else ("python_exception", PRIMARY)
    if tier == WRAPPER:
        cat, tier = "python_exception", PRIMARY
    loc, library = locate(frames)
    what = _shorten(exc[1]) if exc else (f"{cause} in " if cause else "") + "the traceback is cut off before its exception"
    summary = f"Ray task ray::{m.group('task')}() (pid {m.group('pid')}) failed: {what}{_at(loc, library=library)}"
    evidence = [text] + [f'File "{f.file}", line {f.line}, in {f.func}' for f in frames[-3:]] + ([exc[1]] if exc else [])
    return _Candidate(exc[0] if exc else ln.index, cat, tier, summary, exc[1] if exc else None, loc, evidence,
                      rich=True, library=library, stream=ln.stream)


def _exception_after_frames(norm: list[Line], k: int) -> tuple[int, str] | None:
    """(line index, text) of the exception line that ends the frames under the header norm[k] (same stream):
    a remote traceback printed without its "Traceback (most recent call last):" line."""
    for ln in norm[k + 1: k + 200]:
        if ln.stream != norm[k].stream or FRAME.match(ln.text) or ln.text[:1].isspace():
            continue  # another stream's line, a frame, a frame's code
        t = ln.text.strip()
        return (ln.index, t) if bare_exception(t) is not None else None
    return None


def _describe_ray(c: _Candidate, norm: list[Line]) -> None:
    """A Ray actor/worker death: name the actor and Ray's reason, list Ray's possible causes in the
    hint (never asserting one), and keep Ray's own lines in the evidence (see :mod:`.ray_deaths`)."""
    rd = describe_ray_death([ln.text for ln in norm], c.index)
    if not (rd.exc_type or rd.why or rd.lines):
        return
    c.summary = rd.summary() + _at(c.location, library=c.library)
    c.hint = rd.hint()
    frames = [e for e in c.evidence if e.startswith("File ")]
    rest = [e for e in c.evidence if not e.startswith("File ")]
    c.evidence = rest[:1] + rd.lines + frames + rest[1:]


# ---------------------------------------------------------------------------------------------
# helpers


def find_step(norm: list[Line]) -> int | None:
    """The last completed training step the tail mentions: the last explicit step field ("Step
    57/100", "step:3", "global_step=12"), else a checkpoint folder (checkpoint-500, global_step500)
    or the count of a training progress bar (Transformers' bar has no description; verl's is
    "Training Progress"), whichever came last.

    An explicit step field is what the trainer says it completed; a progress bar drawn after it
    counts something else or runs ahead (verl draws the next step's bar), so it never overrides
    one. Bars of other loops (shard loading, connecting, data preparation) are no steps, and a bar
    with no description at its total is a finished loop (evaluation, most often), not the step a run
    is at; a bar that names training ("Training: 100%| 5/5") at its total completed its last step."""
    bar: int | None = None
    # a frame's source line ("    assert ok, f'loss is NaN at step 8'") is code, not a report
    source = {norm[k + 1].index for k in range(len(norm) - 1)
              if norm[k].text.lstrip().startswith("File ") and norm[k + 1].text[:1].isspace()}
    for ln in reversed(norm):
        t = ln.text
        if (t.lstrip().startswith("File ") or ln.index in source
                or (t[:1].isalpha() and bare_exception(t.strip()) is not None)):
            continue  # a frame, its code, or an exception's message (the step it failed in, not one done)
        found = _step_field(t) if "tep" in t or "checkpoint-" in t else None
        if found is not None:
            value, checkpoint = found
            return bar if checkpoint and bar is not None else value  # a checkpoint folder older than a bar
        if bar is None and "%|" in t:
            bar = _training_bar(t)
    return bar


def _step_field(t: str) -> tuple[int, bool] | None:
    """The last step the line's first step pattern that matches names, and whether that pattern is a
    checkpoint folder's (the last of STEP_PATTERNS)."""
    for k, pat in enumerate(STEP_PATTERNS):
        ms = list(pat.finditer(t))
        if ms:  # (each pattern's group is digits)
            return int(ms[-1].group(1)), k == len(STEP_PATTERNS) - 1
    return None


def _training_bar(t: str) -> int | None:
    """The count of the line's last training progress bar, where it counts steps done."""
    for m in reversed(list(TQDM_BAR.finditer(t))):
        n, total = m.group("n"), m.group("total")
        desc = m.group("desc").strip()
        if TRAINING_BAR_DESC.match(desc) and (n != total or NAMED_TRAINING_BAR_DESC.match(desc)):
            return int(n)
    return None


_DIGITS = re.compile(r"\d+")
_RANK_TAG = re.compile(r"\[(?:PG [^\]]*)?Rank \d+\]")


def _digitless(text: str) -> str:
    return _DIGITS.sub("#", _RANK_TAG.sub("", text)).strip()


def _last_index(norm: list[Line], pat: re.Pattern[str]) -> int:
    return next((ln.index for ln in reversed(norm) if pat.search(ln.text)), -1)


def _tail_evidence(norm: list[Line]) -> list[str]:
    return [ln.text.strip() for ln in norm if ln.text.strip()][-5:]


def _dedup(items: list[str]) -> list[str]:
    """Evidence lines once each: a line another one already holds (the same exception printed by
    two writers, once cut short) is dropped, so long exception text is not shown twice."""
    out: list[str] = []
    keys: list[str] = []
    for it in items:
        it = it.strip()
        if not it:
            continue
        key = " ".join(it.split())
        if any(key == k or (len(key) >= 40 and (key in k or k.startswith(key[:120]))) for k in keys):
            continue
        # a longer version of a line already kept replaces it
        for j, k in enumerate(keys):
            if len(k) >= 40 and (k in key or key.startswith(k[:120])):
                keys[j], out[j] = key, it
                break
        else:
            keys.append(key)
            out.append(it)
    return out


def _at(loc: str | None, word: str = " at ", library: bool = False) -> str:
    """" at FILE:LINE" for a location to show (none for one in library code where ``library`` says so)."""
    return f"{word}{short_location(loc)}" if loc and not library else ""


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 240 else text[:237] + "..."


