"""The TUI's pure parts: text helpers, the pending-line feed and the client-side state fold."""

from __future__ import annotations

import fake

from rlsup.supervisor import state as run_state
from rlsup.tui.format import clean_lines, fmt_dur, fmt_rate, sparkline
from rlsup.tui.model import LogFeed, RunModel


def test_sparkline_scales_between_min_and_max():
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7], 8) == "▁▂▃▄▅▆▇█"
    assert sparkline([1, 2, 3], 2) == "▁█"  # only the last `width` values
    assert sparkline([5, 5, 5], 10) == "▅▅▅"
    assert sparkline([None, 1.0, float("nan"), 2.0], 4) == " ▁ █"
    assert sparkline([], 5) == "" and sparkline([1, 2], 0) == ""


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
    pending, _ = feed.take()
    lines = pending["t"]
    assert len(lines) <= 126
    assert lines[-1] == "l999"
    assert "lines not shown" in lines[0]
    assert feed.take() == ({}, set())
    feed.gap("t", 1000, 1500)
    assert "500 lines not shown (full log: logs/t.log)" in feed.take()[0]["t"][0]


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
    kinds = [e["kind"] for e in model.timeline]
    assert kinds[-1] == "exited" and "progress" not in kinds  # gauges are not timeline entries
    pending, resets = model.feed.take()
    assert resets == set(fake.COMPONENTS) and len(pending["trainer"]) == 40
