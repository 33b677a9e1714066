"""The sequences the simulator found, shrunk, kept as they were printed (tests/sim/test_sim.py's ``run``).

Each failed on the code before its fix (issue 38): the promise it broke is in its docstring.
"""

from __future__ import annotations

from rlsup.supervisor.diagnosis import diagnose_run
from rlsup.supervisor.rundir.archive import how_it_ended
from rlsup.supervisor.rundir.layout import RunPaths
from tests import promises
from tests.sim.test_sim import (
    _short,
    a_preemption_keeps_the_trainers_step,
    a_run_no_fault_struck_has_no_failures,
    run,
    the_root_cause_is_a_real_fault,
)
from tests.sim.world import Setup


def _kinds(w, component=None):
    return [e["kind"] for e in w.events() if component is None or e.get("component") == component]


def test_a_run_stopped_by_a_signal_is_not_called_completed(tmp_path):
    """how it ended: a SIGTERM (Ctrl-C alike) at the start, then `rlsup up` said the run "completed". Since
    issue 40 a person's Ctrl-C is a stop and the platform's SIGTERM a preemption: neither is a completion."""
    w = run(Setup(), [("interrupt",)], tmp_path)
    assert w.events()[-1]["outcome"] == "stopped"
    assert how_it_ended(RunPaths(w.flush())).startswith("stopped")
    (tmp_path / "sigterm").mkdir()
    w = run(Setup(), [("platform_sigterm", 0.0, False)], tmp_path / "sigterm")
    assert w.events()[-1]["outcome"] == "preempted"
    assert how_it_ended(RunPaths(w.flush())).startswith("preempted")


def test_an_exit_0_on_the_platforms_sigterm_is_a_stop_not_a_completion():
    """completed only by itself: a requeue signals every process at once; the inference server exits 0 on
    SIGTERM before the supervisor's own SIGTERM is handled, and was recorded completed (the resumed run then
    waited on `inference (ready; now completed)` for ever)."""
    w = run(Setup(), [("wait", 3.0), ("platform_sigterm", 0.8, True), ("resume",), ("wait", 45.0)])
    assert "completed" not in _kinds(w, "inference")
    assert ("inference", 1) in w.truth.platform_exits
    resumed = w.events()[[e["kind"] for e in w.events()].index("run_started", 1):]
    assert [e["attempt"] for e in resumed if e["kind"] == "started" and e["component"] == "inference"] == [2]


def test_a_dependency_that_started_and_completed_has_started():
    """the run never waits on nothing: `depends_on: {prep: started}` on a prep that completed before its
    dependents were considered left them pending ("prep (started; now completed)") for ever."""
    w = run(Setup(prep="started"), [("wait", 45.0)])
    assert "started" in _kinds(w, "trainer") and w.events()[-1]["outcome"] == "completed"


def test_a_dependency_that_completed_without_becoming_ready_blocks_with_a_reason():
    """`ready` on a component that completed without ever being ready is said plainly (fatal, never
    started), not waited on for ever."""
    w = run(Setup(prep="ready"), [("wait", 45.0)])
    assert "started" in _kinds(w, "trainer")  # prep has no readiness probe: ready as soon as it started


def test_a_producers_death_after_its_consumers_last_step_is_the_root_cause():
    """root cause: the orchestrator died (fatal) a moment after the trainer's last step; the trainer starved
    and was flagged stalled; `diagnose` named the stall, dated back to the last step, as the root cause."""
    run(Setup(total=60, max_restarts=1), [("fault", "orchestrator", "crash", 6), ("wait", 15.0),
                                          ("fault", "orchestrator", "crash", 24), ("wait", 45.0)])


def test_a_fault_after_a_resume_and_healthy_steps_is_independent():
    """independent faults linked: a crash at step 12, resumed, then the OOM killer 15 healthy steps later was
    listed as a consequence of the crash."""
    run(Setup(total=60, max_restarts=5), [("wait", 3.0), ("fault", "trainer", "crash", 12), ("wait", 45.0),
                                          ("fault", "trainer", "oom", 15), ("wait", 45.0)])


