"""The reference stack under `rlsup up --headless`."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import free_port, kinds

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.slow
def test_demo_runs_to_completion(tmp_path, headless):
    env = {"RLSUP_DEMO_PORT": str(free_port()), "RLSUP_DEMO_STEPS": "30"}
    h = headless(CONFIGS / "demo.yaml", env=env)
    assert h.wait(240) == 0, h.output
    ev = h.events()
    assert kinds(ev, "trainer")[-1] == "completed"
    ready = next(e for e in ev if e["kind"] == "ready" and e["component"] == "inference")
    assert all(e["ts"] >= ready["ts"] for e in ev if e["kind"] == "started" and e["component"] != "inference")
    exited = next(e for e in ev if e["kind"] == "exited" and e["component"] == "trainer")
    assert exited["step"] == 30 and exited["exit_code"] == 0
