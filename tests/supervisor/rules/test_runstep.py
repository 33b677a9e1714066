"""The run's step (detectors) and the typed causes the lifecycle copies into the journal (issue 26, items 2-3).

Pure functions with a fake clock: no process, no loop, no sleep. Each run-level rule that moved out of
`Run` (restart_with, dependency_down's state, remedy and words, the stall judgement and its evidence,
the cause of a first start) has its test here; so does every place a cause ends up in an event.
"""

from __future__ import annotations

import dataclasses

from test_lifecycle import Sim, rules

from rlsup.supervisor.config.loader import load_config
from rlsup.supervisor.rules import detectors, runstep
from rlsup.supervisor.rules import lifecycle as lc
from rlsup.supervisor.rules.detectors import Seen
from rlsup.supervisor.rules.runstep import View


def _cfg(text: str):
    import tempfile
    from pathlib import Path

    d = Path(tempfile.mkdtemp(prefix="rlsup-runstep-"))
    (d / "run.yaml").write_text(text)
    return load_config(str(d / "run.yaml"))


CFG = """
components:
  inference: {command: sleep 1}
  orchestrator: {command: sleep 1, depends_on: {inference: ready}, restart_with: [inference]}
  trainer: {command: sleep 1, depends_on: [orchestrator]}
"""


# ---------------------------------------------------------------------- restart_with


def test_restart_with_follows_a_leader_restart_with_the_leaders_cause():
    cfg = _cfg(CFG)
    seen = {"inference": Seen("inference", "backoff", 1), "orchestrator": Seen("orchestrator", "running", 1),
            "trainer": Seen("trainer", "running", 1)}
    trigger = detectors.restart_trigger({"kind": "restart_scheduled", "component": "inference", "seq": 41,
                                         "reason": "exit 1", "cause": {"by": "exit", "reason": "exit 1: CUDA error"}})
    assert trigger == lc.Cause("exit", "exit 1: CUDA error", seq=41)
    out = detectors.followers(cfg, seen, "inference", trigger)
    assert [n for n, _ in out] == ["orchestrator"]  # the trainer does not follow the inference server
    inp = out[0][1]
    assert isinstance(inp, lc.Restart) and inp.by == "restart_with inference"
    assert inp.cause.by == "dependency" and inp.cause.component == "inference" and inp.cause.seq == 41
    assert "exit 1: CUDA error" in inp.cause.reason


def test_restart_with_leaves_a_follower_that_is_not_running_alone():
    cfg = _cfg(CFG)
    for state in ("backoff", "pending", "stopped", "fatal", "completed", "stopping"):
        seen = {"inference": Seen("inference", "running", 1), "orchestrator": Seen("orchestrator", state, 1),
                "trainer": Seen("trainer", "running", 1)}
        assert detectors.followers(cfg, seen, "inference", lc.Cause("user", "restart")) == []


def test_only_restart_scheduled_events_trigger_followers():
    assert detectors.restart_trigger({"kind": "exited", "component": "x", "seq": 3}) is None
    assert detectors.restart_trigger({"kind": "restart_scheduled", "component": None, "seq": 3}) is None


# ---------------------------------------------------------------------- dependency_down


def test_a_dependency_counts_as_back_only_after_staying_up():
    now = 1000.0
    up = Seen("inference", "running", 2, ready_at=now - 5)
    assert detectors.dependency_state(up, now) == "starting"
    assert detectors.dependency_state(Seen("inference", "running", 2, ready_at=now - 10.5), now) == "running"
    assert detectors.dependency_state(Seen("inference", "backoff", 2), now) == "backoff"


def test_deterministic_failure_is_read_from_the_typed_cause_not_the_words():
    assert detectors.deterministic(Seen("inference", "fatal", 3, gave_up_by="pattern"))
    # A reason that merely starts with a pattern's name is not a crash pattern (the old prefix test was).
    assert not detectors.deterministic(Seen("inference", "fatal", 3, reason="repeated_error: ...", gave_up_by="exit"))
    assert not detectors.deterministic(Seen("inference", "stopped", 3, gave_up_by="pattern"))