def test_a_restart_while_the_run_shuts_down_does_not_keep_it_alive():
    """the run never waits on nothing: `rlsup restart trainer` while `rlsup down` stops the run started the
    trainer again, the ordered stop waited on it for ever and `down` never returned."""
    w = run(Setup(), [("wait", 15.0), ("down",), ("user", "restart", "trainer"), ("user", "start", "inference")])
    assert w.ended and w.events()[-1]["kind"] == "run_ended"
    assert [e["attempt"] for e in w.events() if e["kind"] == "started" and e["component"] == "trainer"] == [1]


def test_a_liveness_restart_is_a_failure_of_the_component():
    """root cause: the inference server hung, its liveness probe failed three times and rlsup restarted it;
    `diagnose` found no failure at all (every stop was read as one asked for). The fault explorer found it
    first (RLSUP_EXPLORE_SEED=7); the simulator's shrunk schedule keeps it."""
    run(Setup(total=30, max_restarts=1), [("wait", 3.0), ("fault", "inference", "hang", 1)])


def test_a_preemption_checkpoints_the_trainers_step_and_the_next_run_goes_on_from_it(tmp_path):
    """a preempted run goes on where it stood (issue 40): the platform's SIGTERM in the middle of a period
    between periodic checkpoints; the trainer is asked (SIGUSR1), writes its step, the run waits for it, ends
    preempted standing there, and the next run starts the trainer from that step, not the older periodic one."""
    w = run(Setup(total=60), [("wait", 15.0), ("platform_sigterm", 0.0, False)], tmp_path)
    asked, wrote = w.truth.preempt_step, w.truth.preempt_written
    assert asked is not None and asked % 10 != 0 and wrote == asked, (asked, wrote)
    w.act(("resume",))
    w.act(("wait", 3.0))
    w.settle()
    kinds = _kinds(w, "trainer")
    assert kinds.index("checkpoint_requested") < kinds.index("stopping")
    end = next(e for e in w.events() if e["kind"] == "run_ended")
    assert end["outcome"] == "preempted" and end["checkpoints"]["trainer"]["step"] == asked
    resumed = w.events()[[e["kind"] for e in w.events()].index("run_started", 1):]
    first = next(e for e in resumed if e["kind"] == "started" and e["component"] == "trainer")
    assert first["resume"]["step"] == asked


def test_a_supervisor_restart_asked_as_the_run_ends_is_refused(tmp_path):
    """The fault explorer's seed 1 (under load): `rlsup restart-supervisor` reached a supervisor whose run had
    just ended; it handed over, and the new supervisor journaled a second run_started and run_ended, while an
    attached client stopped on the hand-over. Nothing is handed over once the run is ending."""
    from rlsup.supervisor.run.commands import run_command

    w = run(Setup(), [("wait", 3.0), ("down",)], tmp_path)
    before = len(w.events())
    reply = run_command(w, "handover", None)
    assert reply["ok"] is False and "is ending" in reply["error"], reply
    assert len(w.events()) == before and not w.truth.resumes


def test_a_stall_while_a_person_had_stopped_its_producer_is_no_root_cause(tmp_path):
    """RLSUP_SIM_SEED=29 found: `rlsup stop trainer` starved the orchestrator (flagged stalled, "Waiting for
    trainer weights"); after `down` and `--resume` the trainer crashed once, was restarted and the run completed.
    `rlsup diagnose` named the orchestrator's stall of the first run as the root cause: a wait on a stopped
    producer was taken for a hang. The crash, the only fault, is the root cause."""
    w = run(Setup(total=30, max_restarts=1, prep=None, trainer_on="inference"),
            [("user", "stop", "trainer"), ("resume",), ("fault", "trainer", "crash", 1), ("down",), ("resume",)],
            tmp_path)
    rc = diagnose_run(w.flush()).root_cause
    assert rc is not None and (rc.component, rc.category) == ("trainer", "python_exception"), rc


