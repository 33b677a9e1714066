"""state.json: its text (what a reader parses back, one line per component) and what it saves."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from rlsup.supervisor.config.loader import load_config
from rlsup.supervisor.records import state as state_mod
from rlsup.supervisor.run.run import Run
from rlsup.supervisor.run.statewriter import encode
from tests.conftest import write_config


def test_state_json_is_the_state_one_component_a_line():
    state = state_mod.initial({}, [f"c{i}" for i in range(3)])
    state["components"]["c1"]["last_exit"] = {"exit_code": 0, "diagnosis": {"evidence": ["a\nb", "\u00e9"]}}
    text = encode(state_mod.view(state, 0.0)).decode()
    assert json.loads(text) == state_mod.view(state, 0.0)
    lines = text.splitlines()
    assert [ln.split(":")[0].strip() for ln in lines if ln.startswith("  ")] == ['"c0"', '"c1"', '"c2"']
    assert json.loads(encode({"run": {}, "components": {}})) == {"run": {}, "components": {}}


def test_the_view_is_a_copy():
    state = state_mod.initial({}, ["a"])
    state["components"]["a"]["flags"] = [{"type": "stall", "evidence": ["x"]}]
    out = state_mod.view(state, 0.0)
    out["components"]["a"]["flags"][0]["evidence"].append("y")
    out["components"]["a"]["flags"].append({})
    assert state["components"]["a"]["flags"] == [{"type": "stall", "evidence": ["x"]}]


def test_the_step_saved_is_the_one_the_lines_up_to_the_saved_log_position_say(tmp_path):
    """The fault explorer (RLSUP_EXPLORE_SEED=90): state.json held a log position past the orchestrator's last
    `Step 33/33` line and the step before it (progress is folded into the state in batches); the supervisor
    was killed (-9) in between, the next one read on from that position, never saw the steps again, and took
    the orchestrator's exit 0 at its end for a false success ("exited 0 at no step of 33") and restarted it.
    Here the state is taken right after each read of the log, before any batch is folded in."""
    cfg = write_config(tmp_path, """
        components:
          counter:
            command: ["{py}", "-c", "import time\\nfor i in range(1, 6): print(f'Step {i}/5', flush=True); time.sleep(0.05)\\ntime.sleep(60)"]
            progress: {pattern: 'Step (?P<step>\\d+)/(?P<total>\\d+)'}
    """)
    run = Run(load_config(str(cfg), run_dir=str(tmp_path / "run")), serve=False)
    run.prepare()
    saved: list[tuple[int | None, int | None]] = []  # (the step saved, the step read)

    def on_lines(comp: Any) -> None:
        saved.append((run.snapshot_state(with_positions=True)["components"]["counter"]["step"], comp.progress.step))
        if comp.progress.step == 5:
            run.request_shutdown("seen")

    run.line_listeners.append(on_lines)

    async def main() -> int:
        asyncio.get_running_loop().call_later(30, run.request_shutdown, "test timeout")
        return await run.run()

    asyncio.run(main())
    assert saved and saved[-1][1] == 5, saved
    assert all(s == r for s, r in saved), saved
