"""Restart decisions, to the letter, with a fake clock and a seeded RNG."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from rlsup.supervisor.config.model import RestartCfg
from rlsup.supervisor.records.phrases import describe_exit
from rlsup.supervisor.rules.policy import Decision, History, backoff_for, decide, is_success


def backoff_delay(cfg: RestartCfg, failures: int, rng: random.Random) -> float:
    return backoff_for(cfg, failures, rng.random())


@dataclass
class RestartTracker:
    """:func:`decide` with the history kept between calls, as the lifecycle keeps it (test-only)."""

    cfg: RestartCfg
    rng: random.Random = field(default_factory=random.Random)
    history: History = History()

    @property
    def failures(self) -> int:
        return self.history.failures

    def reset(self) -> None:
        self.history = History()

    def decide(self, *, exit_code: int | None, signal: str | None, healthy_s: float, now: float,
               forced_failure: str | None = None) -> Decision:
        success = forced_failure is None and is_success(self.cfg, exit_code, signal)
        how = forced_failure or describe_exit(exit_code, signal)
        d, self.history = decide(self.cfg, self.history, success=success, how=how, healthy_s=healthy_s, now=now,
                                 u=self.rng.random())
        return d


def cfg(**kw):
    return RestartCfg.model_validate(kw)


def test_backoff_sequence_without_jitter():
    c = cfg(backoff={"initial": 2, "factor": 2, "max": 30, "jitter": 0})
    rng = random.Random(0)
    assert [backoff_delay(c, n, rng) for n in range(1, 7)] == [2, 4, 8, 16, 30, 30]
    assert backoff_delay(c, 10_000, rng) == 30  # no overflow


def test_jitter_stays_within_bounds_and_is_deterministic():
    c = cfg(backoff={"initial": 10, "factor": 1, "max": 100, "jitter": 0.2})
    a = [backoff_delay(c, 1, random.Random(7)) for _ in range(3)]
    assert len(set(a)) == 1
    rng = random.Random(1)
    vals = [backoff_delay(c, 1, rng) for _ in range(500)]
    assert min(vals) >= 8 and max(vals) <= 12 and len(set(vals)) > 50


def test_on_failure_sequence_and_give_up_within_window():
    t = RestartTracker(cfg(max_restarts=3, window=100, backoff={"initial": 1, "jitter": 0}), random.Random(0))
    out = [t.decide(exit_code=1, signal=None, healthy_s=0, now=float(now)) for now in (0, 10, 20, 30)]
    assert [(d.action, d.delay_s) for d in out] == [("restart", 1), ("restart", 2), ("restart", 4), ("fatal", 0)]
    assert "gave up after 3 restarts within 100 s (max_restarts=3)" in out[-1].reason


def test_window_slides():
    t = RestartTracker(cfg(max_restarts=2, window=60, backoff={"initial": 1, "jitter": 0}), random.Random(0))
    assert t.decide(exit_code=1, signal=None, healthy_s=0, now=0).action == "restart"
    assert t.decide(exit_code=1, signal=None, healthy_s=0, now=30).action == "restart"
    assert t.decide(exit_code=1, signal=None, healthy_s=0, now=59).action == "fatal"
    t2 = RestartTracker(cfg(max_restarts=2, window=60, backoff={"initial": 1, "jitter": 0}), random.Random(0))
    t2.decide(exit_code=1, signal=None, healthy_s=0, now=0)
    t2.decide(exit_code=1, signal=None, healthy_s=0, now=30)
    assert t2.decide(exit_code=1, signal=None, healthy_s=0, now=61).action == "restart"  # the first fell out


def test_reset_after_healthy_uptime():
    t = RestartTracker(cfg(reset_after=600, backoff={"initial": 1, "jitter": 0}), random.Random(0))
    assert t.decide(exit_code=1, signal=None, healthy_s=5, now=0).delay_s == 1
    assert t.decide(exit_code=1, signal=None, healthy_s=5, now=10).delay_s == 2
    assert t.decide(exit_code=1, signal=None, healthy_s=5, now=20).delay_s == 4
    assert t.decide(exit_code=1, signal=None, healthy_s=600, now=700).delay_s == 1  # healthy long enough
    assert t.decide(exit_code=1, signal=None, healthy_s=1, now=710).delay_s == 2


@pytest.mark.parametrize("policy,code,expected", [
    ("on-failure", 0, "complete"), ("on-failure", 1, "restart"),
    ("always", 0, "restart"), ("always", 1, "restart"),
    ("never", 0, "complete"), ("never", 1, "fatal"),
])
def test_policies(policy, code, expected):
    t = RestartTracker(cfg(policy=policy), random.Random(0))
    assert t.decide(exit_code=code, signal=None, healthy_s=0, now=0).action == expected


def test_signal_is_failure_and_success_codes():
    c = cfg(success_exit_codes=[0, 3])
    t = RestartTracker(c, random.Random(0))
    assert t.decide(exit_code=3, signal=None, healthy_s=0, now=0).action == "complete"
    d = t.decide(exit_code=None, signal="SIGKILL", healthy_s=0, now=0)
    assert d.action == "restart" and d.reason == "killed by SIGKILL"


def test_forced_failure_overrides_exit_zero():
    t = RestartTracker(cfg(), random.Random(0))
    d = t.decide(exit_code=0, signal=None, healthy_s=0, now=0, forced_failure="not ready within 5s")
    assert d.action == "restart" and d.reason == "not ready within 5s"


def test_max_restarts_zero_means_fatal_at_first_failure():
    t = RestartTracker(cfg(max_restarts=0), random.Random(0))
    assert t.decide(exit_code=1, signal=None, healthy_s=0, now=0).action == "fatal"


def test_user_reset_forgets_history():
    t = RestartTracker(cfg(max_restarts=1, backoff={"initial": 1, "jitter": 0}), random.Random(0))
    t.decide(exit_code=1, signal=None, healthy_s=0, now=0)
    assert t.decide(exit_code=1, signal=None, healthy_s=0, now=1).action == "fatal"
    t.reset()
    assert t.decide(exit_code=1, signal=None, healthy_s=0, now=2).action == "restart"
