"""The orchestrator's pacing against what the server serves, with the real server and orchestrator
processes; the test plays the trainer, so it decides when the server gets new weights."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
from test_trainer_stack import _free_port, _module, _post, _stop, _wait_healthy, publish

from rlsup.trainer import orchestrator, rollouts, weights
from rlsup.trainer.policy import Policy


def test_wait_for_server_returns_once_the_server_has_loaded_the_step(tmp_path: Path) -> None:
    wdir = tmp_path / "weights"
    wdir.mkdir()
    weights.mark_latest(wdir, 0, wdir / "step_0")
    timer = threading.Timer(0.3, weights.mark_latest, (wdir, 1, wdir / "step_1"))
    t0 = time.monotonic()
    timer.start()
    try:
        assert orchestrator.wait_for_server(wdir, 1, 30.0) is True
    finally:
        timer.cancel()
    assert time.monotonic() - t0 >= 0.25
    assert orchestrator.served_step(wdir) == 1


def test_wait_for_server_gives_up_after_its_patience(tmp_path: Path) -> None:
    wdir = tmp_path / "weights"
    wdir.mkdir()
    weights.mark_latest(wdir, 0, wdir / "step_0")
    asked: list[int] = []
    t0 = time.monotonic()
    assert orchestrator.wait_for_server(wdir, 1, 0.3, lambda: asked.append(1)) is False
    # its patience waited out, then no more: 0.3 s of the poll's back-off holds 9 checks, never more
    assert time.monotonic() - t0 >= 0.3 and 3 <= len(asked) <= 9


def test_what_the_server_reports_counts_too(tmp_path: Path) -> None:
    """rlsup's server restarted loads the newest published weights itself; latest.json, written by the
    trainer's sync, does not know that: the server's own report is enough."""
    wdir = tmp_path / "weights"
    wdir.mkdir()
    weights.mark_latest(wdir, 0, wdir / "step_0")
    asked: list[int] = []
    assert orchestrator.wait_for_server(wdir, 1, 30.0, lambda: asked.append(1) or 1) is True
    assert asked == [1]  # the first answer was enough: no wait
    assert orchestrator.wait_for_server(wdir, 1, 0.2, lambda: None) is False  # vLLM, SGLang: no report


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_async_level_0_samples_with_the_weights_the_server_has_loaded(tmp_path: Path) -> None:
    """Step 1's weights are published at once but reach the server only a second later (a slow
    reload): at async level 0, step 2 must be sampled with them, not with step 0's."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    out = tmp_path / "out"
    wdir = out / "weights"
    torch.manual_seed(1)
    server = _module("inference", "--port", str(port), "--weights-dir", str(wdir), log=tmp_path / "server.log")
    orch = None
    try:
        _wait_healthy(base, server)
        p0 = publish(wdir, 0, 2, Policy())
        assert _post(f"{base}/update_weights_from_disk", {"model_path": str(p0)})[0] == 200
        weights.mark_latest(wdir, 0, p0)
        orch = _module("orchestrator", "--server", base, "--out", str(out), "--steps", "2", "--async-level", "0",
                       "--batch-size", "2", "--group-size", "2", "--max-tokens", "4", log=tmp_path / "orch.log")
        deadline = time.monotonic() + 60
        while 1 not in rollouts.published_steps(out):
            assert orch.poll() is None, (tmp_path / "orch.log").read_text()
            assert time.monotonic() < deadline, "no rollouts for step 1"
            time.sleep(0.05)
        p1 = publish(wdir, 1, 2, Policy())  # published: the orchestrator's first gate opens now
        time.sleep(1.0)  # ... while the server is still loading them
        assert _post(f"{base}/update_weights_from_disk", {"model_path": str(p1)})[0] == 200
        weights.mark_latest(wdir, 1, p1)
        assert orch.wait(timeout=60) == 0, (tmp_path / "orch.log").read_text()
        assert orchestrator.reported_step(base) == 1
    finally:
        if orch is not None:
            _stop(orch)
        _stop(server)
    samples, meta = rollouts.read_step(out, 2)
    assert len(samples) == 4
    assert meta["weights_step"] == 1, (tmp_path / "orch.log").read_text()


def test_the_orchestrator_imports_no_torch() -> None:
    """Every demo stack starts an orchestrator, and every one of its restarts starts it again: an import
    of torch there costs about two seconds of CPU each time, for arithmetic on a few floats."""
    import subprocess
    import sys

    code = "import sys, rlsup.trainer.orchestrator; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
