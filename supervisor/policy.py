"""Restart decisions: pure functions of the restart config, the attempt history and a clock.

Vocabulary: a *failure* is an exit that is not a success (or any exit rlsup forced because a
probe failed). Backoff grows with consecutive failures and falls back to ``initial`` once an
attempt stayed healthy for ``reset_after`` seconds. ``max_restarts`` automatic restarts within
``window`` seconds make the component fatal.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from .config import RestartCfg

Action = Literal["complete", "restart", "fatal"]


@dataclass(frozen=True)
class Decision:
    action: Action
    delay_s: float = 0.0
    reason: str = ""


def is_success(cfg: RestartCfg, exit_code: int | None, signal: str | None) -> bool:
    return signal is None and exit_code is not None and exit_code in cfg.success_exit_codes


def backoff_delay(cfg: RestartCfg, failures: int, rng: random.Random) -> float:
    """Delay before the restart that follows ``failures`` consecutive failures (>= 1).

    ``initial * factor**(failures-1)``, capped at ``max``, then jittered by up to ``±jitter``
    (still capped at ``max``). ``failures == 0`` (a restart after a success, policy always)
    waits ``initial``.
    """
    b = cfg.backoff
    n = max(failures, 1)
    # Cap the exponent so huge attempt counts cannot overflow a float.
    base = min(b.max, b.initial * (b.factor ** min(n - 1, 64)))
    if b.jitter:
        base *= 1 + b.jitter * (2 * rng.random() - 1)
    return round(min(b.max, base), 3)


@dataclass
class RestartTracker:
    """The restart history of one component."""

    cfg: RestartCfg
    rng: random.Random = field(default_factory=random.Random)
    failures: int = 0  # consecutive failures (backoff exponent)
    restarts: deque[float] = field(default_factory=deque)  # times of automatic restarts

    def reset(self) -> None:
        """A user (re)start: forget the history."""
        self.failures = 0
        self.restarts.clear()

    def decide(self, *, exit_code: int | None, signal: str | None, healthy_s: float, now: float,
               forced_failure: str | None = None) -> Decision:
        """What to do after an attempt ended.

        ``healthy_s``: how long the attempt was up and ready (0 if it never became ready).
        ``forced_failure``: the reason rlsup itself ended the attempt (readiness timeout,
        failed liveness probe); such an exit is a failure whatever its code.
        """
        cfg = self.cfg
        success = forced_failure is None and is_success(cfg, exit_code, signal)
        how = forced_failure or _describe_exit(exit_code, signal)
        if healthy_s >= cfg.reset_after:
            self.failures = 0
        if success:
            self.failures = 0
            if cfg.policy != "always":
                return Decision("complete", reason=how)
        else:
            self.failures += 1
            if cfg.policy == "never":
                return Decision("fatal", reason=f"{how}; restart policy is never")
        while self.restarts and self.restarts[0] <= now - cfg.window:
            self.restarts.popleft()
        if len(self.restarts) >= cfg.max_restarts:
            return Decision(
                "fatal",
                reason=f"{how}; gave up after {len(self.restarts)} restarts within {_dur(cfg.window)} "
                       f"(max_restarts={cfg.max_restarts})",
            )
        delay = backoff_delay(cfg, self.failures, self.rng)
        self.restarts.append(now)
        return Decision("restart", delay_s=delay, reason=how)


def _describe_exit(exit_code: int | None, signal: str | None) -> str:
    if signal:
        return f"killed by {signal}"
    return f"exited with code {exit_code}"


def _dur(s: float) -> str:
    if s >= 3600 and s % 3600 == 0:
        return f"{int(s // 3600)} h"
    if s >= 60 and s % 60 == 0:
        return f"{int(s // 60)} min"
    return f"{s:g} s"
