"""children_map: one pass over /proc serves many questions; a slow pass (thousands of processes) is made
less often, so that reading /proc stays a small share of the supervisor's time (issue 44 item 2)."""

from __future__ import annotations

import types

from rlsup.supervisor.monitor import process


def _passes(monkeypatch, cost: float, questions: int, every: float) -> int:
    clock = [1000.0]
    passes = []

    def scan() -> dict[int, list[int]]:
        passes.append(clock[0])
        clock[0] += cost  # the pass takes this long
        return {1: [2]}

    monkeypatch.setattr(process, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(process.shim, "_children_map", scan)
    monkeypatch.setattr(process, "_children", (-1e9, {}))
    monkeypatch.setattr(process, "_children_cost", 0.0, raising=False)
    for _ in range(questions):
        assert process.children_map() == {1: [2]}
        clock[0] += every
    return len(passes)


def test_a_quick_pass_is_reused_for_a_fifth_of_a_second(monkeypatch):
    assert _passes(monkeypatch, cost=0.001, questions=100, every=0.01) == 5  # 1 s of questions


def test_a_slow_pass_is_made_at_most_a_tenth_of_the_time(monkeypatch):
    # 0.1 s a pass (thousands of processes), a question every 10 ms for about 11 s: a pass a second or so,
    # not one every 0.2 s (half of the time spent reading /proc).
    n = _passes(monkeypatch, cost=0.1, questions=1000, every=0.01)
    assert 9 <= n <= 12
