"""Restart decisions: pure functions of the restart config, the restart history and the time.

Vocabulary: a *failure* is an exit that is not a success, or any exit rlsup forced (a readiness
timeout, a failed liveness probe, a stall restart, a false success). Backoff grows with consecutive
failures and falls back to ``initial`` once an attempt stayed healthy for ``reset_after`` seconds.
``max_restarts`` automatic restarts within ``window`` seconds make the component fatal. Times are
monotonic seconds; randomness (backoff jitter) comes in as a number in [0, 1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from ..config.model import RestartCfg
from ..records.phrases import fmt_span

Action = Literal["complete", "restart", "fatal"]


@dataclass(frozen=True)
class Decision:
    action: Action
    delay_s: float = 0.0
    reason: str = ""


@dataclass(frozen=True)
class History:
    """What the policy remembers of a component: consecutive failures, times of automatic restarts."""

    failures: int = 0
    restarts: tuple[float, ...] = ()


def is_success(cfg: RestartCfg, exit_code: int | None, signal: str | None) -> bool:
    return signal is None and exit_code is not None and exit_code in cfg.success_exit_codes


def backoff_for(cfg: RestartCfg, failures: int, u: float) -> float:
    """Delay before the restart that follows ``failures`` consecutive failures (>= 1), jittered by
    ``u`` in [0, 1): ``initial * factor**(failures-1)`` capped at ``max``, then scaled by up to
    ``±jitter`` (still capped). ``failures == 0`` (after a success, policy always) waits ``initial``."""
    b = cfg.backoff
    n = max(failures, 1)
    base = min(b.max, b.initial * (b.factor ** min(n - 1, 64)))  # a capped exponent cannot overflow
    if b.jitter:
        base *= 1 + b.jitter * (2 * u - 1)
    return round(min(b.max, base), 3)


def decide(cfg: RestartCfg, hist: History, *, success: bool, how: str, healthy_s: float, now: float,
           u: float) -> tuple[Decision, History]:
    """What to do after an attempt ended, and the history after it.

    ``success``: the exit counts as a success (the caller has already turned a forced or false
    success into a failure); ``how``: the exit in words; ``healthy_s``: how long the attempt was up
    and ready (0 if it never became ready).
    """
    failures = 0 if healthy_s >= cfg.reset_after else hist.failures
    if success:
        failures = 0
        if cfg.policy != "always":
            return Decision("complete", reason=how), replace(hist, failures=0)
    else:
        failures += 1
        if cfg.policy == "never":
            return Decision("fatal", reason=f"{how}; restart policy is never"), replace(hist, failures=failures)
    recent = tuple(t for t in hist.restarts if t > now - cfg.window)
    if len(recent) >= cfg.max_restarts:
        return (Decision("fatal", reason=f"{how}; gave up after {len(recent)} restarts within "
                                         f"{fmt_span(cfg.window)} (max_restarts={cfg.max_restarts})"),
                History(failures, recent))
    delay = backoff_for(cfg, failures, u)
    return Decision("restart", delay_s=delay, reason=how), History(failures, recent + (now,))

