"""The lifecycle transition function, to the letter, with a fake clock (no process, no loop, no sleep)."""

from __future__ import annotations

from rlsup.supervisor.config.model import RestartCfg
from rlsup.supervisor.records.diagnosis import Diagnosis
from rlsup.supervisor.rules import lifecycle as lc

NO_DIAG = {"category": "none", "summary": "", "evidence": []}


def rules(**kw):
    restart = RestartCfg.model_validate(kw.pop("restart", {"backoff": {"initial": 1, "jitter": 0}}))
    return lc.Rules(restart=restart, **kw)


class Sim:
    """Feeds inputs to one component's lifecycle at fake monotonic times and keeps what came out."""

    def __init__(self, r: lc.Rules | None = None, name: str = "trainer"):
        self.rules = r or rules()
        self.life = lc.Life(name)
        self.now = 100.0
        self.effects: list[lc.Effect] = []

    def feed(self, inp, *, after: float = 0.0):
        self.now += after
        self.life, fx = lc.step(self.life, inp, self.now, self.rules)
        self.effects += fx
        return fx

    def events(self, kind=None):
        return [e.event for e in self.effects if isinstance(e, lc.Emit) and (kind is None or e.event.kind == kind)]

    def start(self, pid: int = 10, *, ready: bool = True):
        self.feed(lc.DepsMet())
        self.feed(lc.Spawned(pid, ("cmd",)))
        if ready and self.rules.ready_probe is not None:
            self.feed(lc.Ready())

    def exit(self, code=1, *, after=1.0, step=None, total=None, diag=None):
        diag = diag or {"category": "python_exception", "summary": "boom", "exception": "ValueError",
                        "location": "t.py:3", "evidence": ["ValueError: boom"]}
        return self.feed(lc.Exited(code, None, Diagnosis.from_dict(diag),
                                   step=step, total=total), after=after)


def test_a_start_walks_pending_starting_running():
    s = Sim(rules(ready_probe="http http://x"))
    fx = s.feed(lc.DepsMet())
    assert s.life.state == "starting" and s.life.spawning and fx == [lc.Spawn(1, None)]
    s.feed(lc.Spawned(42, ("python", "t.py")))
    assert s.life.state == "starting" and [e.kind for e in s.events()] == ["started"]
    assert lc.Probe("ready") in s.effects
    s.feed(lc.Ready(), after=2)
    assert s.life.state == "running" and s.life.ready_at == s.now
    assert [e.kind for e in s.events()] == ["started", "ready"]


def test_without_a_readiness_probe_started_is_ready():
    s = Sim()
    s.start()
    assert s.life.state == "running" and [e.kind for e in s.events()] == ["started", "ready"]


def test_false_success_is_a_failure_restarted_never_completed():
    s = Sim(rules(total=200))
    s.start()
    s.exit(0, step=39, total=200)
    kinds = [e.kind for e in s.events()]
    assert "completed" not in kinds
    assert s.life.state == "backoff"
    flag = next(e for e in s.events("flag") if e.type == "false_success")
    assert "step 39 of 200" in flag.message and "restart" in flag.action
    sched = s.events("restart_scheduled")[-1]
    assert sched.reason.startswith("false_success:")


def test_false_success_with_policy_never_is_fatal():
    s = Sim(rules(total=200, restart={"policy": "never"}))
    s.start()
    s.exit(0, step=39)
    assert s.life.state == "fatal"
    assert "false_success" in s.events("fatal")[-1].reason


def test_exit_zero_at_the_last_step_completes():
    s = Sim(rules(total=200))
    s.start()
    s.exit(0, step=200)
    assert s.life.state == "completed" and not s.events("flag")


