"""Issue 42 against the contract servers: the failure paths of a weight push that the real engines showed
(tests/engines/ drives each of them on vLLM 0.32.0 and SGLang 0.5.23), and the weight version each reload tags."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from servers import EngineServer

from rlsup.trainer import reloads
from rlsup.trainer import weights as weights_mod
from rlsup.trainer.sync import WeightSync


def _dir(tmp: Path, step: int, width: int | None = None) -> Path:
    d = tmp / "weights" / f"step_{step}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "STABLE").write_text("")
    if width is not None:
        _tensors(d, width)
    return d


def _tensors(d: Path, width: int) -> Path:
    """A safetensors header alone: what the shape check reads."""
    shapes = {"model.layers.0.mlp.up_proj.weight": [width, 8], "model.norm.weight": [8]}
    header = json.dumps({k: {"dtype": "F32", "shape": v, "data_offsets": [0, 0]} for k, v in shapes.items()}).encode()
    d.mkdir(parents=True, exist_ok=True)
    (d / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    return d


def test_sigterm_inside_the_pause_drain_finishes_the_push_and_resumes(tmp_path: Path) -> None:
    """The trainer's SIGTERM arrived while vLLM's /pause waited for running requests: the exception skipped the
    /resume and vLLM stayed paused for good. Now the push finishes (the weights load), vLLM is resumed, and the
    trainer exits 143 after it."""
    s = EngineServer("vllm", "0.32.0")
    entered = s.slow("/pause", 3)  # draining the orchestrator's requests
    one = _dir(tmp_path, 1)
    script = textwrap.dedent(f"""
        from pathlib import Path
        from rlsup.trainer.stopping import install_sigterm_exit
        from rlsup.trainer.sync import WeightSync
        install_sigterm_exit()
        WeightSync({s.url!r}, "vllm", Path({str(tmp_path / 'weights')!r})).publish(1, Path({str(one)!r}))
        print("not reached: the held SIGTERM ends the process after the push")
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert entered.wait(60)
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM, out
        assert "not reached" not in out and "finishing the exchange" in out
        calls = [c for c, _ in s.calls]
        assert not s.paused and calls[-1] == "POST /resume", calls
        assert s.serving == str(one) and weights_mod.latest(tmp_path / "weights") == (1, one)
        assert reloads.read(tmp_path / "weights").state == reloads.SERVING
    finally:
        if proc.poll() is None:
            proc.kill()
        s.close()


def test_a_restart_during_the_vllm_reload_is_waited_for_not_rejected(tmp_path: Path) -> None:
    """A user's `rlsup restart inference` while vLLM reloaded step 2: the reload's reply (a 500 as vLLM shuts down,
    then nothing listens) was read as a broken reload: the good step 2 was marked REJECTED and the trainer restarted
    the server a second time, killing the attempt the user's restart had started. Shapes that match what the server
    served clear the weights: wait for the server, push again."""
    s = EngineServer("vllm", "0.32.0")
    port = int(s.url.rsplit(":", 1)[1])
    one, two = _dir(tmp_path, 1, 16), _dir(tmp_path, 2, 16)
    restarted: list[str] = []
    back: list[EngineServer] = []
    orig = s._vllm

    def killed_mid_reload(method, route, query, body):  # type: ignore[no-untyped-def]
        if route == "/collective_rpc" and body.get("kwargs", {}).get("weights_path") == str(two):
            threading.Thread(target=come_back, daemon=True).start()
            return 500, {"error": {"message": "EngineCore encountered an issue.", "code": 500}}
        return orig(method, route, query, body)

    def come_back() -> None:  # the user's restart: the old server goes, a new one answers on the port
        time.sleep(0.2)
        s.close()
        time.sleep(1.0)
        back.append(EngineServer("vllm", "0.32.0", port=port))

    s._vllm = killed_mid_reload  # type: ignore[method-assign]
    try:
        ws = WeightSync(s.url, "vllm", tmp_path / "weights", tries=3, retry_s=0.01, out=io.StringIO(),
                        restart_server=lambda: (restarted.append("x"), (True, "restarted"))[1], restart_timeout=60)
        assert ws.publish(1, one).loaded
        r = ws.publish(2, two)
        assert r.loaded and not r.broken, r.detail
        assert restarted == [], "a second restart on top of the user's"
        assert not (two / weights_mod.REJECTED).exists()
        assert back and back[0].serving == str(two) and back[0].weight_version == "2"
        assert weights_mod.latest(tmp_path / "weights") == (2, two)
    finally:
        for x in back:
            x.close()


@pytest.mark.parametrize(("kind", "version"), [("vllm", "0.32.0"), ("sglang", "0.5.23")])
def test_a_wrong_shape_first_publish_is_refused_against_the_model_the_server_started_with(
        tmp_path: Path, kind: str, version: str) -> None:
    """No latest.json yet: shapes were checked against nothing, vLLM answered 200 to an MLP twice as wide and served
    weights nobody trained. The server names the model it started with (vLLM /v1/models root, SGLang /model_info
    model_path): its shapes are the reference."""
    base = _tensors(tmp_path / "base", 16)
    s = EngineServer(kind, version, base_model=str(base))
    wide = _dir(tmp_path, 0, 32)
    s.wrong_shape.add(str(wide))
    out = io.StringIO()
    try:
        r = WeightSync(s.url, kind, tmp_path / "weights", tries=1, out=out).publish(0, wide)
        assert not r.loaded and not r.broken and "up_proj" in r.detail and str(base) in r.detail, r.detail
        assert not any(c.startswith(("POST /collective_rpc", "POST /update_weights")) for c, _ in s.calls)
        assert (wide / weights_mod.REJECTED).exists() and s.serving == str(base)
        assert out.getvalue().startswith("rlsup-flag: weights_rejected: ")
        assert not (tmp_path / "weights" / "latest.json").exists()
    finally:
        s.close()


