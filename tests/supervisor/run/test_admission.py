"""Issue 43 item 6 / 44 item 2: admitting thousands of pending components reads only what their gates
look at (their dependencies), not a view of every component per pass: no quadratic step at start."""

from __future__ import annotations

from rlsup.supervisor.config.loader import load_config
from rlsup.supervisor.rules import lifecycle as lc
from rlsup.supervisor.run import runview
from rlsup.supervisor.run.run import Run
from tests.conftest import write_config

N = 400


def _admitted(tmp_path, monkeypatch, text: str) -> tuple[dict[str, lc.Input], int]:
    cfg = load_config(write_config(tmp_path, text), run_dir=str(tmp_path / "run"))
    run = Run(cfg, serve=False)
    run._build_components(cfg.topo_order())
    fed: dict[str, lc.Input] = {}
    for c in run.components.values():
        c.handle = lambda inp, n=c.name: fed.__setitem__(n, inp)  # type: ignore[method-assign]
    reads = []
    real = runview.seen_one
    monkeypatch.setattr(runview, "seen_one", lambda *a: reads.append(a[0].name) or real(*a))
    run._admit_pending()
    return fed, len(reads)


def test_components_without_dependencies_are_admitted_without_reading_the_others(tmp_path, monkeypatch):
    lines = "".join(f"  c{i}: {{command: [/bin/true]}}\n" for i in range(N))
    fed, reads = _admitted(tmp_path, monkeypatch, f"name: many\ncomponents:\n{lines}")
    assert len(fed) == N and all(isinstance(i, lc.DepsMet) for i in fed.values())
    assert reads == 0  # it was N a pass: a view of every component, thrown away


def test_a_gate_reads_its_dependencies_only(tmp_path, monkeypatch):
    lines = "".join(f"  c{i}: {{command: [/bin/true], depends_on: [hub]}}\n" for i in range(N))
    fed, reads = _admitted(tmp_path, monkeypatch, f"name: many\ncomponents:\n  hub: {{command: [/bin/true]}}\n{lines}")
    assert isinstance(fed["hub"], lc.DepsMet)
    assert all(isinstance(fed[f"c{i}"], lc.DepsWaiting) for i in range(N))
    assert reads <= 2  # the hub, once (again once it moved)