def test_a_run_whose_server_rlsup_gave_up_on_is_not_completed(tmp_path):
    """RLSUP_SIM_SEED=29 found: the inference server died twice and went fatal (max_restarts=1); the orchestrator
    and the trainer (exit_on_end) ran on to their end and the run ended "completed", exit code 0."""
    w = run(Setup(total=30, max_restarts=1, prep=None, trainer_on="inference"),
            [("wait", 0.5), ("wait", 15.0), ("fault", "inference", "die", 14), ("wait", 15.0),
             ("fault", "inference", "die", 6)], tmp_path)
    end = w.events()[-1]
    assert (end["kind"], end["outcome"], end["exit_code"]) == ("run_ended", "failed", 1), end


def test_exits_to_the_platforms_sigterm_are_no_failures_of_a_resumed_run(tmp_path):
    """RLSUP_SIM_SEED=29 found: a preemption whose SIGTERM reached every process at once (the orchestrator exited
    143 before rlsup's own stop, then `stopped` by preemption); the resumed run lost its inference server once
    and completed. `rlsup diagnose` named the orchestrator's exit to the platform's SIGTERM the root cause."""
    w = run(Setup(total=30, max_restarts=1, prep=None, trainer_on="inference"),
            [("wait", 15.0), ("platform_sigterm", 0.0, True), ("fault", "inference", "die", 1), ("resume",)],
            tmp_path)
    rc = diagnose_run(w.flush()).root_cause
    assert rc is not None and rc.component == "inference", rc


def test_an_engine_death_during_a_preemption_is_still_the_root_cause(tmp_path):
    """RLSUP_SIM_SEED=29, after the fix above: the inference server died of an injected fault (exit 1) while a
    preemption stopped the run, and rlsup recorded it `stopped`; only kills by a signal are read as the stop."""
    w = run(Setup(total=30, max_restarts=1, prep=None, trainer_on="inference"),
            [("wait", 3.0), ("platform_sigterm", 0.3, False), ("fault", "inference", "die", 1), ("resume",)], tmp_path)
    rc = diagnose_run(w.flush()).root_cause
    assert rc is not None and rc.component == "inference", rc


def test_deaths_by_the_platforms_sigterm_before_the_supervisors_own_are_stops(tmp_path):
    """RLSUP_SIM_SEED=29: the platform's SIGTERM reached the orchestrator and the trainer 0.3 s before the
    supervisor; rlsup judged their deaths (exit 143) failures and scheduled restarts, then the preemption stopped
    them, and `rlsup diagnose` of the resumed run blamed the orchestrator's death. A SIGTERM death is now held a
    moment, like an exit 0 (rules.detectors.exit_hold): the preemption that follows makes it a stop."""
    w = run(Setup(total=30, max_restarts=1, prep=None, trainer_on="inference"),
            [("wait", 15.0), ("platform_sigterm", 0.3, True), ("fault", "inference", "die", 1), ("resume",)], tmp_path)
    first = promises.runs(w.events())[0]
    assert not [e for e in first if e["kind"] == "restart_scheduled"], [_short(e) for e in first]
    assert diagnose_run(w.flush()).root_cause.component == "inference"


def test_a_crash_as_a_persons_restart_ends_the_attempt_is_the_exit_asked_for(tmp_path):
    """RLSUP_SIM_SEED=29 (the oracle's limit, not rlsup's): the orchestrator crashed as `rlsup restart
    orchestrator` was ending its attempt; rlsup takes the exit for the one it asked for (a program may exit 1 on
    SIGTERM), so `rlsup diagnose` names no root cause, and the oracle no longer asks for one."""
    w = run(Setup(total=30, max_restarts=1, prep=None, trainer_on="inference"),
            [("fault", "orchestrator", "crash", 1), ("wait", 3.0), ("user", "restart", "orchestrator")], tmp_path)
    assert "restart_scheduled" not in _kinds(w, "orchestrator") and w.events()[-1]["outcome"] == "completed"