def test_a_publish_after_the_served_dir_was_pruned_is_still_checked(tmp_path: Path) -> None:
    """latest.json named a dir the trainer had since pruned (the server lagged): the shapes it served are kept in
    latest.json, so a wrong-shape publish is still refused."""
    s = EngineServer("vllm", "0.32.0")
    one = _dir(tmp_path, 1, 16)
    try:
        ws = WeightSync(s.url, "vllm", tmp_path / "weights", tries=1, out=io.StringIO())
        assert ws.publish(1, one).loaded
        for p in one.iterdir():
            p.unlink()
        one.rmdir()
        wide = _dir(tmp_path, 5, 32)
        r = WeightSync(s.url, "vllm", tmp_path / "weights", tries=1, out=io.StringIO()).publish(5, wide)
        assert not r.loaded and "rejected before loading" in r.detail and "weights step 1" in r.detail, r.detail
        assert s.serving == str(one)
    finally:
        s.close()


@pytest.mark.parametrize(("kind", "version", "paused"), [("vllm", "0.32.0", True), ("vllm", "0.16.0", False),
                                                         ("sglang", "0.5.23", True)])
def test_each_reload_tags_the_weight_version_and_is_recorded(tmp_path: Path, kind: str, version: str,
                                                             paused: bool) -> None:
    s = EngineServer(kind, version, pause_fails=not paused and kind == "vllm")
    try:
        ws = WeightSync(s.url, kind, tmp_path / "weights", tries=1, out=io.StringIO())
        for step in (1, 2):
            assert ws.publish(step, _dir(tmp_path, step)).loaded
        rec = reloads.read(tmp_path / "weights")
        assert (rec.step, rec.state, rec.unpaused) == (2, reloads.SERVING, 0 if paused else 2)
        assert rec.seq >= 6  # begin, reloading, end per push (and heartbeats)
        if version in ("0.32.0", "0.5.23"):
            assert s.weight_version == "2"
        else:
            assert s.weight_version == "default"  # 0.16.0 has no /update_weight_version: not an error
    finally:
        s.close()


def test_a_server_left_paused_by_a_killed_trainer_is_flagged_and_resumed_by_the_orchestrator(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A trainer SIGKILLed inside /pause's drain (rlsup's stop timeout ran out) leaves vLLM paused: every completion
    waits. The orchestrator's watch sees its requests wait, the server paused and the reload record still
    `pausing` with a heartbeat that stopped: it flags the server and resumes it (no reload began: nothing was
    loaded), and the held completions go through."""
    from rlsup.trainer import orchestrator, pausewatch

    monkeypatch.setattr(pausewatch, "WAIT_S", 0.3)
    monkeypatch.setattr(pausewatch, "EVERY_S", 0.1)
    monkeypatch.setattr(pausewatch, "PATIENCE_S", 0.5)
    s = EngineServer("vllm", "0.32.0")
    weights = tmp_path / "weights"
    rec = reloads.Recorder(weights)
    rec.begin(4)  # ... and the trainer dies here: its heartbeat thread with it
    assert rec._beating is not None
    rec._beating.set()
    assert orchestrator.http_json(f"{s.url}/pause?mode=wait", {})["status"] == "paused"
    out = io.StringIO()
    watch = pausewatch.PauseWatch(s.url, weights, out=out)
    try:
        with watch:
            resp = orchestrator.complete(f"{s.url}/v1/completions", {"model": "policy", "n": 2, "max_tokens": 8},
                                         ["a", "b"], 2, "step 5", 60.0, 60.0, weights)
        assert len(resp["choices"]) == 4 and not s.paused
        flags = out.getvalue().splitlines()
        assert len(flags) == 1 and flags[0].startswith("rlsup-flag: engine_paused: ") and "never began" in flags[0]
        # the record still says a reload was under way when they were sent: labelled as straddling it
        assert all(c["weights"] == reloads.Label(0, straddled=True) for c in resp["choices"])
    finally:
        s.close()


def test_the_orchestrator_labels_each_completion_with_the_weights_that_made_it(tmp_path: Path) -> None:
    """SGLang 0.5.23 names the version in its reply; vLLM does not, and the reload record brackets the request."""
    from rlsup.trainer import orchestrator

    for kind, version in (("sglang", "0.5.23"), ("vllm", "0.32.0")):
        s = EngineServer(kind, version)
        weights = tmp_path / kind / "weights"
        try:
            ws = WeightSync(s.url, kind, weights, tries=1, out=io.StringIO())
            assert ws.publish(3, _dir(tmp_path / kind, 3)).loaded
            resp = orchestrator.complete(f"{s.url}/v1/completions", {"model": "policy", "n": 2, "max_tokens": 8},
                                         ["a", "b"], 0, "step 5", 60.0, 60.0, weights)
            assert [c["weights"] for c in resp["choices"]] == [reloads.Label(3)] * 4, kind
        finally:
            s.close()
