"""The reducer: the same events give the same state on every side."""

from __future__ import annotations

from rlsup.supervisor.records.state import apply, initial, view


def ev(seq, kind, comp=None, ts=None, **kw):
    return {"seq": seq, "ts": ts if ts is not None else float(seq), "kind": kind, "component": comp, **kw}


def test_lifecycle_sequence():
    s = initial({}, ["a"])
    for e in [
        ev(1, "run_started", name="r", components=["a"]),
        ev(2, "started", "a", pid=10, attempt=1, resume=None),
        ev(3, "ready", "a", probe="none"),
        ev(4, "progress", "a", step=5, total=10, rate=1.0, eta_s=5.0),
        ev(5, "exited", "a", exit_code=1, signal=None, uptime_s=3.0, step=5, diagnosis={"category": "unknown"}),
        ev(6, "restart_scheduled", "a", delay_s=2.0, attempt=2, reason="exited with code 1"),
    ]:
        apply(s, e)
    a = s["components"]["a"]
    assert a["state"] == "backoff" and a["restarts"] == 1 and a["pid"] is None
    assert a["last_exit"]["exit_code"] == 1 and a["step"] == 5 and a["next_start_at"] == 8.0
    apply(s, ev(7, "started", "a", pid=11, attempt=2, resume={"step": 3, "checkpoint": "/c"}))
    assert a["state"] == "starting" and a["step"] == 3 and a["attempt"] == 2
    apply(s, ev(8, "flag", "a", type="stall", message="m", evidence=[], action="none"))
    apply(s, ev(9, "flag", "a", type="stall", message="m2", evidence=[], action="none"))
    assert [f["message"] for f in a["flags"]] == ["m2"]
    apply(s, ev(10, "flag_cleared", "a", type="stall"))
    assert a["flags"] == []
    apply(s, ev(11, "fatal", "a", reason="gave up"))
    assert a["state"] == "fatal" and a["reason"] == "gave up" and s["seq"] == 11


def test_view_derives_uptime():
    s = initial({}, ["a"])
    apply(s, ev(1, "run_started", ts=100.0, components=["a"]))
    apply(s, ev(2, "started", "a", ts=110.0, pid=1, attempt=1))
    v = view(s, now=115.0)
    assert v["components"]["a"]["uptime_s"] == 5.0 and v["run"]["uptime_s"] == 15.0
    assert "uptime_s" not in s["components"]["a"]  # the state itself is untouched


def test_resources_are_for_live_processes_only():
    s = initial({}, ["a", "b"])
    apply(s, ev(1, "run_started", name="r", components=["a", "b"]))
    apply(s, ev(2, "started", "a", pid=10, attempt=1, resume=None))
    apply(s, ev(3, "resources", components={"a": {"cpu_pct": 33.0, "rss_mb": 236.0, "gpu_mb": None},
                                            "b": {"cpu_pct": 1.0, "rss_mb": 9.0, "gpu_mb": None}}))
    assert s["components"]["a"]["resources"]["rss_mb"] == 236.0
    assert s["components"]["b"]["resources"] is None  # never started: no figures to show
    for last in ("stopped", "completed", "fatal", "exited"):
        apply(s, ev(4, "started", "a", pid=10, attempt=1, resume=None))
        apply(s, ev(5, "resources", components={"a": {"cpu_pct": 33.0, "rss_mb": 236.0, "gpu_mb": None}}))
        apply(s, ev(6, last, "a", exit_code=0, signal=None, uptime_s=1.0, step=None, diagnosis=None))
        assert s["components"]["a"]["resources"] is None, last  # the last sample is not the stopped process's


def test_view_shows_the_rate_and_eta_as_they_stand_now():
    """`rlsup status` and the fleet print this view: a trainer with no new step for minutes shows no
    rate and no ETA, not its last "3.27/s ETA 49s" (the TUI applies the same rule on every repaint)."""
    s = initial({}, ["trainer"])
    apply(s, ev(1, "started", "trainer", pid=10, attempt=1, resume=None, ts=1000.0))
    apply(s, ev(2, "ready", "trainer", probe="none", ts=1000.0))
    apply(s, ev(3, "progress", "trainer", step=340, total=500, rate=3.27, eta_s=49.0, last_step_at=1000.0))
    assert (view(s, 1002.0)["components"]["trainer"]["rate"], view(s, 1002.0)["components"]["trainer"]["eta_s"]) \
        == (3.27, 49.0)
    slow = view(s, 1020.0)["components"]["trainer"]
    assert slow["rate"] == 1 / 20 and slow["eta_s"] == 160 * 20
    hung = view(s, 1000.0 + 180)["components"]["trainer"]
    assert hung["rate"] is None and hung["eta_s"] is None
    assert s["components"]["trainer"]["rate"] == 3.27  # the state itself is not changed


def test_status_text_and_fleet_json_of_a_hung_trainer_show_no_stale_rate():
    from rlsup.supervisor.client.fleet import PodSpec, PodState
    from rlsup.supervisor.render.status import format_status

    s = initial({}, ["trainer"])
    apply(s, ev(1, "run_started", name="r", components=["trainer"], ts=1000.0))
    apply(s, ev(2, "started", "trainer", pid=10, attempt=1, resume=None, ts=1000.0))
    apply(s, ev(3, "ready", "trainer", probe="none", ts=1000.0))
    apply(s, ev(4, "progress", "trainer", step=340, total=500, rate=3.27, eta_s=49.0, last_step_at=1000.0))
    text = format_status(view(s, 1000.0 + 300))
    assert "3.27" not in text and "49s" not in text
    pod = PodState(PodSpec(host="h", label="p"))
    pod.on_snapshot({"state": s}, False)
    trainer = pod.to_json(1000.0 + 300)["components"]["trainer"]
    assert trainer["rate"] is None and trainer["eta_s"] is None and trainer["step"] == 340


def test_records_and_dicts_fold_the_same():
    """The reducer matches on classes: a record parsed at the edge and the dict it came from give one state."""
    from rlsup.supervisor.records.events import parse

    evs = [ev(1, "run_started", name="r", components=["a"]), ev(2, "started", "a", pid=10, attempt=1, log_seq=0),
           ev(3, "teleported", "b", to="mars"), ev(4, "exited", "a", exit_code=1, signal=None, uptime_s=2.0),
           ev(5, "command", "c", command="restart")]
    s1, s2 = initial({}, ["a"]), initial({}, ["a"])
    for e in evs:
        apply(s1, e)
        apply(s2, parse(e))
    assert s1 == s2
    assert set(s1["components"]) == {"a", "b", "c"} and s1["seq"] == 5  # any named component is known
    assert s1["components"]["a"]["attempt_log"] == {"seq": 0, "offset": None, "ino": None}
