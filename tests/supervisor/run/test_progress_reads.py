"""The steps a component's log reads bring, and the time they carry into the rate (a fake clock, a real log file).

A read's steps carry its time only when the read before it reached the log's end: the lines were written
since. The first read of a supervisor taking over (the lines it missed), and a read that left more waiting
(a loaded supervisor working through a backlog), bring steps written at times nobody saw: they count,
but make no point of the rate window. The end-to-end case: tests/faults/test_takeover_rate.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlsup.supervisor.config.loader import load_config
from rlsup.supervisor.run.component import Component
from rlsup.supervisor.rundir.layout import RunPaths
from rlsup.supervisor.rundir.logs import Position
from tests.conftest import write_config

CONFIG = """
name: reads
components:
  trainer:
    command: ["true"]
    progress: {pattern: 'Step (?P<step>\\d+)/(?P<total>\\d+)'}
"""


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t

    def time(self) -> float:
        return 1.7e9 + self.t


class Ctx:
    """What a component's reads need of its run (nothing is started)."""

    def __init__(self, tmp_path: Path) -> None:
        self.cfg = load_config(write_config(tmp_path, CONFIG), run_dir=str(tmp_path / "run"))
        self.paths = RunPaths(tmp_path / "run")
        self.paths.logs.mkdir(parents=True)
        self.clock = Clock()
        self.line_listeners: list[Any] = []
        self.tracking = None

    def emit(self, event: Any) -> dict[str, Any]:
        return {}

    def progress_dirty(self, comp: Component) -> None:
        pass


def _steps(ctx: Ctx, first: int, last: int) -> None:
    with open(ctx.paths.log("trainer"), "ab") as f:
        f.write(b"".join(b"Step %d/1000\n" % i for i in range(first, last + 1)))


def test_a_take_over_catching_up_on_the_log_counts_its_steps_at_no_time(tmp_path):
    ctx = Ctx(tmp_path)
    _steps(ctx, 1, 20)  # what the previous supervisor read (state.json: its position)
    at = ctx.paths.log("trainer").stat()
    _steps(ctx, 21, 120)  # written while no supervisor was alive
    c = Component("trainer", ctx.cfg.components["trainer"], ctx, log_position=Position(at.st_ino, at.st_size, 20))
    ctx.clock.t += 0.1
    c.read_output()  # the catch-up: a hundred steps at once
    assert c.progress.step == 120 and c.progress.rate is None and c.progress.eta_s(ctx.clock.t) is None
    for step in (121, 122, 123):  # then read as they come, two a second
        ctx.clock.t += 0.5
        _steps(ctx, step, step)
        c.read_output()
    assert c.progress.step == 123 and c.progress.rate == pytest.approx(2.0)  # not 100 steps in 0.1 s
    assert c.progress.eta_s(ctx.clock.t) == pytest.approx((1000 - 123) / 2.0)


def test_a_read_that_leaves_more_waiting_is_a_backlog(tmp_path):
    ctx = Ctx(tmp_path)
    c = Component("trainer", ctx.cfg.components["trainer"], ctx)
    c.read_output()  # the log's end (as before an attempt starts)
    for step in (1, 2):
        ctx.clock.t += 1.0
        _steps(ctx, step, step)
        c.read_output()
    assert c.progress.rate == pytest.approx(1.0)
    ctx.clock.t += 10.0  # a supervisor too loaded to read for 10 s, then reading it in pieces
    _steps(ctx, 3, 100)
    while c.read_output(budget=len(b"Step 10/1000\n") * 10):
        ctx.clock.t += 0.001
    assert c.progress.step == 100 and c.progress.rate == pytest.approx(1.0)  # not 10 steps a millisecond
    ctx.clock.t += 1.0
    _steps(ctx, 101, 101)
    c.read_output()  # live again: the window spans the backlog, whose steps happened in it
    assert c.progress.rate == pytest.approx((101 - 1) / (ctx.clock.t - 1001.0))


def test_the_steps_of_one_read_make_one_point(tmp_path):
    ctx = Ctx(tmp_path)
    c = Component("trainer", ctx.cfg.components["trainer"], ctx)
    c.read_output()
    for first in (1, 51, 101):  # 50 steps between reads a second apart (50 steps/s)
        ctx.clock.t += 1.0
        _steps(ctx, first, first + 49)
        c.read_output()
    assert c.progress.rate == pytest.approx(50.0)


def test_a_restored_step_is_no_point_of_the_rate():
    """The step state.json held (what the previous supervisor saw, when is not known): the rate starts from the
    steps this supervisor reads as they come, not from it (a take-over's first rate was 100s of steps/s)."""
    from rlsup.supervisor.records.progress import Observation, ProgressTracker
    from rlsup.supervisor.run.carryover import restore_gauges

    t = ProgressTracker()
    restore_gauges(t, {"step": 100, "total": 1000}, {}, now=5.0)
    assert (t.step, t.total, t.rate) == (100, 1000, None)
    t.observe(Observation(None, None, {"loss": 0.5}), now=5.05)  # read as it came, but no step: still no point
    t.observe_all([Observation(s, None, {}) for s in range(101, 151)], now=5.1)
    t.stamp(5.1)  # read at once: one point, at the read's end
    assert t.rate is None
    t.observe(Observation(151, None, {}), now=5.6)
    assert t.rate == pytest.approx(2.0)
