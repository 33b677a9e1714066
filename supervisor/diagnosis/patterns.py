"""Patterns across attempts of one component: pure functions of the attempt history.

Time comes only from the records' own timestamps, so tests are exact. The caller calls
:func:`detect_attempt_patterns` after each exit; flags describe the latest attempt's situation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import takewhile

from ..records.attempts import Attempt as AttemptRecord  # the one attempt model; the name stays for callers

__all__ = ["AttemptRecord", "Flag", "detect_attempt_patterns"]

# Categories that say nothing about the program itself; never a repeated_error.
_NO_SIGNATURE = {"unknown", "none", "killed"}
# Categories that repeat because something *else* is wrong (a dead dependency, a peer rank): worth
# a flag, but restarting may well succeed once the other side is back, so not fatal by default.
_TRANSIENT = {"connection_refused", "nccl_timeout", "distributed_timeout", "watchdog_timeout",
              "inference_engine_dead", "host_oom", "ray_actor_died"}


@dataclass(frozen=True)
class Flag:
    type: str  # repeated_error | crash_loop | step_crash | false_success
    message: str
    evidence: tuple[str, ...]
    fatal: bool  # the default action is to stop automatic restarts


def detect_attempt_patterns(
    history: Sequence[AttemptRecord],
    *,
    total: int | None,
    crash_loop_uptime_s: float = 30.0,
    crash_loop_count: int = 3,
    repeat_count: int = 2,
    step_window: int = 2,
) -> list[Flag]:
    """Flags for the latest attempt of ``history`` (oldest first). Empty history, no flags."""
    if not history:
        return []
    flags = (
        _repeated_error(history, repeat_count),
        _step_crash(history, step_window, repeat_count),
        _crash_loop(history, crash_loop_uptime_s, crash_loop_count),
        _false_success(history, total),
    )
    return [f for f in flags if f is not None]


def _repeated_error(history: Sequence[AttemptRecord], need: int) -> Flag | None:
    last = history[-1]
    d = last.diagnosis
    if not last.failed or d.category in _NO_SIGNATURE:
        return None
    sig = d.signature()
    run = len(list(takewhile(lambda rec: rec.failed and rec.diagnosis.signature() == sig, reversed(history))))
    if run < need:
        return None
    fatal = d.category not in _TRANSIENT
    msg = f"{d.what()} on {run} consecutive attempts"
    if fatal:  # (a full disk repeats because the disk stays full, not because the code is wrong)
        msg += ("; the disk is still full: automatic restarts stopped" if d.category == "disk_full"
                else "; a deterministic failure, automatic restarts stopped")
    return Flag("repeated_error", msg, (d.summary, *d.evidence)[:12], fatal)


def _crash_loop(history: Sequence[AttemptRecord], uptime_s: float, need: int) -> Flag | None:
    loop = list(takewhile(lambda rec: not rec.ready or rec.uptime_s < uptime_s, reversed(history)))
    if len(loop) < need:
        return None
    loop.reverse()
    starts = [r.started_at for r in loop]
    period = (starts[-1] - starts[0]) / (len(starts) - 1) if len(starts) > 1 else loop[-1].uptime_s
    why = "before becoming ready" if not any(r.ready for r in loop) else f"within {uptime_s:g} s of starting"
    msg = (f"{len(loop)} consecutive attempts died {why} (restarting every ~{period:.0f} s); "
           f"latest: {loop[-1].diagnosis.summary}")
    evidence = tuple(
        f"attempt {r.attempt}: up {r.uptime_s:.1f} s, {r.exit_text(bare_signal=True)}, {r.diagnosis.category}" for r in loop[-6:]
    )
    return Flag("crash_loop", msg, evidence, False)


def _step_crash(history: Sequence[AttemptRecord], window: int, need: int) -> Flag | None:
    last = history[-1]
    at_step = last.step
    if not last.failed or at_step is None:
        return None
    run = list(takewhile(lambda rec: rec.failed and rec.step is not None and abs(rec.step - at_step) <= window,
                         reversed(history)))
    if len(run) < need:
        return None
    steps = sorted({r.step for r in run if r.step is not None})
    at = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
    resumed = [r.resumed_step for r in run if r.resumed_step is not None]
    msg = f"crashed at {at} on {len(run)} consecutive attempts"
    if resumed:
        msg += f" (resumed from step {resumed[0] if len(set(resumed)) == 1 else ', '.join(map(str, resumed))})"
    msg += f"; {last.diagnosis.what()}; automatic restarts stopped"
    return Flag("step_crash", msg, (f"last lines before step {last.step}:", *last.diagnosis.evidence)[:12], True)


def _false_success(history: Sequence[AttemptRecord], total: int | None) -> Flag | None:
    last = history[-1]
    if last.signal is not None or last.exit_code != 0:
        return None
    # Steps may be counted from 0 or 1: the last step of a 0-based run is total - 1.
    if total is not None and last.step is not None and last.step >= total - 1:
        # It did its last step: completed, whatever it logged on the way. A trainer that finished while the
        # engine it pushes weights to was dying logs that death (its last push failed) and exits 0: that is
        # no false success, and restarting it repeated its last step (seen in the real-vLLM stage).
        return None
    if last.diagnosis.category == "inference_engine_dead":
        # vLLM's API server exits 0 after its engine core died ("EngineCore encountered an issue", then a clean
        # uvicorn shutdown: vllm/entrypoints/launcher.py terminate_if_errored; seen on 0.32.0): a server that
        # lost its engine did not complete, whatever its exit code says.
        msg = f"exited 0 after its inference engine died ({last.diagnosis.summary}): treated as a failure"
    elif total is None:
        return None
    else:
        seen = "no step" if last.step is None else f"step {last.step}"
        msg = f"exited 0 at {seen} of {total}: not finished, treated as a failure"
    return Flag("false_success", msg, (last.diagnosis.summary, *last.diagnosis.evidence)[:12], False)
