"""The explorer's sequences (pure, fast tier): a seed gives one sequence, always the same; over a budget of
seeds every kind of fault and action is drawn; the printed line says how to replay it."""

from __future__ import annotations

from collections import Counter

from tests.explorer.sequence import CHAOS, COMPONENTS, KINDS, generate


def test_a_seed_gives_one_sequence_always_the_same() -> None:
    assert generate(7) == generate(7)
    assert len({generate(s).describe() for s in range(50)}) == 50


def test_the_printed_line_replays_it() -> None:
    seq = generate(1234)
    line = seq.describe()
    assert line.startswith("RLSUP_EXPLORE_SEED=1234: ") and f"steps {seq.steps}" in line
    assert all(str(a) in line for a in seq.actions) and line.endswith(seq.ending)


def test_a_budget_of_seeds_draws_every_fault_action_and_chaos_knob() -> None:
    seqs = [generate(s) for s in range(60)]
    kinds = Counter(a.kind for q in seqs for a in q.actions)
    assert set(kinds) == set(KINDS), set(KINDS) - set(kinds)
    knobs = {v.split("@")[0] for q in seqs for v in q.chaos.values()}
    assert knobs == {k for ks in CHAOS.values() for k in ks} | {"none"}
    assert {q.ending for q in seqs} == {"down", "finish"}
    assert {a.target for q in seqs for a in q.actions if KINDS[a.kind][1] == "component"} == set(COMPONENTS)


def test_actions_wait_for_later_steps_of_the_run() -> None:
    for s in range(40):
        seq = generate(s)
        ats = [a.at for a in seq.actions]
        assert ats == sorted(ats) and all(0 <= at < seq.steps for at in ats)
        assert 3 <= len(seq.actions) <= 6


def test_without_a_disk_to_fill_no_sequence_fills_one() -> None:
    assert not any(a.kind == "disk_full" for s in range(60) for a in generate(s, disk=False).actions)
    assert generate(5, disk=False).chaos == generate(5).chaos  # the rest of the sequence is the same


def test_the_environment_sets_every_knob() -> None:
    env = generate(3).env()
    assert set(env) == {"RLSUP_DEMO_STEPS", "RLSUP_CHAOS_INFERENCE", "RLSUP_CHAOS_ORCHESTRATOR", "RLSUP_CHAOS_TRAINER"}