def test_a_peer_back_from_a_persons_restart_explains_no_hang(tmp_path):
    """RLSUP_SIM_SEED=29, after the first fix above: the orchestrator hung while a person restarted the trainer
    (stopped, then started again at once); the trainer's moment of being stopped explained the hang away and
    the trainer's own wait became the root cause. A stopped peer explains a stall only while it stays stopped."""
    w = run(Setup(total=30, max_restarts=1, prep=None, trainer_on="inference"),
            [("fault", "orchestrator", "hang", 1), ("wait", 3.0), ("user", "restart", "trainer")], tmp_path)
    rc = diagnose_run(w.flush()).root_cause
    assert rc is not None and (rc.component, rc.category) == ("orchestrator", "stall"), rc


def test_a_crash_as_the_runs_shutdown_ends_the_attempt_is_the_exit_asked_for(tmp_path):
    """RLSUP_SIM_SEED=31 (the oracle's limit again, as with a person's restart above): the trainer crashed as
    `rlsup down` was stopping it, then the resumed run completed. rlsup records the exit 1 as the stop it asked
    for (torchrun exits 1 on SIGTERM), so `rlsup diagnose` names no root cause and the oracle asks for none."""
    w = run(Setup(total=30, max_restarts=1, prep=None, trainer_on="inference"),
            [("fault", "trainer", "crash", 1), ("wait", 3.0), ("down",), ("resume",)], tmp_path)
    first = promises.runs(w.events())[0]
    assert [_short(e) for e in first if e.get("component") == "trainer" and e["kind"] in ("exited", "stopped")] == [
        "seq=13 kind=exited component=trainer attempt=1 exit_code=1", "seq=14 kind=stopped component=trainer by=shutdown"]
    assert diagnose_run(w.flush()).root_cause is None and w.events()[-1]["outcome"] == "completed"
    assert the_root_cause_is_a_real_fault(w) == []


def test_a_periodic_checkpoint_newer_than_the_step_asked_ends_the_preemptions_wait(tmp_path):
    """RLSUP_SIM_SEED=41 (the oracle's limit): the preemption asked the trainer to checkpoint at step 19; its
    periodic checkpoint of step 20 landed 0.2 s later, before the one asked for; rlsup took it (newer than the
    newest when it asked) and stopped the trainer, and the run ended standing at step 20. Nothing was lost: the
    oracle now asks only that the run stand at the step asked or later."""
    w = run(Setup(total=30, max_restarts=1, prep=None, trainer_on="inference"),
            [("wait", 0.5), ("wait", 3.0), ("wait", 3.0), ("wait", 15.0), ("platform_sigterm", 0.8, False)], tmp_path)
    end = w.events()[-1]
    assert end["outcome"] == "preempted" and end["checkpoints"]["trainer"]["step"] == 20
    assert w.truth.preempt_step == 19 and w.truth.preempt_written is None
    assert not [e for e in w.events() if e["kind"] == "flag"]
    assert a_preemption_keeps_the_trainers_step(w) == []


def test_a_trainer_resumed_from_its_last_step_ends_at_once(tmp_path):
    """RLSUP_SIM_SEED=47 (the simulated world's limit, not rlsup's): the trainer crashed right after its last
    step's checkpoint (step 30 of 30); the simulated trainer, resumed from step 30, waited for a batch 31 that
    could never come (the orchestrator had completed), and the diagnosis rightly called that a hang. A trainer
    resumed from its last step has nothing left to do: the demo's ends at once, and the simulated one now does."""
    w = run(Setup(total=30, max_restarts=1, prep=None, trainer_on="inference"),
            [("fault", "trainer", "crash", 14), ("wait", 15.0), ("fault", "trainer", "crash", 17)], tmp_path)
    assert "completed" in _kinds(w, "trainer") and w.events()[-1]["outcome"] == "completed"
    rc = diagnose_run(w.flush()).root_cause
    assert rc is not None and (rc.component, rc.category) == ("trainer", "python_exception"), rc


