"""rlsup.trainer.sync.WeightSync against servers that answer as each engine version does (servers.py
cites the upstream route for every reply)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from servers import EngineServer

from rlsup.trainer import sync as sync_mod
from rlsup.trainer.sync import WeightSync, detect


def _dir(tmp: Path, step: int) -> Path:
    d = tmp / "weights" / f"step_{step}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "STABLE").write_text("")
    return d


@pytest.fixture
def server(request):  # type: ignore[no-untyped-def]
    s = EngineServer(*request.param[0], **request.param[1])
    yield s
    s.close()


CASES = [
    (("sglang", "0.5.2"), {}),
    (("vllm", "0.14.1"), {}),
    (("vllm", "0.16.0"), {}),
    (("vllm", "0.30.0"), {"busy_resets": 2}),
    (("vllm", "0.33.0"), {"rl_router": True}),
]


@pytest.mark.parametrize("server", CASES, indirect=True, ids=lambda c: f"{c[0][0]}-{c[0][1]}")
def test_each_version_loads_and_latest_json_records_it(server: EngineServer, tmp_path: Path) -> None:
    out = io.StringIO()
    ws = WeightSync(server.url, server.kind, tmp_path / "weights", retry_s=0.01, out=out)
    for step in (0, 1, 2):
        r = ws.publish(step, _dir(tmp_path, step))
        assert r.loaded, r.detail
        assert server.serving == str(tmp_path / "weights" / f"step_{step}")
    latest = json.loads((tmp_path / "weights" / "latest.json").read_text())
    assert latest["step"] == 2 and latest["path"] == server.serving
    assert ws.engine is not None and ws.engine.raw == server.version
    assert out.getvalue() == ""  # never stale
    calls = [c for c, _ in server.calls]
    if server.v == (0, 14):
        # no weights_path on 0.14: the model path is set with update_config, then reload_weights()
        rpc = [b for c, b in server.calls if c == "POST /collective_rpc"]
        assert [b["method"] for b in rpc[:2]] == ["update_config", "reload_weights"] and rpc[1]["kwargs"] == {}
    if server.rl_router:
        assert "POST /pause?mode=wait&clear_cache=true" in calls and "POST /resume" in calls
        assert "POST /reset_prefix_cache" not in calls and not server.paused
    if server.v == (0, 30):  # {"success": false} twice, then true: retried, not redone
        assert calls.count("POST /reset_prefix_cache") == 3 + 2
        assert sum(1 for b in (b for c, b in server.calls if c == "POST /collective_rpc")) == 3


def test_empty_200_body_of_vllm_0_16_does_not_crash(tmp_path: Path) -> None:
    s = EngineServer("vllm", "0.16.0")
    try:
        r = sync_mod.request("POST", f"{s.url}/reset_prefix_cache")
        assert r.status == 200 and r.text == "" and r.data is None  # what json.loads choked on
        assert WeightSync(s.url, "vllm", tmp_path / "weights").publish(1, _dir(tmp_path, 1)).loaded
    finally:
        s.close()


def test_stale_server_is_flagged_once_and_latest_json_not_written(tmp_path: Path) -> None:
    s = EngineServer("sglang", "0.5.2", fail_loads=True)
    out = io.StringIO()
    try:
        ws = WeightSync(s.url, "sglang", tmp_path / "weights", stale_after=2, tries=1, out=out)
        results = [ws.publish(step, _dir(tmp_path, step)) for step in range(6)]
    finally:
        s.close()
    assert not any(r.loaded for r in results)
    assert "HTTP 400" in results[0].detail and "Failed to get weights iterator" in results[0].detail
    assert not (tmp_path / "weights" / "latest.json").exists()
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlsup-flag: weights_stale: ")
    assert "no weights published by this run" in lines[0] and "step 2 is published" in lines[0]


def test_missing_dev_mode_and_dead_server_are_reported_not_raised(tmp_path: Path) -> None:
    s = EngineServer("vllm", "0.16.0", dev_mode=False)
    try:
        r = WeightSync(s.url, "vllm", tmp_path / "weights", tries=1).publish(1, _dir(tmp_path, 1))
        assert not r.loaded and "VLLM_SERVER_DEV_MODE=1" in r.detail
    finally:
        s.close()
    dead = WeightSync(s.url, "vllm", tmp_path / "weights", tries=1, retry_s=0.0)
    r = dead.publish(2, _dir(tmp_path, 2))
    assert not r.loaded and dead.loaded_step is None


def test_flag_recovers_and_can_fire_again(tmp_path: Path) -> None:
    s = EngineServer("sglang", "0.5.2", fail_loads=True)
    out = io.StringIO()
    try:
        ws = WeightSync(s.url, "sglang", tmp_path / "weights", stale_after=1, tries=1, out=out)
        for step in range(3):
            ws.publish(step, _dir(tmp_path, step))
        s.fail_loads = False
        assert ws.publish(3, _dir(tmp_path, 3)).loaded and not ws.flagged
        s.fail_loads = True
        for step in range(4, 7):
            ws.publish(step, _dir(tmp_path, step))
    finally:
        s.close()
    assert len(out.getvalue().splitlines()) == 2
    assert "serves weights step 3" in out.getvalue().splitlines()[1]


def test_detect_engines(tmp_path: Path) -> None:
    for kind, version in (("sglang", "0.5.2"), ("vllm", "0.14.1")):
        s = EngineServer(kind, version, rl_router=(kind == "vllm"))
        try:
            e = detect(s.url, "auto")
            assert (e.kind, e.raw) == (kind, version)
            assert e.rl_router == (kind == "vllm")
        finally:
            s.close()
