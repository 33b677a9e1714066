"""A real SGLang (0.5.23, CPU) under `rlsup up -d`, driven by rlsup's weight sync (rlsup.trainer.sync)."""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import engine_python
from harness import EngineRun, Load, refuses_a_wrong_shape_first_publish, serving, wait_for
from recording import exchange, load, save

from rlsup.trainer import reloads
from rlsup.trainer import weights as weights_mod
from rlsup.trainer.orchestrator import neutral_sampling
from rlsup.trainer.sync import WeightSync, detect, rlsup_restart


@pytest.fixture
def sglang(tmp_path: Path):  # type: ignore[no-untyped-def]
    with serving(EngineRun(tmp_path, "sglang", engine_python("sglang"))) as run:
        yield run


def test_sglang_weight_sync_readiness_and_restart(sglang: EngineRun) -> None:
    run = sglang
    e = detect(run.url, "vllm")  # a wrong hint: SGLang has no /version (404), its version is in /server_info
    assert (e.kind, e.version) == ("sglang", (0, 5, 23)), e
    recorded: list[dict] = [exchange(run.url, "GET", "/version"), exchange(run.url, "GET", "/health"),
                            exchange(run.url, "GET", "/v1/models")]
    assert recorded[0]["status"] == 404 and recorded[1]["status"] == 200

    # SGLang does not take unset sampling params from generation_config.json (top_k=1 there).
    for body in ({"temperature": 1.0, "n": 6}, {**neutral_sampling(1.0), "n": 6}):
        r = run.complete(body)
        assert r["status"] == 200 and len({c["text"] for c in r["body"]["choices"]}) > 1, r

    # A wrong-shape FIRST publish (no latest.json): checked against the model SGLang says it serves (/model_info)
    refuses_a_wrong_shape_first_publish(run)

    out = io.StringIO()
    ws = WeightSync(run.url, "sglang", run.weights, tries=3, retry_s=1.0, out=out,
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
            assert json.loads((run.weights / "latest.json").read_text())["step"] == step
            recorded.append(exchange(run.url, "GET", "/v1/models"))  # the served name becomes the path
            assert recorded[-1]["body"]["data"][0]["id"] == str(path)
    finally:
        results = load_.finish()
    assert all(x["status"] == 200 for x in results), [x for x in results if x["status"] != 200][:3]
    for t0, _t1 in windows:
        assert any(x["t0"] <= t0 < x["t1"] for x in results), (windows, results)
    assert len(set(greedy)) == len(greedy), f"greedy output did not change with the weights: {greedy}"
    step3 = greedy[-1]
    # Each reload tagged SGLang's weight version; every completion's reply names the weights that made it.
    meta = run.complete(neutral_sampling(0.0))["body"].get("metadata") or {}
    assert meta.get("weight_version") == "3", meta
    assert reloads.from_versions(meta.get("weight_versions") or meta["weight_version"]) == reloads.Label(3), meta

    # A bad path fails cleanly (400) and leaves the server serving step 3: no restart.
    attempt = run.status()["attempt"]
    bad = run.weights.parent / "missing"
    recorded.append(exchange(run.url, "POST", "/update_weights_from_disk", {"model_path": str(bad)}))
    assert recorded[-1]["status"] == 400 and recorded[-1]["body"]["success"] is False
    r = ws.publish(4, bad)
    assert not r.loaded and not r.broken, r.detail
    assert run.greedy() == step3 and run.status()["attempt"] == attempt

    # A wrong-shape checkpoint: refused before SGLang sees it (0.5.23 dies on one), even once the served dir was
    # pruned (latest.json keeps its shapes) ...
    shutil.rmtree(run.weights / "step_3")
    wide = run.publish(5, run.wide)
    r = ws.publish(5, wide)
    assert not r.loaded and not r.broken and "rejected before loading" in r.detail, r.detail
    assert "weights step 3" in r.detail, r.detail
    assert (wide / weights_mod.REJECTED).exists() and run.status()["attempt"] == attempt
    # ... sent to it directly, 0.5.23 answers 200 to this one (an MLP wider than the model: the loader takes a
    # slice) and serves weights nobody trained: why it is refused.
    recorded.append(exchange(run.url, "POST", "/update_weights_from_disk", {"model_path": str(wide)}))
    # (SGLang's death and rlsup's restart of it onto the newest published weights are in test_loop.py: there it
    # dies of a wrong-shape checkpoint while rlsup's orchestrator and trainer run.)
    assert WeightSync(run.url, "sglang", run.weights, out=io.StringIO()).publish(6, run.publish(6, run.trained[0])).loaded
    assert run.greedy() == greedy[1]

    paths = {str(run.weights.parent): "<work>", str(run.tmp / "models"): "<models>"}
    if os.environ.get("RLSUP_RECORD_FIXTURES") == "1":
        save("sglang-0.5.23", "sglang", "0.5.23", recorded, paths,
             "recorded by tests/engines/test_sglang.py from sglang 0.5.23 on CPU")
    else:
        want = load("sglang-0.5.23")["exchanges"]
        got = [(x["method"], x["path"], x["status"], x.get("content_type")) for x in recorded]
        assert got == [(x["method"], x["path"], x["status"], x.get("content_type")) for x in want]