def test_dependency_down_restarts_a_dead_dependency_unless_it_fails_deterministically():
    start = detectors.restart_dependency(Seen("inference", "fatal", 3, gave_up_by="exit"), ["trainer"], 77)
    assert isinstance(start, lc.Start) and start.by == "rlsup (dependency_down)"
    assert start.cause.by == "dependency" and start.cause.seq == 77 and "trainer cannot reach inference" in \
        start.cause.reason
    assert detectors.restart_dependency(Seen("inference", "fatal", 3, gave_up_by="pattern"), ["trainer"], 1) is None
    assert detectors.restart_dependency(Seen("inference", "stopped", 3), ["trainer"], 1) is None
    assert detectors.restart_dependency(Seen("inference", "backoff", 3), ["trainer"], 1) is None
    assert detectors.restart_dependency(Seen("inference", "completed", 1), ["trainer"], 1) is not None


def test_dependency_down_words_say_what_rlsup_does():
    act = detectors.dependency_action("trainer", Seen("inference", "fatal", 3, gave_up_by="pattern"), 600)
    assert act.startswith("not restarting inference (it fails deterministically")
    assert "trainer is stopped if inference is not back within 600s" in act
    assert detectors.dependency_action("trainer", Seen("inference", "fatal", 3), 60).startswith(
        "restarting inference, not trainer")
    assert "stopped by hand" in detectors.dependency_action("trainer", Seen("inference", "stopped", 3), 60)
    assert "is restarting (backoff)" in detectors.dependency_action("trainer", Seen("inference", "backoff", 3), 60)


def test_dependency_down_past_its_budget_stops_the_consumers_with_the_dependency_as_cause():
    out = detectors.stop_consumers("inference", ["orchestrator", "trainer"], 300, 90)
    assert [n for n, _ in out] == ["orchestrator", "trainer"]
    stop = out[0][1]
    assert stop.by == "dependency_down" and stop.cause == lc.Cause(
        "dependency", "dependency_down: inference has been down for 300s", seq=90, component="inference")


# ---------------------------------------------------------------------- stalls


def test_stall_judgement_and_its_evidence_with_a_fake_clock():
    c = Seen("trainer", "running", 2, started_at=100.0, ready_at=101.0, last_step_at=150.0, step=57)
    assert detectors.stalled(c, 60, 200.0, awake_since=0.0) is None  # 50 s: not yet
    assert detectors.stalled(c, 60, 215.0, awake_since=0.0) == 65.0
    assert detectors.stalled(c, 60, 215.0, awake_since=180.0) is None  # we were paused: not its fault
    ev = detectors.stall_evidence("Step 57/100", 57, {"inference": "running"},
                                  [("ckpt", "trainer", {"step": 50, "mtime": 1000.0})], 1030.0)
    assert ev == ("last line: Step 57/100", "inference is running", "newest in ckpt (trainer): step 50, written 30s ago")
    assert detectors.stall_evidence(None, None, {}, [], 0.0) == ("no output yet from this attempt",)
    inp = detectors.stall_input(c, 60, 65.0, ev)
    assert inp.message == "no new step for 65s (last step 57, stall_after 60s)" and inp.evidence == ev


def test_a_stall_restart_carries_a_stall_cause_pointing_at_its_flag():
    s = Sim(rules(on_stall="restart"))
    s.start()
    s.feed(lc.Stalled("no new step for 65s", ("last line: x",)))
    stopping = s.events("stopping")[-1]
    assert stopping.cause.to_dict() == {"by": "stall", "reason": "no new step for 65s", "seq": None, "of": "flag"}
    s.exit(None, after=1.0)
    assert s.events("restart_scheduled")[-1].cause.by == "stall"
    s.feed(lc.BackoffElapsed(s.life.timer))
    s.feed(lc.DepsMet())
    s.feed(lc.Spawned(11, ("cmd",)))
    assert s.events("started")[-1].cause.by == "stall"


# ---------------------------------------------------------------------- first starts and causes in events


def test_a_first_start_says_the_run_started_it_once_its_dependencies_were_met():
    cfg = _cfg(CFG)
    seen = {"inference": Seen("inference", "running", 1), "orchestrator": Seen("orchestrator", "pending"),
            "trainer": Seen("trainer", "pending")}
    assert detectors.gate_cause("inference", cfg, seen, 1) == lc.Cause("run", "started with the run (no dependencies)",
                                                                       seq=1)
    why = detectors.gate_cause("orchestrator", cfg, seen, 1)
    assert why.by == "run" and "inference ready" in why.reason
    again = detectors.gate_cause("orchestrator", cfg, seen, 1, again=True)
    assert again.reason.startswith("started again with the resumed run (it had completed; its config changed")
    assert "inference ready" in again.reason
    s = Sim()
    s.feed(lc.DepsMet(why))
    s.feed(lc.Spawned(5, ("cmd",)))
    assert s.events("started")[-1].cause.to_dict() == why.to_dict()


