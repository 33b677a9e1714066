"""Issue 26 item 7: ``started`` events are written in dependency order.

``depends_on: [a]`` means "a has started". A dependency counted as started as soon as its spawn
was asked for, so a whole chain was spawned at once and the monitors' replies (in any order) wrote
``started`` for a consumer before its dependency's. Now a dependency counts once its process
exists: its ``started`` event is written before any consumer is spawned.
"""

from __future__ import annotations

from rlsup.supervisor.config.loader import load_config
from rlsup.supervisor.rules import detectors
from rlsup.supervisor.rules import lifecycle as lc
from tests.conftest import write_config

CHAIN = 16


def _chain_config(tmp_path):
    lines = ["name: order", "components:"]
    for i in range(CHAIN):
        lines.append(f"  c{i}:\n    command: ['sleep', '1000']" + (f"\n    depends_on: [c{i - 1}]" if i else ""))
    return write_config(tmp_path, "\n".join(lines) + "\n")


def test_a_dependency_being_spawned_has_not_started(tmp_path) -> None:
    cfg = load_config(_chain_config(tmp_path), run_dir=str(tmp_path / "run"))
    seen = {n: detectors.Seen(n, "pending") for n in cfg.components}
    seen["c0"] = detectors.Seen("c0", "starting", attempt=1, started_at=None)  # spawn asked, no process yet
    assert isinstance(detectors.gate("c1", cfg, seen), lc.DepsWaiting)
    seen["c0"] = detectors.Seen("c0", "starting", attempt=1, started_at=12.5)  # spawned, readiness pending
    assert isinstance(detectors.gate("c1", cfg, seen), lc.DepsMet)
    seen["c0"] = detectors.Seen("c0", "running", attempt=1, started_at=12.5, ready_at=13.0)
    assert isinstance(detectors.gate("c1", cfg, seen), lc.DepsMet)


def test_started_events_of_a_chain_come_in_dependency_order(tmp_path, headless) -> None:
    h = headless(_chain_config(tmp_path))
    h.wait_event(lambda e: e["kind"] == "started" and e["component"] == f"c{CHAIN - 1}", timeout=60,
                 what="the last of the chain started")
    started = [e["component"] for e in h.events() if e["kind"] == "started"]
    assert started == [f"c{i}" for i in range(CHAIN)], started
