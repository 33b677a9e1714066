"""The deterministic run simulator (issue 38): random schedules of faults and actions against rlsup's real
decisions (tests/sim/world.py), the promises checked after every step (tests/promises.py and the oracle
below), a failing schedule shrunk by Hypothesis to a minimal one that replays as it is printed.

``RLSUP_SIM_EXAMPLES=N`` sets how many schedules run (by default 200 in the fast tier, about 6 s, and 500
in the whole suite); `.ci/run` runs 6,000 more and `.ci/sim.sh` alone 10,000. The schedules are derandomized: the same
N always plays the same schedules, so a red run replays as it is; ``RLSUP_SIM_SEED=K`` plays other schedules (a
search beyond CI's, e.g. ``RLSUP_SIM_SEED=7 RLSUP_SIM_EXAMPLES=20000 .ci/sim.sh``). A failure prints the shrunk schedule as
``test_random_schedules_keep_every_promise(setup=Setup(...), schedule=[...])``: keep it in
tests/sim/test_sim_regressions.py as ``run(Setup(...), [...])``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from rlsup.supervisor.diagnosis import diagnose_run
from rlsup.supervisor.rundir.archive import how_it_ended
from rlsup.supervisor.rundir.layout import RunPaths
from tests import promises, tier
from tests.sim.world import Setup, World

EXAMPLES = int(os.environ.get("RLSUP_SIM_EXAMPLES") or (200 if tier.FAST else 500))
SEED = os.environ.get("RLSUP_SIM_SEED")

COMPONENT_FAULTS = {
    "trainer": ("crash", "oom", "hang", "exit0"),
    "orchestrator": ("crash", "disk_full", "hang"),
    "inference": ("die", "hang"),
}

setups = st.builds(Setup, total=st.sampled_from([30, 60]), max_restarts=st.sampled_from([1, 3, 5]),
                   prep=st.sampled_from([None, "started", "ready", "completed"]),
                   trainer_on=st.sampled_from(["inference", "orchestrator"]))

faults = st.sampled_from(list(COMPONENT_FAULTS)).flatmap(lambda c: st.tuples(
    st.just("fault"), st.just(c), st.sampled_from(COMPONENT_FAULTS[c]), st.integers(1, 25)))
waits = st.tuples(st.just("wait"), st.sampled_from([0.5, 3.0, 15.0, 45.0]))
# Faults and waits most of the time (a run must live long enough for faults to fire and follow each other);
# users' commands, stops and resumes in between.
actions = st.one_of(
    faults, faults, faults, waits, waits, waits,
    st.tuples(st.just("user"), st.sampled_from(["stop", "restart", "start"]),
              st.sampled_from(["inference", "orchestrator", "trainer"])),
    st.tuples(st.just("down")),
    st.tuples(st.just("platform_sigterm"), st.sampled_from([0.0, 0.3, 0.8]), st.booleans()),
    st.tuples(st.just("interrupt")),
    st.tuples(st.just("resume")), st.tuples(st.just("resume")),
)


def run(setup: Setup, schedule: list[tuple], root: Path | None = None) -> World:
    """Play ``schedule`` on a fresh world (in ``root``, else a temporary folder), checking the promises after
    every step; returns the world."""
    with tempfile.TemporaryDirectory(prefix="rlsup-sim-") as d:
        w = World(root or Path(d), setup)
        for action in schedule:
            w.act(action)
            check(w, final=False)
        w.settle()
        check(w, final=True)
        return w


def check(w: World, *, final: bool) -> None:
    broken = [str(v) for v in promises.check_journal(w.events())]
    broken += platform_stops_are_never_completions(w)
    broken += a_preemption_keeps_the_trainers_step(w)
    if final:
        broken += the_run_never_waits_on_nothing(w)
        broken += the_root_cause_is_a_real_fault(w)
        broken += a_run_no_fault_struck_has_no_failures(w)
        broken += how_it_ended_is_true(w)
    assert not broken, "\n".join(broken) + "\n\njournal:\n" + "\n".join(_short(e) for e in w.events())


def platform_stops_are_never_completions(w: World) -> list[str]:
    """An attempt the platform sent SIGTERM to (a requeue, a preemption) is never ``completed``."""
    attempts: dict[str, int] = {}
    out = []
    for e in w.events():
        c = e.get("component")
        if e.get("kind") in ("started", "adopted"):
            attempts[c] = e.get("attempt")
        elif e.get("kind") == "completed" and (c, attempts.get(c)) in w.truth.platform_exits:
            out.append(f"completed only by itself: {c} attempt {attempts.get(c)} was ended by the platform's "
                       f"SIGTERM and recorded completed (seq {e['seq']})")
    return out


def a_preemption_keeps_the_trainers_step(w: World) -> list[str]:
    """A preemption that asked the trainer to checkpoint while it could (alive, not hung) ends with the trainer
    standing at that step or later (the run waited for the checkpoint before it stopped the trainer), or, where
    the trainer did not get to write it (a fault, the platform's own SIGTERM), with a flag that says so."""
    end = next((e for e in reversed(w.events()) if e.get("kind") == "run_ended"), None)
    if not w.ended or end is None or end.get("outcome") != "preempted" or w.truth.preempt_step is None:
        return []
    stands = ((end.get("checkpoints") or {}).get("trainer") or {}).get("step")
    if stands is not None and stands >= w.truth.preempt_step:
        return []  # (its periodic checkpoint may have come first: a newer one is what rlsup waits for)
    if w.truth.preempt_written is not None:
        if stands is None or stands < w.truth.preempt_written or w.truth.preempt_written < w.truth.preempt_step:
            return [f"a preemption lost work: the trainer was asked at step {w.truth.preempt_step}, wrote step "
                    f"{w.truth.preempt_written}, and the run ended standing at {stands}"]
        return []
    flagged = any(e.get("kind") == "flag" and e.get("type") == "checkpoint_problem" and e.get("component") == "trainer"
                  for e in promises.runs(w.events())[-1])
    return [] if flagged else [f"the trainer was asked to checkpoint at step {w.truth.preempt_step}, wrote nothing, "
                               "and nothing says so"]


def the_run_never_waits_on_nothing(w: World) -> list[str]:
    """A run never waits for what cannot come: once nothing is due, no component is pending on a dependency
    that has ended (completed, or fatal), and a run with nothing left running has ended, unless a person
    stopped a component (a start command may follow)."""
    if not w.live or w.ended:
        return []
    if w.truth.run_stops:
        return [f"the run did not end after it was stopped (a down or a signal at {w.truth.run_stops})"]
    states = {n: life.state for n, life in w.lives.items()}
    if any(s == "stopped" for s in states.values()) or any(s in ("starting", "stopping", "backoff")
                                                            for s in states.values()):
        return []
    stuck = {n: life.waiting for n, life in w.lives.items() if life.state == "pending" and any(
        f"now {s})" in reason for reason in life.waiting for s in ("completed", "fatal"))}
    if stuck:
        return [f"the run waits on ended dependencies: {stuck}"]
    if not any(p is not None for p in w.procs.values()):
        return [f"the run waits on nothing: {states}"]
    return []


def the_root_cause_is_a_real_fault(w: World) -> list[str]:
    """`rlsup diagnose` names as the root cause a fault that was injected (never the starvation or the
    connection errors it caused downstream), and never shows a fault injected into a later attempt (once that
    attempt was up: ready) as a consequence of an earlier one of the same component."""
    failed = any(e.get("kind") in ("fatal", "flag") or (e.get("kind") == "exited" and e.get("exit_code") not in (0, 143))
                 for e in w.events())
    if not w.truth.injected or not failed or w.truth.user_stops or w.truth.run_stops:
        return []  # (a person's stop is a cause the oracle cannot weigh: a peer waiting on it stalls)
    if all((c, a) in _ended_by_a_stop(w) for c, _, a, _ in w.truth.injected):
        return []  # each fault struck an attempt a stop was ending: its exit was the one asked for
    hangs = {c for c, k, _, _ in w.truth.injected if k == "hang"}
    if hangs and {c for c, _, _, _ in w.truth.injected} - hangs:
        return []  # a hang beside a fault elsewhere: which one starved the other is not the oracle's to say
    rd = diagnose_run(w.flush())
    rc = rd.root_cause
    injected = {(c, k) for c, k, _, _ in w.truth.injected}
    out = []
    if rc is None:
        return [f"root cause: none, injected {w.truth.injected}"]
    if rc.component not in {c for c, _ in injected} or (rc.category == "stall" and (rc.component, "hang") not in injected):
        out.append(f"root cause: {rc.component} {rc.category} ({rc.summary}), injected {w.truth.injected}")
    own = [(a, k, t) for c, k, a, t in w.truth.injected if c == rc.component]
    first = min((a for a, _, _ in own), default=0)
    # a later attempt's fault counts as independent once that attempt was up (ready) before it struck: one that
    # dies while it starts may well be what the earlier fault left behind (a port, GPU memory, a torn file)
    ready_at: dict[tuple[str, int | None], float] = {}
    attempt: dict[str, int | None] = {}
    for e in w.events():
        if e.get("kind") == "started":
            attempt[e["component"]] = e.get("attempt")
        elif e.get("kind") == "ready":
            ready_at.setdefault((e["component"], attempt.get(e["component"])), e["ts"])
    later = {cat for a, k, t in own if a > first and ready_at.get((rc.component, a), float("inf")) <= t
             for cat in CATEGORIES[k]} - {rc.category}
    for s in rd.symptoms:
        if s.component == rc.component and s.category in later and s.count:
            out.append(f"independent faults linked: {s.component} {s.category} (a fault of a later attempt) listed "
                       f"as a consequence of {rc.component} {rc.category}, injected {w.truth.injected}")
    return out


def a_run_no_fault_struck_has_no_failures(w: World) -> list[str]:
    """`rlsup diagnose` lists no failure in a run no fault struck (none injected, no exit to the platform's
    SIGTERM): what a person's stops and restarts starved waited, it did not fail (the fault explorer's promise)."""
    if w.truth.injected or w.truth.platform_exits:
        return []
    rd = diagnose_run(w.flush())
    return [f"diagnose lists failures in a run no fault struck: {rd.verdict}"] if rd.failures else []


def _ended_by_a_stop(w: World) -> set[tuple[str, int | None]]:
    """(component, attempt) of each attempt whose exit came while a stop that rlsup did not force on its own
    verdict was ending it (`stopping` by a person or by the run's shutdown): rlsup takes that exit for the one
    it asked for, as a program may exit 1 on SIGTERM (torchrun does)."""
    attempt: dict[str, int | None] = {}
    asked: set[str] = set()
    out = set()
    for e in w.events():
        c = e.get("component")
        if e.get("kind") in ("started", "adopted"):
            attempt[c] = e.get("attempt")
            asked.discard(c)
        elif e.get("kind") == "stopping" and e.get("by") != "rlsup":
            asked.add(c)
        elif e.get("kind") == "exited" and c in asked:
            out.add((c, attempt.get(c)))
    return out


# What the exit diagnosis calls each injected fault.
CATEGORIES = {"crash": ("python_exception",), "oom": ("killed", "host_oom"), "disk_full": ("disk_full",),
              "die": ("inference_engine_dead",), "hang": ("stall",), "exit0": ("false_success",)}


def how_it_ended_is_true(w: World) -> list[str]:
    """`rlsup up` on the ended run says "completed" only of a run that ran to its end."""
    if not w.ended:
        return []
    said = how_it_ended(RunPaths(w.flush())) or ""
    final = {e.get("component"): e for e in promises.runs(w.events())[-1]
             if e.get("kind") in ("completed", "fatal", "stopped")}
    end = next(e for e in reversed(w.events()) if e.get("kind") == "run_ended")
    stopped = bool(w.truth.run_stops) or (not str(end.get("reason")).endswith("(exit_on_end)") and any(
        e.get("kind") == "stopped" and e.get("by") == "user" for e in final.values()))
    if said.startswith("completed") and (stopped or w.exit_code != 0):
        return [f"how it ended: {said!r}, yet the run was stopped or failed"]
    return []


def _short(e: dict) -> str:
    keep = ("seq", "kind", "component", "attempt", "exit_code", "signal", "by", "type", "reason", "outcome")
    return " ".join(f"{k}={e[k]}" for k in keep if e.get(k) not in (None, "", []))


@pytest.mark.timeout(1800)  # CPU-bound: about 40 ms a schedule on one idle core, many times that under load
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@(seed(int(SEED)) if SEED else lambda test: test)  # a seed overrides derandomize
@given(setup=setups, schedule=st.lists(actions, min_size=1, max_size=8))
def test_random_schedules_keep_every_promise(setup: Setup, schedule: list[tuple]) -> None:
    run(setup, schedule)


def test_consumers_of_a_dead_server_show_dependency_down():
    """The world models dependency_down: consumers print connection refused while the server has no process;
    a server rlsup gave up on is started again for them (and their flags clear once it is back); one a person
    stopped is not, and its consumers are stopped once it has been down for the budget."""
    w = run(Setup(max_restarts=1), [("wait", 3.0), ("fault", "inference", "die", 5), ("wait", 45.0),
                                    ("fault", "inference", "die", 5), ("wait", 45.0)])
    ev = w.events()
    assert {e["component"] for e in ev if e["kind"] == "flag" and e.get("type") == "dependency_down"} == {
        "orchestrator", "trainer"}
    assert any(e["kind"] == "command" and e.get("client") == "dependency_down" for e in ev)
    assert {e["component"] for e in ev if e["kind"] == "flag_cleared" and e.get("type") == "dependency_down"} == {
        "orchestrator", "trainer"}
    assert ev[-1]["kind"] == "run_ended" and ev[-1]["outcome"] == "completed"
    w = run(Setup(), [("wait", 15.0), ("user", "stop", "inference"), ("wait", 45.0)] + [("wait", 45.0)] * 3)
    ev = w.events()
    assert not any(e["kind"] == "command" and e.get("client") == "dependency_down" for e in ev)
    assert [e["component"] for e in ev if e["kind"] == "stopped" and e.get("by") == "dependency_down"] == [
        "orchestrator", "trainer"]
    assert any("Connection refused" in x for x in w.logs["orchestrator"])
