"""The TUI's pure parts: text helpers, the pending-line feed and the client-side state fold."""

from __future__ import annotations

import json
import random

import fake
import pytest

from rlsup.supervisor.records import state as run_state
from rlsup.supervisor.records.progress import (
    HISTORY_METRICS,
    HISTORY_POINTS,
    HISTORY_WINDOW_S,
    MetricHistory,
    Observation,
    ProgressTracker,
    compact_points,
    merge_history,
)
from rlsup.tui.format import (
    braille_chart,
    clean_lines,
    failure_cause,
    fmt_cpu,
    fmt_dur,
    fmt_mb,
    fmt_rate,
    resample,
    sparkline,
)
from rlsup.tui.model import LogFeed, Marker, RunModel, attempt_marker
from tests.tier import examples


def test_sparkline_scales_between_min_and_max():
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7], 8) == "▁▂▃▄▅▆▇█"
    assert sparkline([1, 2, 3], 2) == "▁█"  # only the last `width` values
    assert sparkline([5, 5, 5], 10) == "▅▅▅"
    assert sparkline([None, 1.0, float("nan"), 2.0], 4) == " ▁ █"
    assert sparkline([], 5) == "" and sparkline([1, 2], 0) == ""


def test_sparkline_on_a_fixed_scale_does_not_move():
    run = [0.1, 0.2, 0.5, 0.8]
    first = sparkline(run[:3], 8, lo=0.0, hi=1.0)
    assert sparkline(run, 8, lo=0.0, hi=1.0)[:3] == first  # old points keep their height
    assert sparkline(run[:3], 8) != first  # on their own min..max they would jump


def test_resource_formats():
    assert [fmt_cpu(x) for x in (None, 0.42, 9.96, 187.0)] == ["-", "0.4%", "10.0%", "187%"]
    assert [fmt_mb(x) for x in (None, 812.0, 14_950.0)] == ["-", "812M", "14.6G"]


def test_failure_cause_brings_an_embedded_exception_forward():
    wrapped = {"category": "python_exception", "summary": "/usr/bin/python: Error while finding module specification "
               "for 'sglang.launch_server' (ModuleNotFoundError: No module named 'sglang')"}
    assert failure_cause(wrapped) == "ModuleNotFoundError: No module named 'sglang'"
    oom = {"category": "cuda_oom", "summary": "CUDA out of memory (tried to allocate 2.00 GiB) at train.py:88"}
    assert failure_cause(oom) == oom["summary"]
    assert failure_cause({"category": "none", "summary": "exited cleanly"}) == ""
    assert failure_cause(None) == ""
    assert failure_cause({"category": "unknown", "summary": "python3: can't open file 'x.py'"}) == "can't open file 'x.py'"


def test_braille_chart_draws_a_continuous_line_in_range():
    rows = braille_chart([(0, 0.0), (10, 1.0)], 10, 3, 0.0, 1.0)
    assert len(rows) == 3 and all(len(r) == 10 for r in rows)
    assert rows[2][0] != "\u2800" and rows[0][-1] != "\u2800"  # bottom-left to top-right
    assert all(any(r[c] != "\u2800" for r in rows) for c in range(10))  # no gap in any column
    flat = braille_chart([(0, 5.0), (1, 5.0)], 4, 2, 5.0, 5.0)
    assert flat[1] != "\u2800" * 4 or flat[0] != "\u2800" * 4
    assert braille_chart([], 3, 1, 0, 1) == ["\u2800" * 3]


def test_resample_means_per_column():
    assert resample([(0, 1.0), (1, 3.0), (2, 5.0), (3, 7.0)], 2) == [2.0, 6.0]
    assert resample([(0, 1.0), (9, 2.0)], 3) == [1.0, None, 2.0]


def test_durations_and_rates():
    assert [fmt_dur(x) for x in (None, 5, 65, 7260, 90000)] == ["-", "5s", "1m05s", "2h01m", "1d01h"]
    assert [fmt_rate(x) for x in (None, 0, 2.5, 0.25)] == ["-", "-", "2.50/s", "4.0s/it"]


def test_clean_lines_keeps_clean_batches_and_neutralises_controls():
    clean = ["a", "b c", "日本語"]
    assert clean_lines(clean) is clean  # the common case costs no copy
    out = clean_lines(["x\x1b[31my", "tab\there", "bell\x07", "cr\rlf\nz", "del\x7f\x9b"])
    assert out == ["x\ufffd[31my", "tab here", "bell\ufffd", "cr\ufffdlf\ufffdz", "del\ufffd\ufffd"]


def test_feed_is_bounded_and_marks_what_it_dropped():
    feed = LogFeed(limit=100)
    for i in range(1000):
        feed.add("t", i, [f"l{i}"])
    pending, _, _ = feed.take()
    lines = pending["t"]
    assert len(lines) <= 126
    assert lines[-1] == "l999"
    assert "lines not shown" in lines[0]
    assert feed.take() == ({}, set(), set())
    feed.gap("t", 1000, 1500)
    assert "500 lines not shown (full log: logs/t.log)" in feed.take()[0]["t"][0]