def test_crash_loop_is_flagged_once_per_episode_and_rearmed_after_health():
    s = Sim(rules(restart={"backoff": {"initial": 1, "jitter": 0}, "max_restarts": 1000, "reset_after": 600}))
    for i in range(40):
        s.start(pid=100 + i)
        s.exit(1, after=0.5, diag={"category": "unknown", "summary": f"exit 1 ({i})", "evidence": []})
        assert s.life.state == "backoff"
        s.feed(lc.BackoffElapsed(s.life.timer), after=1)
    assert len([e for e in s.events("flag") if e.type == "crash_loop"]) == 1
    # A healthy stretch ends the episode: the flag is cleared and may fire again on a new loop.
    s.start(pid=999)
    healthy = next(e for e in reversed(s.effects) if isinstance(e, lc.SetTimer) and e.kind == "healthy")
    s.feed(lc.Healthy(healthy.timer), after=600)
    assert [e.type for e in s.events("flag_cleared")] == ["crash_loop"]
    for i in range(4):
        s.exit(1, after=0.5, diag={"category": "unknown", "summary": "again", "evidence": []})
        s.feed(lc.BackoffElapsed(s.life.timer), after=1)
        s.start(pid=2000 + i)
    assert len([e for e in s.events("flag") if e.type == "crash_loop"]) == 2


def test_stall_flag_once_per_episode_and_cleared_on_progress():
    s = Sim()
    s.start()
    for _ in range(5):
        s.feed(lc.Stalled("no new step for 60s"), after=10)
    assert len(s.events("flag")) == 1 and s.life.state == "running"
    s.feed(lc.Unstalled("progress again at step 12"))
    s.feed(lc.Stalled("no new step for 60s"), after=60)
    assert len(s.events("flag")) == 2 and len(s.events("flag_cleared")) == 1


def test_stall_with_on_stall_restart_ends_the_attempt_as_a_failure_with_a_reason():
    s = Sim(rules(on_stall="restart"))
    s.start()
    s.feed(lc.Stalled("no new step for 60s"))
    assert s.life.state == "stopping" and lc.Terminate("SIGTERM", 30.0) in s.effects
    assert s.events("stopping")[-1].reason.startswith("stall:")
    s.exit(0, after=1, diag=NO_DIAG)  # it exits 0 on SIGTERM: still a failure
    assert s.life.state == "backoff"
    assert s.events("restart_scheduled")[-1].reason.startswith("stall:")


def test_a_forced_end_that_exits_0_is_no_false_success_flag():
    """A vLLM whose liveness probe failed (its engine core died) exits 0 on rlsup's SIGTERM: a failure, for the
    reason rlsup gave, not also a `false_success` flag."""
    s = Sim(rules(ready_probe="http http://x", alive=True))
    s.start()
    s.feed(lc.LivenessFailed("liveness probe failed 2 times (HTTP 503)"))
    s.exit(0, after=1, diag={"category": "inference_engine_dead", "summary": "EngineDeadError; rlsup ended it",
                             "evidence": ["EngineDeadError"]})
    assert s.life.state == "backoff"
    assert [e.type for e in s.events("flag")] == ["liveness_failed"]
    assert s.events("restart_scheduled")[-1].reason.startswith("liveness probe failed")


def test_repeated_error_is_fatal_once():
    s = Sim(rules(restart={"backoff": {"initial": 1, "jitter": 0}, "max_restarts": 10}))
    s.start()
    s.exit(1)
    s.feed(lc.BackoffElapsed(s.life.timer), after=1)
    s.start(pid=11)
    s.exit(1, after=40)
    assert s.life.state == "fatal"
    assert s.events("fatal")[-1].reason.startswith("repeated_error:")
    assert [e.type for e in s.events("flag")] == ["repeated_error"]


def test_user_restart_is_no_failure_and_starts_at_once():
    s = Sim()
    s.start()
    s.feed(lc.Restart("user", reason="restart requested by user"))
    assert s.life.state == "stopping" and s.events("stopping")[-1].by == "user"
    fx = s.exit(-1, diag=NO_DIAG)
    assert s.life.state == "starting" and lc.Spawn(2, None) in fx
    assert s.events("stopped")[-1].by == "user" and not s.events("restart_scheduled")


def test_a_stop_wins_over_a_forced_end_under_way():
    s = Sim(rules(ready_probe="http http://x"))
    s.start(ready=False)
    s.feed(lc.ReadyTimedOut("not ready within 5s"))
    s.feed(lc.Stop("user"))
    s.exit(-1, diag=NO_DIAG)
    assert s.life.state == "stopped" and s.events("stopped")[-1].by == "user"