def test_a_stall_that_outlasts_its_peers_recovery_is_a_hang_of_its_own(tmp_path):
    """RLSUP_SIM_SEED=59: the orchestrator hung at once; the inference server died 9 s later and was back within
    a second; the orchestrator never moved again (ten minutes). Its stall was called explained by the inference
    server's death (a producer's death explains a consumer's stall), so no hang was primary and the root cause
    fell to the starving trainer's stall. A stall that still stands twice its stall_after after the failure that
    would explain it had recovered is a hang of its own: the root cause is the orchestrator's."""
    w = run(Setup(total=30, max_restarts=1, prep=None, trainer_on="inference"),
            [("fault", "orchestrator", "hang", 1), ("fault", "inference", "die", 12), ("resume",),
             ("fault", "inference", "hang", 6), ("user", "restart", "trainer")], tmp_path)
    rc = diagnose_run(w.flush()).root_cause
    assert rc is not None and (rc.component, rc.category) == ("orchestrator", "stall"), rc
    assert the_root_cause_is_a_real_fault(w) == []


def test_a_restart_that_dies_while_it_starts_may_be_what_the_first_fault_left(tmp_path):
    """RLSUP_SIM_SEED=61 (the oracle's limit): the inference server hung, failed its liveness probe and was
    restarted; the restart died a second later, before it was ever ready, and rlsup listed that death among the
    first fault's consequences. The oracle had called any later attempt's fault independent; its promise is for
    an attempt that was up (ready) when the fault struck: one that dies while it starts may be what the first
    fault left behind (a port, GPU memory, a torn file), and rlsup cannot tell the two apart."""
    w = run(Setup(total=30, max_restarts=1, prep=None, trainer_on="inference"),
            [("wait", 15.0), ("fault", "inference", "hang", 1), ("wait", 15.0), ("fault", "inference", "die", 1)],
            tmp_path)
    assert [e["component"] for e in w.events() if e["kind"] == "ready"].count("inference") == 1  # attempt 2 never
    assert the_root_cause_is_a_real_fault(w) == []


def test_a_server_up_again_that_dies_later_is_a_fault_of_its_own(tmp_path):
    """RLSUP_SIM_SEED=61: the inference server hung and was ended by its liveness probe as the run was brought
    down; ten minutes later `up --resume` brought it up (ready) and its engine died. That death was listed as a
    consequence of the hang: a later failure of the same component counted as independent only once it had
    gone past the step where the first one struck, and a server that counts no steps never does. Where the
    first fault struck before any step, running again is enough."""
    w = run(Setup(total=30, max_restarts=1, prep=None, trainer_on="inference"),
            [("wait", 3.0), ("fault", "inference", "hang", 1), ("wait", 15.0), ("down",), ("resume",),
             ("fault", "inference", "die", 2)], tmp_path)
    rd = diagnose_run(w.flush())
    assert rd.root_cause is not None and rd.root_cause.component == "inference"
    assert not [s for s in rd.symptoms if s.category == "inference_engine_dead"], rd.symptoms
    assert the_root_cause_is_a_real_fault(w) == []


def test_a_later_attempt_that_fails_before_the_first_faults_step_is_a_fault_of_its_own(tmp_path):
    """RLSUP_SIM_SEED=83: the trainer crashed at step 4 and came back; the run was brought down, resumed and
    brought down again before the trainer started; resumed once more, the trainer came back (ready) and hung. The
    hang was called explained and listed as the crash's consequence: the second stop of a component already
    stopped opened a second "stopped on purpose" span, and the `up --resume` start closed only the newer one, so
    the trainer and the orchestrator counted as stopped by a person for ever (a peer stopped on purpose explains
    a stall). The run diagnosis also kept the end of an earlier run as the end of the resumed one."""
    w = run(Setup(total=30, max_restarts=1, prep=None, trainer_on="inference"),
            [("fault", "trainer", "crash", 4), ("wait", 15.0), ("down",), ("resume",), ("down",),
             ("fault", "trainer", "hang", 1), ("resume",)], tmp_path)
    rd = diagnose_run(w.flush())
    assert rd.root_cause is not None and (rd.root_cause.component, rd.root_cause.category) == ("trainer", "stall")
    assert rd.root_cause.own and rd.ended_ts is None  # (the resumed run is live: it has not ended)
    assert [(s.component, s.category) for s in rd.symptoms] == [("orchestrator", "stall")], rd.symptoms
    assert the_root_cause_is_a_real_fault(w) == []