def test_feed_places_markers_at_their_log_position():
    feed = LogFeed()
    feed.add("t", 0, ["a0", "a1"])
    feed.mark("t", 5, "── attempt 2 ──")  # ahead of the stream: waits for lines 2..4
    feed.mark("t", None, "now")  # no position: where the stream stands
    feed.add("t", 2, ["a2", "a3"])
    feed.add("t", 4, ["a4", "b5", "b6"])
    pending, _, marked = feed.take()
    assert pending["t"] == ["a0", "a1", "now", "a2", "a3", "a4", "── attempt 2 ──", "b5", "b6"]
    assert marked == {"t"} and type(pending["t"][6]) is Marker and type(pending["t"][0]) is str
    feed.mark("t", 3, "late")  # its lines already went by: shown now rather than never
    assert feed.take()[0]["t"] == ["late"]


def test_feed_markers_in_a_snapshot_and_across_a_gap():
    feed = LogFeed()
    feed.mark("t", 2, "m2")  # replayed before the snapshot, with positions
    feed.mark("t", 30, "m30")
    feed.mark("t", 50, "m50")
    feed.reset("t", 1, ["l1", "l2", "l3"])  # a snapshot of lines 1..3: m2 goes in, the others wait
    assert feed.take()[0]["t"] == ["l1", "m2", "l2", "l3"]
    feed.gap("t", 4, 40)  # lines 4..39 never came: m30 follows the gap marker
    assert feed.take()[0]["t"][1:] == ["m30"]
    feed.add("t", 40, [f"l{i}" for i in range(40, 60)])
    out = feed.take()[0]["t"]
    assert out.index("m50") == 10


def test_lines_pushed_before_the_snapshot_are_kept_after_it():
    feed = LogFeed()
    feed.add("t", 100, ["l100", "l101"])  # pushed right after the subscribe reply, seen first
    feed.reset("t", 90, [f"l{i}" for i in range(90, 100)])  # the snapshot: lines 90..99
    pending, resets, _ = feed.take()
    assert pending["t"] == [f"l{i}" for i in range(90, 102)] and resets == {"t"}
    feed.add("t", 5, ["old"])  # lines from before the snapshot's end: replaced by it
    feed.reset("t", 0, [f"l{i}" for i in range(10)])
    assert feed.take()[0]["t"] == [f"l{i}" for i in range(10)]


def test_attempt_markers_say_attempt_resume_and_time():
    def fmt(ts: float) -> str:
        return f"t{ts:.0f}"

    assert attempt_marker({"kind": "started", "attempt": 3, "resume": {"step": 50}, "ts": 7}, fmt) == \
        "── attempt 3 · resumed from step 50 · t7 ──"
    assert attempt_marker({"kind": "started", "attempt": 1, "resume": None, "ts": 7}, fmt) == "── attempt 1 · t7 ──"
    assert attempt_marker({"kind": "exited"}, fmt) is None


def test_model_folds_events_with_the_supervisors_reducer():
    snap = fake.normal_run()
    model = RunModel()
    for e in snap["events"]:
        model.on_event(e)  # before any snapshot: timeline only
    model.on_snapshot(snap, resumed=False)
    ev = {"ts": fake.NOW, "seq": 999, "kind": "exited", "component": "trainer", "exit_code": 1, "signal": None,
          "uptime_s": 3.0, "step": 5, "diagnosis": None}
    model.on_event(ev)
    model.on_event({"ts": fake.NOW, "seq": 1000, "kind": "progress", "component": "trainer", "step": 6})
    expected = run_state.apply(fake.normal_run()["state"], ev)
    assert model.state["components"]["trainer"]["last_exit"] == expected["components"]["trainer"]["last_exit"]
    assert model.state["components"]["trainer"]["step"] == 6
    kinds = [e.kind for e in model.timeline]
    assert kinds[-1] == "exited" and "progress" not in kinds  # gauges are not timeline entries
    pending, resets, _ = model.feed.take()
    assert resets == set(fake.COMPONENTS) and len(pending["trainer"]) == 40
    mine = model.view(fake.NOW)
    theirs = run_state.view(model.state, fake.NOW)
    assert mine["components"]["trainer"] == theirs["components"]["trainer"]
    assert mine["run"] == theirs["run"]


# ------------------------------------------------------------------------------ full-run history


def test_metric_history_stays_bounded_and_keeps_the_whole_run():
    h = MetricHistory()
    for step in range(1, 100_001):
        h.add(step, step / 100_000)
    assert len(h.steps) <= HISTORY_POINTS
    assert h.every & (h.every - 1) == 0  # a power of two
    assert sum(h.counts) == 100_000 and h.steps[-1] == 100_000
    assert h.points()[0][0] < h.every  # the first bucket still starts the run
    assert (h.lo, h.hi) == (1e-05, 1.0)
    means = [p[1] for p in h.points()]
    assert means == sorted(means)  # a rising metric still rises


