"""How late the run's scheduled work runs (issue 44 item 2): what `rlsup status --json` shows as ``run.ticks``.

Lateness is counted against each piece of work's own due time, never timed here: the tests put the due time in the
past, or a clock of their own, and check what is counted."""

from __future__ import annotations

import asyncio
import time

import pytest

from rlsup.supervisor.run import ticker
from rlsup.supervisor.run.ticker import EvaluationPacing, Lateness, Ticker, late_summary


def test_late_summary_gives_the_median_the_90th_percentile_and_the_most_late_in_ms() -> None:
    s = late_summary([i / 1000 for i in range(100, 0, -1)])  # 1..100 ms, in no order
    assert s == {"count": 100, "over_s": ticker.LATE_OVER_S, "late_p50_ms": 51.0, "late_p90_ms": 91.0,
                 "late_max_ms": 100.0}
    assert late_summary([]) == {"count": 0, "over_s": ticker.LATE_OVER_S, "late_p50_ms": 0.0, "late_p90_ms": 0.0,
                                "late_max_ms": 0.0}


class FakeClock:
    """Time only the test moves."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


def test_lateness_counts_what_ran_over_the_last_window_of_its_clock_only_and_early_as_on_time() -> None:
    clock = FakeClock()
    late = Lateness(clock)
    late.ran(2.0)  # long ago
    clock.now += ticker.LATE_OVER_S + 1
    late.ran(0.010)
    late.ran(-0.5)  # ran before it was due: on time
    s = late.summary()
    assert s["count"] == 2 and s["late_max_ms"] == 10.0 and s["late_p50_ms"] == 10.0
    clock.now += ticker.LATE_OVER_S + 1  # the run's clock moved on, however little the machine's did
    assert late.summary()["count"] == 0


def test_the_run_gives_its_lateness_the_run_clock(tmp_path) -> None:
    from rlsup.supervisor.config.loader import load_config
    from rlsup.supervisor.run.run import Run

    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: t\ncomponents:\n  a:\n    command: [\"true\"]\n")
    clock = FakeClock()
    run = Run(load_config(str(cfg), run_dir=str(tmp_path / "run")), clock=clock, serve=False)
    assert run._ticker.late.clock is clock


class JumpingClock:
    """Real monotonic time plus what the test adds (a jump: the loop busy that long)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    def time(self) -> float:
        return time.time() + self.offset


def test_a_tick_planned_again_into_the_past_is_not_counted_late() -> None:
    """A poke plans the tick again; a tick it plans at a time already past (the second after the last tick, of
    an idle run woken minutes later) runs at once and is not the supervisor's lag; a tick that slept to its due
    time and ran 0.5 s after it is."""
    clock = JumpingClock()
    ticks: list[float] = []

    def plan() -> float:
        if not ticks:
            return clock.monotonic() - 60.0
        if len(ticks) == 1:
            asyncio.get_running_loop().call_soon(setattr, clock, "offset", clock.offset + 0.5)  # busy 0.5 s
            return clock.monotonic() + 0.001
        return clock.monotonic() + 3600.0

    pacing = EvaluationPacing(lambda: None, lambda names: None, clock)
    t = Ticker(clock, plan, ticks.append, pacing)

    async def main() -> None:
        task = asyncio.ensure_future(t.run())
        while len(ticks) < 2:
            await asyncio.sleep(0.001)
        task.cancel()

    asyncio.run(main())
    s = t.late.summary()
    assert s["count"] == 1 and s["late_max_ms"] >= 499.0  # the second tick only


def test_an_evaluation_says_how_late_it_ran() -> None:
    evaluated: list[int] = []
    pacing = EvaluationPacing(lambda: evaluated.append(1), lambda names: None, JumpingClock())

    async def main() -> None:
        loop = asyncio.get_running_loop()
        pacing.schedule(loop)
        while not evaluated:
            await asyncio.sleep(0.001)

    asyncio.run(main())
    assert pacing.late.summary()["count"] == 1


@pytest.mark.parametrize("late", [0.0, 0.25])
def test_the_shared_lateness_is_the_tickers(late: float) -> None:
    clock = JumpingClock()
    pacing = EvaluationPacing(lambda: None, lambda names: None, clock)
    t = Ticker(clock, lambda: 0.0, lambda planned: None, pacing)
    t.late.ran(late)
    assert pacing.late.summary()["late_max_ms"] == 1000 * late