def test_an_exit_is_the_cause_of_the_restart_and_of_the_next_start():
    s = Sim()
    s.start()
    s.exit(1)
    rs = s.events("restart_scheduled")[-1]
    assert rs.cause.to_dict() == {"by": "exit", "reason": "exit 1: boom", "seq": None, "of": "exited"}
    # The driver fills the seq of the exit in (fill_seqs): the next start carries it.
    s.life = lc.fill_seqs(s.life, {"exited": 12})
    s.feed(lc.BackoffElapsed(s.life.timer))
    s.feed(lc.DepsMet(lc.Cause("run", "ignored: not a first start")))
    s.feed(lc.Spawned(11, ("cmd",)))
    assert s.events("started")[-1].cause.to_dict() == {"by": "exit", "reason": "exit 1: boom", "seq": 12}


def test_a_user_restart_is_the_cause_of_the_stop_and_of_the_next_start():
    s = Sim()
    s.start()
    why = lc.Cause("user", "`rlsup restart trainer` from user via cli", seq=30)
    s.feed(lc.Restart("user", reason="restart requested by user", cause=why))
    assert s.events("stopping")[-1].cause.to_dict() == why.to_dict()
    s.exit(None, after=1.0)
    s.feed(lc.Spawned(12, ("cmd",)))
    assert s.events("started")[-1].cause.to_dict() == why.to_dict()


def test_a_crash_pattern_is_the_cause_of_fatal_and_fatal_cause_keeps_its_meaning():
    s = Sim()
    for _ in range(2):
        s.start()
        s.exit(1)
        if s.life.state == "backoff":
            s.feed(lc.BackoffElapsed(s.life.timer))
    fatal = s.events("fatal")[-1]
    assert fatal.why.by == "pattern" and fatal.why.reason.startswith("repeated_error")
    assert fatal.cause is None  # `fatal.cause` stays the dependency's name (0.2), None here
    assert s.life.gave_up is not None and s.life.gave_up.by == "pattern"
    s2 = Sim()
    s2.feed(lc.DepsBlocked("dependency inference is fatal; trainer never started", "inference"))
    f2 = s2.events("fatal")[-1]
    assert f2.cause == "inference" and f2.why.by == "dependency" and f2.why.component == "inference"


def test_a_probe_failure_is_the_cause_of_its_restart():
    s = Sim(rules(ready_probe="http http://x", alive=True))
    s.start()
    s.feed(lc.LivenessFailed("liveness probe failed 3 times (refused)"))
    assert s.events("stopping")[-1].cause.by == "probe"
    s.exit(None, after=1.0)
    assert s.events("restart_scheduled")[-1].cause.by == "probe"


def test_a_shutdown_is_the_cause_of_its_stop():
    s = Sim()
    s.start()
    s.feed(lc.Shutdown(lc.Cause("shutdown", "stopped by user (cli)", seq=99)))
    assert s.events("stopping")[-1].cause.to_dict() == {"by": "shutdown", "reason": "stopped by user (cli)", "seq": 99}


