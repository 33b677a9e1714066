"""A stall flag belongs to the attempt that stalled: it is cleared when that attempt ends (a restart,
a completion), so a finished or restarted component does not stay flagged "stall" for good."""

from __future__ import annotations

import json
import sys

from tests.conftest import write_config

CONFIG = """
name: stallclear
components:
  trainer:
    command: ["{py}", "-u", "-c", "import time\\nprint('Step 5/5 | reward 1.0', flush=True)\\ntime.sleep(4)"]
    progress: {{preset: rlsup, stall_after: 1}}
"""


def test_the_stall_flag_clears_when_its_attempt_ends(tmp_path, headless):
    cfg = write_config(tmp_path, CONFIG.format(py=sys.executable))
    h = headless(cfg)
    h.wait_event(lambda e: e.get("kind") == "flag" and e.get("type") == "stall", 30, "the stall flag")
    assert h.wait(60) == 0, h.output
    events = h.events()
    kinds = [(e["kind"], e.get("type")) for e in events if e.get("component") == "trainer"]
    raised = kinds.index(("flag", "stall"))
    assert ("flag_cleared", "stall") in kinds[raised:], kinds
    assert kinds.index(("flag_cleared", "stall")) < kinds.index(("completed", None))
    state = json.loads((h.run_dir / "state.json").read_text())
    assert not state["components"]["trainer"]["flags"]