def test_the_consumers_of_a_server_a_person_stopped_wait_down_the_chain(tmp_path):
    """RLSUP_SIM_SEED=202 (the promise that a run no fault struck lists no failure, added after the fault
    explorer's seed 86): `rlsup stop inference`; the orchestrator waited on it (dependency_down) until the budget
    stopped it; the trainer, which depends on the orchestrator, then flagged the orchestrator down, and that flag
    was named the root cause. A consumer the budget stopped while it waited on a person's stop is let down by
    that person too: its own consumers wait."""
    w = run(Setup(total=30, max_restarts=1, prep=None, trainer_on="orchestrator"),
            [("wait", 15.0), ("user", "stop", "inference")], tmp_path)
    rd = diagnose_run(w.flush())
    assert rd.failures == [] and rd.root_cause is None, rd.verdict
    assert ("trainer", "dependency_down") in [(f.component, f.category) for f in rd.waits]
    assert a_run_no_fault_struck_has_no_failures(w) == []


def test_a_one_shot_step_that_completed_is_not_restarted_for_a_server_a_person_stopped(tmp_path):
    """RLSUP_SIM_SEED=202: `prep` (a one-shot the orchestrator needs started) had completed; `rlsup stop
    inference`; the consumers' refused connections were laid on prep too: rlsup started the completed prep
    again for them, flagged it down past the budget, and `diagnose` listed failures in a run no fault struck."""
    for cond in ("started", "ready"):  # (RLSUP_SIM_SEED=204: needed ready, it had completed before they started)
        (tmp_path / cond).mkdir()
        w = run(Setup(total=30, max_restarts=1, prep=cond, trainer_on="inference"),
                [("wait", 15.0), ("user", "stop", "inference")], tmp_path / cond)
        assert _kinds(w, "prep") == ["started", "ready", "exited", "completed"], _kinds(w, "prep")
        assert a_run_no_fault_struck_has_no_failures(w) == []


def test_a_one_shot_step_that_completed_in_the_earlier_run_is_not_restarted_for_the_resumed_one(tmp_path):
    """RLSUP_SIM_SEED=210: after `rlsup stop inference` and the budget's stop of its consumers, `up --resume`;
    the consumers, pending while the server started, still showed their last run's refused connections, and the
    prep step that had completed in the earlier run was started again for them."""
    w = run(Setup(total=30, max_restarts=1, prep="ready", trainer_on="inference"),
            [("wait", 15.0), ("user", "stop", "inference"), ("resume",)], tmp_path)
    assert _kinds(w, "prep").count("started") == 1, _kinds(w, "prep")


def test_a_stall_that_only_waited_explains_no_later_stall_as_a_failure(tmp_path):
    """RLSUP_SIM_SEED=401 found: `rlsup stop orchestrator` starved the trainer (a wait), then after two resumes
    with the trainer stopped while pending the orchestrator waited for its weights and was flagged stalled.
    `rlsup diagnose` called that the run's root cause ("orchestrator failed first: hung") in a run no fault
    struck: the trainer's stall, itself a wait, still counted as a failure that explained the orchestrator's
    stall, so the orchestrator's was not filed as a wait either."""
    w = run(Setup(total=30, max_restarts=1, prep=None, trainer_on="inference"),
            [("user", "stop", "orchestrator"), ("resume",), ("down",), ("resume",), ("user", "stop", "trainer")],
            tmp_path)
    rd = diagnose_run(w.flush())
    assert rd.root_cause is None and not rd.failures, rd.verdict
    assert {f.component for f in rd.waits} == {"trainer", "orchestrator"}, rd.verdict