def test_consumers_failing_flags_once_the_dependency_stays_down_and_clears_when_it_is_back():
    now = 500.0
    refused = ("ConnectionRefusedError: [Errno 111] Connection refused",)
    trainer = detectors.Consumer("trainer", "running", ("inference",), "", lambda: refused)
    seen = {"inference": Seen("inference", "backoff", 2), "trainer": Seen("trainer", "running", 1)}
    kw = dict(down_since={"inference": now - 5}, budget=600, flag_after_s=15)
    failing, events, flagged = detectors.consumers_failing([trainer], seen, now, flagged=frozenset(),
                                                           down_for={"inference": 5.0}, **kw)
    assert failing == {"inference": ["trainer"]} and events == [] and flagged == frozenset()  # 5 s: not yet news
    failing, events, flagged = detectors.consumers_failing([trainer], seen, now, flagged=frozenset(),
                                                           down_for={"inference": 20.0}, **kw)
    assert [(e.kind, e.type) for e in events] == [("flag", "dependency_down")] and flagged == {"trainer"}
    assert "is restarting (backoff)" in events[0].action
    again = detectors.consumers_failing([trainer], seen, now, flagged=flagged, down_for={"inference": 30.0}, **kw)
    assert again[1] == []  # once
    back = {"inference": Seen("inference", "running", 3, ready_at=now - 60), "trainer": seen["trainer"]}
    _f, events, flagged = detectors.consumers_failing([trainer], back, now, flagged=flagged, down_for={}, **kw)
    assert [(e.kind, e.type) for e in events] == [("flag_cleared", "dependency_down")] and flagged == frozenset()
    # Lines that say nothing about a connection: not this flag's business.
    quiet = detectors.Consumer("trainer", "running", ("inference",), "", lambda: ("Step 5/10",))
    assert detectors.consumers_failing([quiet], seen, now, flagged=frozenset(), down_for={"inference": 99.0},
                                       **kw)[0] == {}


def test_a_dependency_done_with_its_work_is_not_down():
    """RLSUP_SIM_SEED=202: a one-shot `prep` the orchestrator needed only started had completed; when a person
    stopped the inference server, the orchestrator's refused connections were laid on prep too, rlsup restarted
    the completed prep for them and later flagged it down past the budget (RLSUP_SIM_SEED=204: the same with prep
    needed ready). A dependency that completed is done where it is needed only started or completed, or where it
    completed before the consumer's attempt began; a server that exits 0 under its running consumer is down."""
    now = 500.0
    refused = ("ConnectionRefusedError: [Errno 111] Connection refused",)
    seen = {"inference": Seen("inference", "stopped", 1), "prep": Seen("prep", "completed", 1),
            "orchestrator": Seen("orchestrator", "running", 1)}
    orch = detectors.Consumer("orchestrator", "running", ("inference", "prep"), "", lambda: refused,
                              ends_ok=frozenset({"prep"}))
    kw = dict(down_since={"inference": now - 30}, budget=600, flag_after_s=15, down_for={"inference": 30.0})
    failing, events, _ = detectors.consumers_failing([orch], seen, now, flagged=frozenset(), **kw)
    assert failing == {"inference": ["orchestrator"]}
    assert "prep" not in events[0].message, events[0].message
    # needed ready (a server), it is down if it ended while the consumer's attempt ran, done if it had ended before
    server = dataclasses.replace(orch, ends_ok=frozenset())
    seen["orchestrator"] = Seen("orchestrator", "running", 1, started_at=100.0)
    seen["prep"] = Seen("prep", "completed", 1, ended_at=200.0)
    assert detectors.consumers_failing([server], seen, now, flagged=frozenset(), **kw)[0] == {
        "inference": ["orchestrator"], "prep": ["orchestrator"]}
    for before in (Seen("prep", "completed", 1, ended_at=90.0), Seen("prep", "completed", 1)):  # (None: a run ago)
        seen["prep"] = before
        assert detectors.consumers_failing([server], seen, now, flagged=frozenset(), **kw)[0] == {
            "inference": ["orchestrator"]}


def test_partner_up_only_for_a_mutual_restart_with_pair_that_started_again():
    from rlsup.supervisor.rules.detectors import partner_up

    comps = {"trainer": (["orchestrator"], "backoff"), "orchestrator": (["trainer"], "running"),
             "inference": ([], "running")}
    assert partner_up("trainer", comps) == "orchestrator"
    assert partner_up("trainer", {**comps, "orchestrator": (["trainer"], "backoff")}) is None  # not started yet
    assert partner_up("trainer", {**comps, "orchestrator": ([], "running")}) is None  # not mutual
    assert partner_up("inference", comps) is None


# ---------------------------------------------------------------------- the run's step (runstep.step)
# Every run-level rule through the one function the run calls: a view, a trigger, a time, the config.


def _seen(**states):
    return {n: (s if isinstance(s, Seen) else Seen(n, s, 1)) for n, s in states.items()}