def test_metric_history_rewinds_on_a_resume():
    h = MetricHistory()
    for step in range(1, 11):
        h.add(step, float(step))
    h.add(6, 60.0)  # resumed from step 5: steps 6.. are the new run's
    assert [p[0] for p in h.points()] == [1, 2, 3, 4, 5, 6] and h.points()[-1][1] == 60.0


@pytest.mark.parametrize(("steps_per_s", "typical_bytes"), [(0.5, 300), (10.0, 1_000), (1000.0, 4_000)])
def test_progress_events_are_small_and_the_reducer_rebuilds_the_whole_history(steps_per_s, typical_bytes):
    """Each 4 Hz event carries the points that changed in the last HISTORY_WINDOW_S; folding them
    gives exactly the tracker's own history, also when events are lost now and then (gauges are
    latest-wins), and the run's length does not make events bigger. The fast tier runs a tenth of the
    slowest run's steps: its 160,000 events take half a minute, and 2,000 steps still compact the history
    three times."""
    rnd = random.Random(7)
    t = ProgressTracker()
    state = run_state.initial({}, ["trainer"])
    sizes = []
    now, next_event, lost_last = 0.0, 0.25, False
    steps = examples(20_000) if steps_per_s < 1 else 20_000
    for step in range(1, steps + 1):
        now = step / steps_per_s
        t.observe(Observation(step, steps, {"reward": rnd.random(), "loss": 1 / step}), now=now)
        while next_event <= now:
            lose = not lost_last and rnd.random() < 0.2  # never two in a row: within the window
            if not lose:
                ev = {"kind": "progress", "component": "trainer", "seq": step, **t.snapshot(next_event)}
                sizes.append(len(json.dumps(ev["history"])))
                run_state.apply(state, ev)
            lost_last = lose
            next_event += 0.25
    run_state.apply(state, {"kind": "progress", "component": "trainer", "seq": 10**6, **t.snapshot(now)})
    got = state["components"]["trainer"]["history"]
    for name, h in t.full_history.items():
        assert got[name]["every"] == h.every
        assert [p[0] for p in got[name]["points"]] == h.steps
        assert [p[2] for p in got[name]["points"]] == h.counts
        for (_, mean, _), s, n in zip(got[name]["points"], h.sums, h.counts, strict=True):
            assert abs(mean - s / n) <= 1e-5 * max(1.0, abs(s / n))
    sizes.sort()
    assert sizes[len(sizes) // 2] < typical_bytes  # history bytes in a typical event (a compaction resends it all)
    assert sizes[-1] < 2 * HISTORY_POINTS * 30
    assert len(json.dumps(got)) < HISTORY_METRICS * HISTORY_POINTS * 30  # bounded in the state and snapshots
    assert HISTORY_WINDOW_S >= 0.5  # covers one lost 4 Hz event


def test_merge_history_is_idempotent_and_follows_compaction():
    tail = {"every": 1, "lo": 0.0, "hi": 3.0, "points": [[1, 1.0, 1], [2, 2.0, 1], [3, 3.0, 1]]}
    once = merge_history(None, {"m": tail})
    twice = merge_history(json.loads(json.dumps(once)), {"m": tail})
    assert once == twice
    coarser = {"every": 2, "lo": 0.0, "hi": 4.0, "points": [[4, 3.5, 2]]}
    merged = merge_history(twice, {"m": coarser})
    assert merged["m"]["every"] == 2
    assert merged["m"]["points"] == [[1, 1.0, 1], [3, 2.5, 2], [4, 3.5, 2]] or \
        merged["m"]["points"] == compact_points([[1, 1.0, 1], [2, 2.0, 1], [3, 3.0, 1]], 2)[:-1] + [[4, 3.5, 2]]



def test_a_marker_older_than_every_line_the_pane_holds_has_no_place_in_it():
    """A re-attach to a long log shows its end: attempt 1's marker (log_seq 0) belongs to lines the
    pane never got, so it shows neither above the oldest line held nor at the stream's end."""
    from rlsup.tui.model import LogFeed

    feed = LogFeed()
    feed.mark("w", 0, "── attempt 1")  # replayed before the lines arrive
    feed.add("w", 11_650, ["line 11650", "line 11651"])
    assert feed.take()[0] == {"w": ["line 11650", "line 11651"]}
    feed.mark("w", 0, "── attempt 1")  # or after them
    feed.mark("w", 11_652, "── attempt 2")
    feed.add("w", 11_652, ["line 11652"])
    assert feed.take()[0] == {"w": ["── attempt 2", "line 11652"]}
    snap = LogFeed()
    snap.reset("w", 500, ["line 500"])
    snap.take()
    snap.mark("w", 3, "── attempt 1")
    assert snap.take()[0] == {}
    # A pane that holds the log from its first line keeps attempt 1's marker on top.
    whole = LogFeed()
    whole.mark("w", 0, "── attempt 1")
    whole.add("w", 0, ["line 0"])
    assert whole.take()[0] == {"w": ["── attempt 1", "line 0"]}