def test_stop_during_spawn_terminates_once_spawned():
    s = Sim()
    s.feed(lc.DepsMet())
    s.feed(lc.Shutdown())
    assert s.life.state == "starting" and s.life.want == "stop"
    s.feed(lc.Spawned(5, ("x",)))
    assert s.life.state == "stopping" and lc.Terminate("SIGTERM", 30.0) in s.effects
    s.exit(0, diag=NO_DIAG)
    assert s.life.state == "stopped" and s.events("stopped")[-1].by == "shutdown"


def test_spawn_failure_of_a_missing_command_is_fatal_at_once():
    s = Sim()
    s.feed(lc.DepsMet())
    s.feed(lc.SpawnFailed("command not found: 'nope'", True, ("nope",)))
    assert s.life.state == "fatal"
    assert [e.kind for e in s.events()] == ["spawn_failed", "fatal"]  # never "started pid None"


def test_dependency_blocked_is_fatal_with_its_cause():
    s = Sim()
    s.feed(lc.DepsBlocked("dependency inference is fatal; trainer never started", "inference"))
    assert s.life.state == "fatal" and s.life.cause == "inference"
    assert s.events("fatal")[-1].cause == "inference"


def test_backoff_stale_timer_is_ignored_and_stop_in_backoff_is_immediate():
    s = Sim()
    s.start()
    s.exit(1)
    stale = s.life.timer
    s.feed(lc.Stop("user"))
    assert s.life.state == "stopped"
    s.feed(lc.BackoffElapsed(stale), after=5)
    assert s.life.state == "stopped"


def test_user_start_after_fatal_is_a_new_episode():
    s = Sim(rules(restart={"backoff": {"initial": 1, "jitter": 0}, "max_restarts": 0}))
    s.start()
    s.exit(1)
    assert s.life.state == "fatal"
    s.feed(lc.Start("user"))
    assert s.life.state == "pending" and s.life.policy.failures == 0 and s.life.episode == frozenset()


def test_resume_step_reaches_the_spawn():
    s = Sim()
    s.start()
    s.feed(lc.Restart("user", step=50))
    fx = s.exit(-1, diag=NO_DIAG)
    assert lc.Spawn(2, 50) in fx


def test_window_and_backoff_use_monotonic_time_only():
    # The transition function never sees wall time: a restart window of 100 s counts monotonic seconds.
    s = Sim(rules(restart={"backoff": {"initial": 1, "jitter": 0}, "max_restarts": 2, "window": 100}))
    for i in range(2):
        s.start(pid=i)
        s.exit(1, after=1, diag={"category": "unknown", "summary": str(i), "evidence": []})
        s.feed(lc.BackoffElapsed(s.life.timer), after=1)
    s.start(pid=3)
    s.exit(1, after=200, diag={"category": "unknown", "summary": "late", "evidence": []})  # outside the window
    assert s.life.state == "backoff"


def test_adopted_while_starting_without_a_readiness_probe_is_ready_at_once():
    """A supervisor killed between a start and the state file saying "running": its successor must
    not probe readiness that nothing defines (it asserted, ending the run as an internal error)."""
    s = Sim()
    s.feed(lc.Adopted(pid=77, attempt=1, monitor_pid=76, started_at=40.0, ready=False))
    assert s.life.state == "running" and s.life.ready_at == s.now
    assert [e.kind for e in s.events()] == ["adopted", "ready"]
    assert lc.Probe("ready") not in s.effects
    p = Sim(rules(ready_probe="http http://x"))
    p.feed(lc.Adopted(pid=77, attempt=1, monitor_pid=76, started_at=40.0, ready=False))
    assert p.life.state == "starting" and lc.Probe("ready") in p.effects


def test_jitter_is_deterministic_per_component_and_attempt():
    a = Sim(rules(restart={"backoff": {"initial": 10, "jitter": 0.5}}))
    b = Sim(rules(restart={"backoff": {"initial": 10, "jitter": 0.5}}))
    for s in (a, b):
        s.start()
        s.exit(1)
    assert a.events("restart_scheduled")[-1].delay_s == b.events("restart_scheduled")[-1].delay_s
    assert 5 <= a.events("restart_scheduled")[-1].delay_s <= 15