def test_step_restart_scheduled_takes_the_restart_with_followers_along():
    cfg = _cfg(CFG)
    view = View(_seen(inference="backoff", orchestrator="running", trainer="running"))
    e = {"kind": "restart_scheduled", "component": "inference", "seq": 41, "cause": {"by": "exit", "reason": "exit 1"}}
    out = runstep.step(view, runstep.Restarted(e), 0.0, cfg)
    assert [(f.component, type(f.input)) for f in out] == [("orchestrator", lc.Restart)]
    assert out[0].input.cause.seq == 41 and out[0].input.cause.component == "inference"
    assert runstep.step(view, runstep.Restarted({"kind": "exited", "component": "inference"}), 0.0, cfg) == ()


def test_step_a_restart_command_without_a_cause_is_the_users():
    cfg = _cfg(CFG)
    view = View(_seen(inference="running", orchestrator="running", trainer="running"))
    (feed,) = runstep.step(view, runstep.RestartCommand("inference"), 0.0, cfg)
    assert feed.component == "orchestrator" and "user: inference was restarted" in feed.input.cause.reason


def test_step_a_pending_component_starts_with_the_run_as_cause_and_never_while_shutting_down():
    cfg = _cfg(CFG)
    seen = _seen(inference="running", orchestrator="pending", trainer="pending")
    (feed,) = runstep.step(View(seen, run_seq=3), runstep.Pending("orchestrator"), 0.0, cfg)
    assert isinstance(feed.input, lc.DepsMet) and feed.input.cause == lc.Cause(
        "run", "started with the run once its dependencies were met (inference ready)", seq=3)
    (wait,) = runstep.step(View(seen), runstep.Pending("trainer"), 0.0, cfg)
    assert isinstance(wait.input, lc.DepsWaiting)
    (again,) = runstep.step(View(seen, run_seq=3), runstep.Pending("inference", again=True), 0.0, cfg)
    assert again.input.cause.reason.startswith("started again with the resumed run")
    assert runstep.step(View(seen, shutting_down=True), runstep.Pending("orchestrator"), 0.0, cfg) == ()


def test_step_the_end_is_decided_once_and_names_its_root():
    cfg = _cfg(CFG)
    seen = _seen(inference=Seen("inference", "fatal", 2, reason="exit 1", ended_at=10.0),
                 orchestrator=Seen("orchestrator", "fatal", 0, cause="inference", ended_at=11.0),
                 trainer=Seen("trainer", "fatal", 0, cause="orchestrator", ended_at=12.0))
    (end,) = runstep.step(View(seen), runstep.Settled(), 20.0, cfg)
    assert end.outcome.exit_code == 1 and end.outcome.root == "inference"
    assert runstep.step(View(seen, ended=True), runstep.Settled(), 20.0, cfg) == ()
    assert runstep.step(View(seen, shutting_down=True), runstep.Settled(), 20.0, cfg) == ()
    going = _seen(inference="running", orchestrator="running", trainer="running")
    assert runstep.step(View(going), runstep.Settled(), 20.0, cfg) == ()


def _stall_view(step_at: float, stalled: bool = False, caught_up: bool = False) -> View:
    seen = {"trainer": Seen("trainer", "running", 2, started_at=100.0, ready_at=101.0, last_step_at=step_at, step=57)}
    w = runstep.StallView(60.0, stalled, deps={"inference": "running"},
                           watches=[("ckpt", "trainer", {"step": 50, "mtime": 1000.0})], last_line=lambda: "Step 57")
    return View(seen, stall={"trainer": w}, caught_up=caught_up, wall_time=1030.0)


def test_step_a_stall_is_called_only_after_the_logs_were_read_and_says_its_evidence():
    cfg = _cfg(CFG)
    assert runstep.step(_stall_view(150.0), runstep.StallTick(), 200.0, cfg) == ()  # 50 s: not yet
    assert runstep.step(_stall_view(150.0), runstep.StallTick(), 215.0, cfg) == (runstep.CatchUp(),)
    (feed,) = runstep.step(_stall_view(150.0, caught_up=True), runstep.StallTick(), 215.0, cfg)
    assert isinstance(feed.input, lc.Stalled) and feed.input.message.startswith("no new step for 65s")
    assert feed.input.evidence == ("last line: Step 57", "inference is running",
                                   "newest in ckpt (trainer): step 50, written 30s ago")
    # The steps read while catching up were new: no stall.
    assert runstep.step(_stall_view(210.0, caught_up=True), runstep.StallTick(), 215.0, cfg) == ()


