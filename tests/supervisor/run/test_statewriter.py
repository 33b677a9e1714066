"""state.json's text: what a reader parses back, one line per component."""

from __future__ import annotations

import json

from rlsup.supervisor.records import state as state_mod
from rlsup.supervisor.run.statewriter import encode


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