def test_adopted_running_attempt_keeps_its_attempt_and_start_time():
    s = Sim()
    s.feed(lc.Adopted(pid=77, attempt=4, monitor_pid=76, started_at=40.0, ready=True))
    assert s.life.state == "running" and s.life.attempt == 4 and s.life.started_at == 40.0
    ev = s.events("adopted")[-1]
    assert ev.pid == 77 and ev.uptime_s == s.now - 40.0
    s.exit(1, after=0)
    assert s.events("exited")[-1].uptime_s == s.now - 40.0


def test_every_input_class_has_exactly_one_handler():
    """step dispatches on the input's class: a new input class without a handler would raise at run time."""
    import typing

    assert set(typing.get_args(lc.Input)) == set(lc._HANDLERS)
    try:
        lc.step(lc.Life("x"), object(), 0.0, rules())  # type: ignore[arg-type]
    except TypeError as e:
        assert "not a lifecycle input" in str(e)
    else:
        raise AssertionError("an unknown input must raise")


# ---------------------------------------------------------------------- issue 38: the run stopping


def test_an_exit_after_the_run_began_to_stop_is_a_stop_never_a_completion():
    """A requeue signals every process at once: a server exiting 0 before its turn in the ordered stop."""
    s = Sim(rules(ready_probe="http http://x"), name="inference")
    s.start()
    s.feed(lc.RunStopping(lc.Cause("shutdown", "the run is ending: SIGTERM received")))
    assert s.life.state == "running" and not s.effects[-1:] == [lc.Terminate("SIGTERM", 30.0)]
    s.exit(0, diag={"category": "none"})
    assert s.life.state == "stopped" and [e.kind for e in s.events()][-2:] == ["exited", "stopped"]
    assert s.events("stopped")[-1].by == "shutdown" and not s.events("completed")


def test_a_crash_after_the_run_began_to_stop_is_not_restarted():
    s = Sim()
    s.start()
    s.feed(lc.RunStopping())
    s.exit(1)
    assert s.life.state == "stopped" and not s.events("restart_scheduled")


def test_nothing_starts_again_once_the_run_is_stopping():
    """`rlsup restart trainer` while `rlsup down` runs must not start it again (the ordered stop would wait on
    it for ever)."""
    s = Sim()
    s.start()
    s.feed(lc.RunStopping())
    s.feed(lc.Restart("user"))
    assert s.life.state == "running" and not s.life.then_start
    s.feed(lc.Shutdown())
    s.exit(143)
    assert s.life.state == "stopped"
    s.feed(lc.Start("user"))
    assert s.life.state == "stopped"


def test_an_exit_judged_later_keeps_the_time_it_ended():
    """An exit 0 is held a second before it is judged (detectors.exit_hold): its uptime is still its own."""
    s = Sim()
    s.start()
    started = s.now
    s.feed(lc.Exited(0, None, Diagnosis.from_dict({"category": "none"}), at=started + 2.0), after=3.0)
    assert s.events("exited")[-1].uptime_s == 2.0


def test_a_preemption_asks_a_component_with_preempt_to_checkpoint_once_then_stops_it_as_a_preemption():
    s = Sim(rules(preempt_signal="SIGUSR1", preempt_wait=60.0))
    s.start()
    why = lc.Cause("preemption", "SIGTERM received: the platform is taking the machine (preemption)")
    fx = s.feed(lc.RunStopping(why))
    assert lc.Signal("SIGUSR1") in fx and s.life.checkpoint_asked == s.now
    assert [(e.signal, e.wait_s) for e in s.events("checkpoint_requested")] == [("SIGUSR1", 60.0)]
    assert s.life.state == "running"  # its turn in the ordered stop comes after the wait
    s.feed(lc.RunStopping(why), after=1.0)  # a repeated notice asks nothing more
    assert len(s.events("checkpoint_requested")) == 1
    s.feed(lc.Shutdown(why))
    s.exit(143)
    assert s.life.state == "stopped" and s.events("stopped")[-1].by == "preemption"


def test_a_shutdown_or_a_component_without_preempt_is_never_asked_to_checkpoint():
    for r, why in ((rules(preempt_signal="SIGUSR1", preempt_wait=5.0), lc.Cause("shutdown", "rlsup down")),
                   (rules(), lc.Cause("preemption", "SIGTERM received"))):
        s = Sim(r)
        s.start()
        fx = s.feed(lc.RunStopping(why))
        assert not s.events("checkpoint_requested") and not any(isinstance(e, lc.Signal) for e in fx)