def test_step_a_stall_under_way_is_fed_again_without_reading_and_ends_with_progress():
    cfg = _cfg(CFG)
    (feed,) = runstep.step(_stall_view(150.0, stalled=True), runstep.StallTick(), 300.0, cfg)
    assert isinstance(feed.input, lc.Stalled)
    (un,) = runstep.step(_stall_view(290.0, stalled=True), runstep.StallTick(), 300.0, cfg)
    assert un.input == lc.Unstalled("progress again at step 57")
    # A pause of the supervisor itself is not the component's fault.
    paused = dataclasses.replace(_stall_view(150.0, caught_up=True), awake_since=280.0)
    assert runstep.step(paused, runstep.StallTick(), 300.0, cfg) == ()


def _dep_view(dep: Seen, down_for: float, flagged: frozenset[str] = frozenset()) -> View:
    refused = ("ConnectionRefusedError: [Errno 111] Connection refused",)
    trainer = detectors.Consumer("orchestrator", "running", ("inference",), "", lambda: refused)
    seen = {"inference": dep, "orchestrator": Seen("orchestrator", "running", 1), "trainer": Seen("trainer", "running", 1)}
    return View(seen, consumers=[trainer], flagged=flagged, down_since={"inference": 500.0 - down_for},
                down_for={"inference": down_for})


def test_step_dependency_tick_flags_the_consumer_and_shows_the_dependency_to_the_watch():
    cfg = _cfg(CFG)
    out = runstep.step(_dep_view(Seen("inference", "fatal", 3), 20.0), runstep.DependencyTick(), 500.0, cfg)
    assert out[0] == runstep.Flagged(frozenset({"orchestrator"}))
    assert isinstance(out[1], runstep.Say) and out[1].event.type == "dependency_down"
    assert out[2] == runstep.Track("inference", True, ("orchestrator",))
    # Nothing depends on anything down and nothing is flagged: nothing to do.
    assert runstep.step(View(_seen(inference="running")), runstep.DependencyTick(), 500.0, cfg) == ()


def test_step_dependency_verdict_restarts_the_dependency_with_the_commands_seq_as_cause():
    cfg = _cfg(CFG)
    view = _dep_view(Seen("inference", "fatal", 3, gave_up_by="exit"), 20.0)
    (say,) = runstep.step(view, runstep.DependencyVerdict("inference", "restart_dependency", ("orchestrator",)),
                          500.0, cfg)
    assert say.event.kind == "command" and say.event.client == "dependency_down"
    (feed,) = say.then
    assert feed.component == "inference" and isinstance(feed.input, lc.Start) and feed.input.cause.seq is None
    assert runstep.with_seq(feed.input, 88).cause.seq == 88  # the run fills in the command's seq
    deterministic = _dep_view(Seen("inference", "fatal", 3, gave_up_by="pattern"), 20.0)
    assert runstep.step(deterministic, runstep.DependencyVerdict("inference", "restart_dependency", ("orchestrator",)),
                        500.0, cfg) == ()


def test_step_dependency_verdict_past_the_budget_stops_only_active_consumers():
    cfg = _cfg(CFG)
    view = _dep_view(Seen("inference", "backoff", 3), 700.0)
    view = dataclasses.replace(view, seen={**view.seen, "trainer": Seen("trainer", "stopped", 1)})
    (say,) = runstep.step(view, runstep.DependencyVerdict("inference", "stop_consumers", ("orchestrator", "trainer")),
                          1200.0, cfg)
    assert say.event.type == "dependency_down" and "stopping orchestrator instead" in say.event.message
    assert [(f.component, type(f.input)) for f in say.then] == [("orchestrator", lc.Stop)]
    assert runstep.with_seq(say.then[0].input, 7).cause.seq == 7
    assert runstep.step(view, runstep.DependencyVerdict("inference", None), 1200.0, cfg) == ()


def test_step_dependency_verdict_acts_on_nothing_while_the_run_shuts_down():
    """No start command for a dead dependency and no budget flag once the run's end is under way (the lifecycle
    would refuse the start, but the journal would say rlsup asked for it)."""
    cfg = _cfg(CFG)
    view = _dep_view(Seen("inference", "fatal", 3, gave_up_by="exit"), 700.0)
    for act in ("restart_dependency", "stop_consumers"):
        verdict = runstep.DependencyVerdict("inference", act, ("orchestrator",))
        assert runstep.step(view, verdict, 1200.0, cfg)  # a run going on acts
        assert runstep.step(dataclasses.replace(view, shutting_down=True), verdict, 1200.0, cfg) == ()
        assert runstep.step(dataclasses.replace(view, ended=True), verdict, 1200.0, cfg) == ()


