"""Run-level decisions (dependency gating, stalls, the end and its root cause) as pure functions."""

from __future__ import annotations

from rlsup.supervisor.config.loader import load_config
from rlsup.supervisor.rules import detectors
from rlsup.supervisor.rules import lifecycle as lc
from rlsup.supervisor.rules.detectors import Seen
from tests.conftest import write_config


def stack(tmp_path, exit_on_end="trainer"):
    return load_config(str(write_config(tmp_path, f"""
        name: s
        components:
          inference: {{command: "true"}}
          orchestrator: {{command: "true", depends_on: {{inference: ready}}}}
          trainer: {{command: "true", depends_on: {{inference: ready}}, exit_on_end: {str(exit_on_end == 'trainer').lower()}}}
    """)))


def test_gate_waits_then_starts_then_blocks(tmp_path):
    cfg = stack(tmp_path)
    seen = {"inference": Seen("inference", "starting", 1), "orchestrator": Seen("orchestrator", "pending"),
            "trainer": Seen("trainer", "pending")}
    assert isinstance(detectors.gate("trainer", cfg, seen), lc.DepsWaiting)
    seen["inference"] = Seen("inference", "running", 1)
    assert isinstance(detectors.gate("trainer", cfg, seen), lc.DepsMet)
    seen["inference"] = Seen("inference", "fatal", 1, reason="repeated_error: ...")
    blocked = detectors.gate("trainer", cfg, seen)
    assert isinstance(blocked, lc.DepsBlocked) and blocked.cause == "inference"


def test_the_root_is_the_dependency_not_the_last_to_end(tmp_path):
    cfg = stack(tmp_path)
    seen = {
        "inference": Seen("inference", "fatal", 3, reason="repeated_error: CUDA error", ended_at=10.0),
        "orchestrator": Seen("orchestrator", "fatal", 0, reason="dependency inference is fatal", cause="inference",
                             ended_at=10.1),
        "trainer": Seen("trainer", "fatal", 0, reason="dependency inference is fatal", cause="inference",
                        ended_at=10.2),
    }
    out = detectors.outcome(cfg, seen)
    assert out is not None and out.exit_code == 1 and out.root == "inference"
    assert out.reason.startswith("inference fatal: repeated_error: CUDA error")
    assert "trainer never started (dependency inference)" in out.reason


def test_a_fatal_component_fails_the_run_even_where_the_exit_on_end_one_completed_after_it(tmp_path):
    """RLSUP_SIM_SEED=29 found: the inference server died twice and rlsup gave up on it (max_restarts=1); the
    orchestrator and the trainer still ran to their end, and the run said "completed" with exit code 0.
    A component rlsup gave up on is never a completion (docs/lifecycle.md, promise 2)."""
    cfg = stack(tmp_path)
    seen = {"inference": Seen("inference", "fatal", 2, reason="exit 1; gave up after 1 restarts", ended_at=10.0),
            "orchestrator": Seen("orchestrator", "completed", 1), "trainer": Seen("trainer", "completed", 1)}
    out = detectors.outcome(cfg, seen)
    assert out is not None and (out.how, out.exit_code, out.root) == ("failed", 1, "inference")
    assert out.reason == "inference fatal: exit 1; gave up after 1 restarts; trainer completed (exit_on_end)"
    seen["inference"] = Seen("inference", "running", 1)
    assert detectors.outcome(cfg, seen) == detectors.Outcome(0, "trainer completed (exit_on_end)")


def test_the_earliest_independent_failure_is_the_root(tmp_path):
    cfg = stack(tmp_path, exit_on_end=None)
    seen = {"inference": Seen("inference", "completed", 1),
            "orchestrator": Seen("orchestrator", "fatal", 2, reason="b", ended_at=50.0),
            "trainer": Seen("trainer", "fatal", 2, reason="a", ended_at=20.0)}
    assert detectors.outcome(cfg, seen).root == "trainer"


def test_run_goes_on_while_anything_is_active_or_everything_was_stopped_by_hand(tmp_path):
    cfg = stack(tmp_path, exit_on_end=None)
    active = {"inference": Seen("inference", "running", 1), "orchestrator": Seen("orchestrator", "completed", 1),
              "trainer": Seen("trainer", "completed", 1)}
    assert detectors.outcome(cfg, active) is None
    stopped = {n: Seen(n, "stopped", 1) for n in ("inference", "orchestrator", "trainer")}
    assert detectors.outcome(cfg, stopped) is None
    done = {n: Seen(n, "completed", 1) for n in ("inference", "orchestrator", "trainer")}
    assert detectors.outcome(cfg, done).exit_code == 0


def test_stall_counts_from_the_latest_of_step_ready_start_and_our_own_wakeup():
    c = Seen("trainer", "running", 1, started_at=0.0, ready_at=5.0, last_step_at=10.0)
    assert detectors.stalled(c, 60, now=69.0, awake_since=0.0) is None
    assert detectors.stalled(c, 60, now=71.0, awake_since=0.0) == 61.0
    # The supervisor itself was stopped until t=65: the component gets a full stall_after from then on.
    assert detectors.stalled(c, 60, now=71.0, awake_since=65.0) is None
    assert detectors.stalled(Seen("trainer", "backoff", 1, last_step_at=0.0), 60, now=999, awake_since=0) is None


