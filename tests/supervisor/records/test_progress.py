"""Progress: chunk-level matching agrees with the per-line reference parser; rate and ETA by fake clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsup.supervisor.records.presets import PRESETS
from rlsup.supervisor.records.progress import Observation, ProgressMatcher, ProgressTracker
from tests.supervisor.records.preset_reference import parse_line

FIX = Path(__file__).parent.parent.parent / "fixtures" / "presets"


@pytest.mark.parametrize("name", ["rlsup", "prime-rl", "areal", "verl", "trl"])
def test_chunk_scan_matches_line_parser(name):
    lines = [x for x in (FIX / f"{name}.log").read_text().splitlines() if not x.startswith("# source")]
    expected = []
    for line in lines:
        step, total, metrics = parse_line(PRESETS[name], line)
        if step is not None or total is not None or metrics:
            expected.append((step, total, metrics))
    got = ProgressMatcher(preset=name).scan("\n".join(lines) + "\n")
    merged: list[tuple] = []
    # The chunk scan may report one line's extractors separately; fold by line order.
    assert got, f"no observations for {name}"
    steps = [o.step for o in got if o.step is not None]
    assert steps == [s for s, _, _ in expected if s is not None]
    all_metrics: dict = {}
    for o in got:
        all_metrics.update(o.metrics)
    for _, _, m in expected:
        merged.append(m)
    exp_metrics: dict = {}
    for m in merged:
        exp_metrics.update(m)
    assert repr(sorted(all_metrics.items())) == repr(sorted(exp_metrics.items()))  # nan-aware


def test_custom_pattern_metrics_and_total():
    m = ProgressMatcher(pattern=r"Step (?P<step>\d+)/(?P<total>\d+) \| loss (?P<loss>[-\d.e]+)")
    obs = m.scan("noise\nStep 3/10 | loss 0.25\nStep 4/10 | loss 1e-3\nother\n")
    assert obs == [Observation(3, 10, {"loss": 0.25}), Observation(4, 10, {"loss": 0.001})]
    assert m.scan("nothing here\n") == []


def test_tracker_rate_eta_and_resume_reset():
    t = ProgressTracker(total=100)
    t.observe(Observation(10, None, {"reward": 0.1}), now=0)
    assert t.rate is None and t.eta_s() is None
    t.observe(Observation(20, None, {"reward": 0.2}), now=10)
    assert t.rate == pytest.approx(1.0)
    assert t.eta_s(now=10) == pytest.approx(80)
    assert t.eta_s(now=15) == pytest.approx(75)  # time on the current step counts
    t.observe(Observation(5, None, {}), now=20)  # resumed from an earlier checkpoint
    assert t.step == 5 and t.rate is None
    t.observe(Observation(7, None, {}), now=24)
    assert t.rate == pytest.approx(0.5)
    snap = t.snapshot(now=24)
    assert snap["metric"] == "reward" and snap["series"] == [0.1, 0.2]


def test_flood_of_step_lines_keeps_latest():
    m = ProgressMatcher(pattern=r"Step (?P<step>\d+)")
    text = "".join(f"Step {i}\n" for i in range(1000))
    obs = m.scan(text)
    assert obs[-1].step == 999 and len(obs) <= 64