def test_shutdown_order_stops_dependents_first():
    from rlsup.supervisor.run.shutdown import StopOrder

    cfg = _cfg(CFG)
    order = StopOrder(cfg, cfg.components)
    assert order.first == ["trainer"]
    assert order.quiet("trainer") == ["orchestrator"]
    assert order.quiet("orchestrator") == ["inference"]
    assert order.quiet("inference") == []


def test_a_resumed_run_starts_again_what_failed_and_what_completed_under_another_config():
    from rlsup.supervisor.run import carryover

    cfg = _cfg(CFG)
    life, again = carryover.life("trainer", {"state": "completed", "attempt": 2, "config_hash": "old"}, cfg, "resumed")
    assert life.state == "pending" and again == 2
    same = cfg.components["trainer"].fingerprint(cfg.env)
    life, again = carryover.life("trainer", {"state": "completed", "attempt": 2, "config_hash": same}, cfg, "resumed")
    assert life.state == "completed" and again is None
    life, _ = carryover.life("trainer", {"state": "fatal", "attempt": 2}, cfg, "resumed")
    assert life.state == "pending"
    life, _ = carryover.life("trainer", {"state": "stopped", "attempt": 1, "flags": [{"type": "stall"}]}, cfg,
                             "adopted")
    assert life.state == "stopped" and life.want == "stop" and "stall" in life.episode
    assert carryover.how(True, True, "new") == "adopted" and carryover.how(False, True, "new") == "continued"
    assert carryover.how(False, True, "resumed") == "resumed" and carryover.how(False, False, "new") == "new"


# ---------------------------------------------------------------------- issue 38: dependencies that completed


def test_a_dependency_that_started_and_completed_has_started():
    cfg = _cfg("""
components:
  prep: {command: "true"}
  a: {command: sleep 1, depends_on: {prep: started}}
  b: {command: sleep 1, depends_on: [prep]}
  c: {command: sleep 1, depends_on: {prep: ready}}
""")
    seen = {"prep": Seen("prep", "completed", 1, was_ready=True), "a": Seen("a", "pending"),
            "b": Seen("b", "pending"), "c": Seen("c", "pending")}
    for n in ("a", "b", "c"):
        assert isinstance(detectors.gate(n, cfg, seen), lc.DepsMet), n
    seen["prep"] = Seen("prep", "completed", 1, was_ready=False)
    blocked = detectors.gate("c", cfg, seen)
    assert isinstance(blocked, lc.DepsBlocked) and "completed without ever becoming ready" in blocked.reason


def test_an_exit_0_or_a_sigterm_death_is_held_a_moment_unless_the_run_is_stopping():
    assert detectors.exit_hold(0, None, shutting_down=False) == detectors.EXIT_HOLD_S > 0
    assert detectors.exit_hold(0, None, shutting_down=True) == 0
    assert detectors.exit_hold(1, None, shutting_down=False) == 0
    assert detectors.exit_hold(None, "SIGKILL", shutting_down=False) == 0
    # the platform's SIGTERM reaches every process at once: seen first, a death by it is no failure to restart
    assert detectors.exit_hold(None, "SIGTERM", shutting_down=False) == detectors.EXIT_HOLD_S
    assert detectors.exit_hold(143, None, shutting_down=False) == detectors.EXIT_HOLD_S
    assert detectors.exit_hold(143, None, shutting_down=True) == 0
    # rlsup's own SIGTERM (a failed liveness probe): a failure, judged at once
    assert detectors.exit_hold(None, "SIGTERM", shutting_down=False, forced=True) == 0


def test_a_run_with_nothing_left_but_stopped_components_is_stopped_not_completed():
    cfg = _cfg("""
components:
  a: {command: "true"}
  b: {command: "true"}
""")
    out = detectors.outcome(cfg, {"a": Seen("a", "completed", 1), "b": Seen("b", "stopped", 1)})
    assert out is not None and out.how == "stopped" and "b stopped" in out.reason
    out = detectors.outcome(cfg, {"a": Seen("a", "completed", 1), "b": Seen("b", "completed", 1)})
    assert out is not None and out.how == "completed" and out.reason == "every component completed"