def test_a_stall_is_due_stall_after_the_latest_of_step_ready_start_and_our_own_wakeup():
    c = Seen("trainer", "running", 1, started_at=0.0, ready_at=5.0, last_step_at=10.0)
    assert detectors.stall_due(c, 60, awake_since=0.0) == 70.0
    assert detectors.stall_due(c, 60, awake_since=65.0) == 125.0
    assert detectors.stall_due(c, None, awake_since=0.0) is None
    assert detectors.stall_due(Seen("trainer", "starting", 1, started_at=0.0), 60, awake_since=0.0) is None
    due = detectors.stall_due(c, 60, awake_since=0.0)
    assert detectors.stalled(c, 60, now=due - 0.01, awake_since=0.0) is None
    assert detectors.stalled(c, 60, now=due, awake_since=0.0) == 60.0


def test_the_next_tick_is_a_second_away_while_busy_else_when_something_is_due():
    tick = dict(tick_s=1.0, idle_max_s=30.0)
    # Something to look at every second (a component starting, a dependency down): one second.
    assert detectors.next_tick(100.0, busy=True, due=[150.0], **tick) == 101.0
    # Idle: the earliest thing due (a resources sample at 105, a stall deadline at 160).
    assert detectors.next_tick(100.0, busy=False, due=[160.0, 105.0, None], **tick) == 105.0
    # Nothing due: the longest nap (the reap safety net).
    assert detectors.next_tick(100.0, busy=False, due=[None], **tick) == 130.0
    assert detectors.next_tick(100.0, busy=False, due=[], **tick) == 130.0
    assert detectors.next_tick(100.0, busy=False, due=[900.0], **tick) == 130.0
    # Overdue (a stall deadline passed while we were paused): the next tick, not a burst of them.
    assert detectors.next_tick(100.0, busy=False, due=[50.0], **tick) == 101.0


def test_a_run_where_many_failed_names_a_few_and_counts_the_rest(tmp_path):
    lines = ["name: many", "components:"] + [f"  c{i:02d}: {{command: 'true'}}" for i in range(40)]
    (tmp_path / "m.yaml").write_text("\n".join(lines) + "\n")
    cfg = load_config(str(tmp_path / "m.yaml"))
    seen = {f"c{i:02d}": Seen(f"c{i:02d}", "fatal", 1, reason="boom", ended_at=float(i)) for i in range(40)}
    out = detectors.outcome(cfg, seen)
    assert out.root == "c00" and out.reason.endswith("; and 34 more fatal") and len(out.reason) < 200


def test_a_preemptions_wait_ends_on_a_newer_checkpoint_an_exit_or_its_bound():
    from rlsup.supervisor.rules.detectors import checkpoint_waited

    kw = {"asked_at": 100.0, "wait": 60.0, "exited": False}
    assert checkpoint_waited(now=101.0, before=(40, 5.0), latest=(40, 5.0), **kw) is None
    assert checkpoint_waited(now=101.0, before=(40, 5.0), latest=(43, 101.0), **kw) == "written"
    assert checkpoint_waited(now=101.0, before=(40, 5.0), latest=(40, 100.5), **kw) == "written"  # saved again
    assert checkpoint_waited(now=101.0, before=None, latest=(3, 101.0), **kw) == "written"
    assert checkpoint_waited(now=160.0, before=(40, 5.0), latest=(40, 5.0), **kw) == "timed out"
    assert checkpoint_waited(now=101.0, before=None, latest=None, **{**kw, "exited": True}) == "exited"


class _Counted(dict):  # type: ignore[type-arg]
    """A view that counts the components read from it."""

    reads = 0

    def __getitem__(self, k):
        self.reads += 1
        return super().__getitem__(k)

    def values(self):
        self.reads += len(self)
        return super().values()


def test_while_the_run_counts_components_active_only_exit_on_end_ones_are_read(tmp_path):
    """Thousands of components, judged many times a second while they start: not a read of each per judgement."""
    cfg = stack(tmp_path)  # the trainer has exit_on_end
    seen = _Counted({"inference": Seen("inference", "running", 1), "orchestrator": Seen("orchestrator", "running", 1),
                     "trainer": Seen("trainer", "running", 1)})
    assert detectors.outcome(cfg, seen, active=3) is None
    assert seen.reads == 1
    seen["trainer"] = Seen("trainer", "completed", 1)
    out = detectors.outcome(cfg, seen, active=2)
    assert out is not None and out.exit_code == 0 and "trainer completed" in out.reason
    # Counted or not, the same verdicts.
    done = {n: Seen(n, "completed", 1) for n in ("inference", "orchestrator", "trainer")}
    assert detectors.outcome(cfg, done, active=0) == detectors.outcome(cfg, done)
