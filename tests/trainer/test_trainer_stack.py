"""The three components as real processes on a free port."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from rlsup.trainer import weights
from rlsup.trainer.policy import Policy, save_weights

STEP_LINE = re.compile(r"^Step (\d+)/(\d+)( \| [a-z_]+ -?\d+(\.\d+)?)+$")


def publish(weights_dir: Path, step: int, total: int, policy: Policy) -> Path:
    """The tiny policy's weights dir of ``step``, as the trainer publishes it."""
    return weights.write(weights_dir, step, lambda d: save_weights(policy, d), {"step": step, "total": total})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _module(name: str, *args: str, log: Path | None = None) -> subprocess.Popen:
    out = open(log, "w") if log else subprocess.PIPE  # noqa: SIM115 (closed with the process)
    return subprocess.Popen([sys.executable, "-m", f"rlsup.trainer.{name}", *args],
                            stdout=out, stderr=subprocess.STDOUT if log else subprocess.PIPE, text=True)


def _wait_healthy(base: str, proc: subprocess.Popen, timeout: float = 240) -> None:
    """Until the server answers /health (a ceiling, not a bound: importing torch took over 60 s at load 15)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "server exited"
        try:
            if _get(f"{base}/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("server never became healthy")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_server_api_batching_and_weight_update(tmp_path: Path) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = _module("inference", "--port", str(port), "--weights-dir", str(tmp_path / "weights"),
                     log=tmp_path / "inference.log")
    try:
        _wait_healthy(base, server)
        status, models = _get(f"{base}/v1/models")
        assert status == 200 and models["data"][0]["id"] == "rlsup-tiny"

        results: list[tuple[int, dict]] = []
        def ask() -> None:
            results.append(_post(f"{base}/v1/completions", {
                "model": "rlsup-tiny", "prompt": ["1+2=", "3+3="], "n": 4, "max_tokens": 48,
                "temperature": 1.0, "logprobs": 2}))
        threads = [threading.Thread(target=ask) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [code for code, _ in results] == [200] * 16
        for _, body in results:
            assert [c["index"] for c in body["choices"]] == list(range(8))
            for c in body["choices"]:
                lp = c["logprobs"]
                assert len(c["text"]) == 48 == len(lp["tokens"]) == len(lp["token_logprobs"])
                assert "".join(lp["tokens"]) == c["text"]
                assert all(v <= 0 for v in lp["token_logprobs"]) and len(lp["top_logprobs"][0]) == 2
            assert body["usage"]["completion_tokens"] == 8 * 48
        health = _get(f"{base}/health")[1]
        assert health["requests"] == 16
        assert health["batches"] < 16  # concurrent requests were served together

        assert _post(f"{base}/v1/completions", {"prompt": "a+b="})[0] == 400
        torch.manual_seed(5)
        path = publish(tmp_path / "weights", 7, 20, Policy())
        status, body = _post(f"{base}/update_weights_from_disk", {"model_path": str(path)})
        assert status == 200 and body["success"] is True
        assert _get(f"{base}/health")[1]["weights_step"] == 7
        status, body = _post(f"{base}/update_weights_from_disk", {"model_path": str(tmp_path / "nope")})
        assert status == 400 and body["success"] is False
    finally:
        _stop(server)
    log = (tmp_path / "inference.log").read_text()
    # the bad prompt was rejected before reaching the queue, so 16 requests were generated for
    assert "Step 7/20 | requests 16 | completions 128 | batches " in log


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_three_processes_train_crash_and_resume(tmp_path: Path) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    out = tmp_path / "work"
    common = ["--out", str(out), "--steps", "6"]
    server = _module("inference", "--port", str(port), "--weights-dir", str(out / "weights"),
                     log=tmp_path / "inference.log")
    orchestrator = None
    try:
        _wait_healthy(base, server)
        trainer = _module("train", *common, "--server", base, "--ckpt-every", "2", "--chaos", "crash@4")
        # the trainer names the engine it detected (rlsup.trainer.sync), says it loaded step 0 into it,
        # then waits for rollouts
        first = "".join(trainer.stdout.readline() for _ in range(3))
        assert "Inference server at" in first and "rlsup rlsup-" in first, first
        assert "Waiting for training batch to arrive" in first, first
        orchestrator = _module("orchestrator", "--server", base, *common, "--batch-size", "8",
                               "--group-size", "4", "--async-level", "1", log=tmp_path / "orchestrator.log")
        stdout, stderr = trainer.communicate(timeout=60)
        assert trainer.returncode == 1
        assert "Traceback" in stderr and "ChaosCrash: injected failure at step 4" in stderr
        assert [ln.split(" |")[0] for ln in (first + stdout).splitlines() if ln.startswith("Step ")] == \
            ["Step 1/6", "Step 2/6", "Step 3/6"]

        resumed = _module("train", *common, "--server", base, "--ckpt-every", "2", "--chaos", "crash@4",
                          "--resume-step", "2")
        stdout, stderr = resumed.communicate(timeout=60)
        assert resumed.returncode == 0, stderr
        lines = [ln for ln in stdout.splitlines() if ln.startswith("Step ")]
        assert [ln.split(" |")[0] for ln in lines] == ["Step 3/6", "Step 4/6", "Step 5/6", "Step 6/6"]
        assert all(STEP_LINE.match(ln) for ln in lines), lines
        assert orchestrator.wait(timeout=60) == 0
        assert _get(f"{base}/health")[1]["weights_step"] == 6
    finally:
        _stop(server)
        if orchestrator is not None:
            _stop(orchestrator)
    orch_lines = [ln for ln in (tmp_path / "orchestrator.log").read_text().splitlines() if ln.startswith("Step ")]
    assert [ln.split(" |")[0] for ln in orch_lines] == [f"Step {i}/6" for i in range(1, 7)]
    assert all(STEP_LINE.match(ln) and " | reward " in ln for ln in orch_lines)
    server_lines = [ln for ln in (tmp_path / "inference.log").read_text().splitlines() if ln.startswith("Step ")]
    assert server_lines and all(STEP_LINE.match(ln) for ln in server_lines)
    assert server_lines[-1].startswith("Step 6/6 |")
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_2", "step_4", "step_6"]
