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
    (("sglang", "0.4.6"), {}),
    (("sglang", "0.5.2"), {}),
    (("sglang", "0.5.23"), {}),
    (("vllm", "0.10.2"), {}),
    (("vllm", "0.11.0"), {}),
    (("vllm", "0.14.1"), {}),
    (("vllm", "0.15.1"), {}),
    (("vllm", "0.16.0"), {}),
    (("vllm", "0.16.0"), {"pause_fails": True}),
    (("vllm", "0.25.1"), {}),
    (("vllm", "0.26.0"), {}),
    (("vllm", "0.30.0"), {"pause_fails": True, "busy_resets": 2}),
    (("vllm", "0.33.0"), {}),
]


def _case_id(c: tuple) -> str:
    return f"{c[0][0]}-{c[0][1]}" + "".join(f"-{k}" for k in sorted(c[1]))


@pytest.mark.parametrize("server", CASES, indirect=True, ids=_case_id)
def test_each_version_loads_and_latest_json_records_it(server: EngineServer, tmp_path: Path) -> None:
    out = io.StringIO()
    ws = WeightSync(server.url, server.kind, tmp_path / "weights", retry_s=0.01, out=out)
    for step in (0, 1, 2):
        server.inflight = 3  # the orchestrator always has requests running when weights are published
        r = ws.publish(step, _dir(tmp_path, step))
        assert r.loaded, r.detail
        assert server.serving == str(tmp_path / "weights" / f"step_{step}")
    latest = json.loads((tmp_path / "weights" / "latest.json").read_text())
    assert latest["step"] == 2 and latest["path"] == server.serving
    assert ws.engine is not None and ws.engine.raw == server.version
    assert out.getvalue() == ""  # never stale
    assert server.aborted == 0, "a /pause aborted the orchestrator's running requests"
    assert server.deprecated_calls == []  # SGLang >= 0.5.6: /model_info and /server_info, not the get_ ones
    calls = [c for c, _ in server.calls]
    rpc = [b for c, b in server.calls if c == "POST /collective_rpc"]
    if server.kind == "vllm" and server.v < (0, 16):
        # no weights_path before 0.16.0: the model path is set with update_config, then reload_weights()
        assert [b["method"] for b in rpc[:2]] == ["update_config", "reload_weights"] and rpc[1]["kwargs"] == {}
    elif server.kind == "vllm":
        assert [b["method"] for b in rpc] == ["reload_weights"] * 3
    if server.rl_routes and not server.pause_fails:
        assert "POST /resume" in calls and not any(c.startswith("POST /reset_prefix_cache") for c in calls) and not server.paused
        pauses = [c for c in calls if c.startswith("POST /pause?")]
        want = "mode=wait" if server.v >= (0, 16) else "wait_for_inflight_requests=true"
        assert len(pauses) == 3 and all(want in c for c in pauses), pauses
    elif server.kind == "vllm":  # no RL routes (< 0.12.0) or /pause failed: reload, then reset the cache
        assert "POST /resume" not in calls and not server.paused
        resets = sum(c.startswith("POST /reset_prefix_cache") for c in calls)
        assert resets == 3 + (2 if server.v >= (0, 26) else 0)  # {"success": false} twice: retried
        assert len(rpc) == 3 * (2 if server.v < (0, 16) else 1)  # retried, not reloaded again


def test_version_detection_needs_no_hint(tmp_path: Path) -> None:
    for kind, version in (("sglang", "0.4.6"), ("sglang", "0.5.23"), ("vllm", "0.11.0"), ("vllm", "0.33.0")):
        s = EngineServer(kind, version)
        try:
            e = detect(s.url, "auto")
        finally:
            s.close()
        assert (e.kind, e.raw) == (kind, version)
        assert e.rl_router == s.rl_routes
        assert "GET /version" in [c for c, _ in s.calls]  # SGLang: 404, then /server_info
        assert s.deprecated_calls == []


def test_pause_query_never_aborts() -> None:
    # What each version's /pause reads (servers.py): before 0.16.0 only wait_for_inflight_requests.
    assert "wait_for_inflight_requests=true" in sync_mod.pause_query((0, 15, 1))
    assert "mode=wait" not in sync_mod.pause_query((0, 12, 0))
    assert sync_mod.pause_query((0, 16, 0)).startswith("mode=wait")
    unknown = sync_mod.pause_query(None)
    assert "mode=wait" in unknown and "wait_for_inflight_requests=true" in unknown


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


def test_no_dev_mode_on_0_15_does_not_drain_the_server_every_step(tmp_path: Path) -> None:
    """vLLM 0.12.0-0.15.1 attach /pause without dev mode, but /collective_rpc needs it: pausing (which waits for
    every running request) for a reload that cannot happen would stall generation each step."""
    s = EngineServer("vllm", "0.15.1", dev_mode=False)
    try:
        ws = WeightSync(s.url, "vllm", tmp_path / "weights", tries=1, out=io.StringIO())
        results = [ws.publish(step, _dir(tmp_path, step)) for step in range(4)]
        assert not any(r.loaded for r in results) and "VLLM_SERVER_DEV_MODE=1" in results[-1].detail
        assert sum(c.startswith("POST /pause") for c, _ in s.calls) == 1 and not s.paused
        s.dev_mode = True  # restarted with VLLM_SERVER_DEV_MODE=1: picked up at the next publish
        assert ws.publish(4, _dir(tmp_path, 4)).loaded and s.serving == str(tmp_path / "weights" / "step_4")
        assert ws.publish(5, _dir(tmp_path, 5)).loaded
        assert sum(c.startswith("POST /pause") for c, _ in s.calls) == 2 and s.aborted == 0
    finally:
        s.close()


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
