"""The whole reference stack against a real engine: configs/a40.yaml (SGLang) or configs/a40-vllm.yaml (vLLM) as
shipped, under `rlsup up -d`, with the real orchestrator and trainer (rlsup.trainer, `--model` path) and a tiny model.

Only what a CPU machine and a 6-minute CI stage need is changed in the shipped config, each change asserted to
apply (a config edited upstream fails here instead of silently testing something else):

* the interpreters: the engine's own venv for the server, this venv for rlsup's processes and `rlsup.trainer.hf
  latest` (the configs say ``python``, one environment with everything, as `pip install 'rlsup[sglang,train]'`);
* the engine's CPU flags and environment (float32, SGLang's torch-native attention, vLLM's CPU KV cache);
* the batch (8 prompts x 8 samples of 24 tokens instead of 32 x 8 of 512) and the learning rate (a random tiny
  model needs a visible step for its greedy output to change; 1e-6 is for a pretrained 0.5B one);
* vLLM: ``VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1`` (its API server outlives its engine core, as 0.32.0's does when its
  shutdown hangs) and the config's liveness probe every 2 s instead of 15 (2 failures instead of 4), so that the
  probe, not rlsup's 15 s watch of the server's log, is what ends the server whose core the test kills.

MODEL, PORT, STEPS and GSM8K are the configs' own environment overrides.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import threading
import time
from pathlib import Path

import yaml
from harness import EngineRun, free_port
from recording import exchange
from tiny import make

from rlsup.trainer import reloads
from rlsup.trainer.orchestrator import neutral_sampling, reload_record, response_label

PY = sys.executable
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PROMPT = "The quick brown"
STEPS = 5  # one or two pushes may meet the dying engine: at least three others load while completions run


def _sub(text: str, old: str, new: str, where: str) -> str:
    if old not in text:
        raise AssertionError(f"{where}: {old!r} is no longer in the shipped config; update tests/engines/loop.py")
    return text.replace(old, new)


def derive(kind: str, engine_py: str, out: Path) -> Path:
    """configs/a40.yaml (sglang) or a40-vllm.yaml (vllm) with the CPU changes listed in the module docstring."""
    src = CONFIGS / ("a40.yaml" if kind == "sglang" else "a40-vllm.yaml")
    cfg = yaml.safe_load(src.read_text())
    comps = cfg["components"]
    inf = comps["inference"]
    mod = "sglang.launch_server" if kind == "sglang" else "vllm.entrypoints.cli.main serve"
    cmd = _sub(inf["command"], f"exec python -m {mod}", f"exec {engine_py} -m {mod}", "inference")
    cmd = _sub(cmd, '"$(python -m rlsup.trainer.hf latest', f'"$({PY} -m rlsup.trainer.hf latest', "inference")
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    if kind == "sglang":
        cmd += (" --device cpu --attention-backend torch_native --dtype float32 --skip-server-warmup"
                " --max-total-tokens 8192")
        env["SGLANG_USE_CPU_ENGINE"] = "1"
    else:
        cmd += " --dtype float32"  # compiled, as users run it: the greedy answers are compared with transformers
        env |= {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": "1"}
        if not (isinstance(inf.get("alive"), dict) and inf["alive"].get("http")):
            raise AssertionError("a40-vllm.yaml: the inference `alive` probe is no longer there; update loop.py")
        inf["alive"] = {**inf["alive"], "interval": 2, "failures": 2}
    inf["command"] = cmd
    inf["env"] = {**(inf.get("env") or {}), **env}
    orch = comps["orchestrator"]
    c = _sub(orch["command"], "python -m rlsup.trainer.orchestrator", f"{PY} -m rlsup.trainer.orchestrator", "orch")
    c = _sub(c, "--batch-size 32 --group-size 8 --max-tokens 512", "--batch-size 8 --group-size 8 --max-tokens 24",
             "orchestrator")
    orch["command"] = _sub(c, "--concurrency 16", "--concurrency 4", "orchestrator")
    tr = comps["trainer"]
    c = _sub(tr["command"], "python -m rlsup.trainer.train", f"{PY} -m rlsup.trainer.train", "trainer")
    tr["command"] = _sub(c, "--lr 1e-6", "--lr 0.05", "trainer")
    for name in ("orchestrator", "trainer"):
        comps[name]["env"] = {**(comps[name].get("env") or {}), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    path = out / f"{src.stem}-cpu.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def gsm8k_file(path: Path) -> Path:
    """GSM8K-shaped problems whose answer (12) the random tiny model writes in about one sample in ten: most
    groups of 8 mix rewards 0 and 1, so every step has advantages and changes the weights."""
    rows = [{"question": f"What is {a} plus {b}?", "answer": f"{a} + {b} = {a + b}.\n#### 12"}
            for a in range(8) for b in range(1, 5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class LoopRun(EngineRun):
    """A derived a40 config under `rlsup up -d`: inference, orchestrator and trainer, STEPS steps."""

    def __init__(self, tmp: Path, kind: str, engine_py: str) -> None:  # noqa: D107 - EngineRun's fields, no models
        self.tmp, self.kind, self.engine_py = tmp, kind, engine_py
        self.peak_rss_mb = 0.0
        self.t_start = time.monotonic()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.run_dir = tmp / "run"
        self.weights = self.run_dir / "work" / "weights"
        self.base = make(tmp / "models" / "base", seed=0, positions=2048)
        self.config = derive(kind, engine_py, tmp)
        import os

        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "MODEL": str(self.base), "PORT": str(self.port),
                    "STEPS": str(STEPS), "GSM8K": str(gsm8k_file(tmp / "gsm8k.jsonl")), "MEM_FRACTION": "0.05"}

    def log(self, component: str) -> str:
        logs = sorted((self.run_dir / "logs").glob(f"{component}*.log"))
        return "\n".join(p.read_text(errors="replace") for p in logs)

    def loaded_steps(self) -> dict[int, str]:
        """Weights steps the trainer says the server loaded (its log), each with the line."""
        got = {}
        for line in self.log("trainer").splitlines():
            m = re.search(r"loaded weights step (\d+)", line)
            if m:
                got[int(m.group(1))] = line
        return got

    def run_ended(self) -> dict | None:
        return next((e for e in self.events() if e.get("kind") == "run_ended"), None)

    def component_events(self, component: str, kind: str) -> list[dict]:
        return [e for e in self.events() if e.get("component") == component and e.get("kind") == kind]


class Greedy:
    """Greedy completions of one prompt, back to back from a thread, timed: some are in flight whenever the
    trainer pushes weights, and their texts show which weights the server served. Each is labelled as the
    orchestrator labels its samples (the reply's own version, else the reload record before and after it)."""

    def __init__(self, run: LoopRun) -> None:
        self.run = run
        self.results: list[dict] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            t0 = time.time()
            before = reload_record(self.run.weights)
            r = exchange(self.run.url, "POST", "/v1/completions", {
                "model": "policy", "prompt": PROMPT, "max_tokens": 8, **neutral_sampling(0.0)}, timeout=120)
            after = reload_record(self.run.weights)
            ok = r["status"] == 200
            text = visible(r["body"]["choices"][0]["text"]) if ok else None
            label = (response_label(r["body"]) if ok else None) or reloads.label(before, after)
            self.results.append({"t0": t0, "t1": time.time(), "status": r["status"], "text": text, "label": label,
                                 "seq": (before.seq, after.seq),
                                 "error": None if ok else (r.get("error") or r.get("body"))})
            if r["status"] != 200:
                time.sleep(0.5)

    def finish(self) -> list[dict]:
        self.stop.set()
        self.thread.join(150)
        return self.results


def hf_greedy(model_dir: Path) -> str:
    """The greedy continuation of PROMPT by transformers itself on ``model_dir``'s weights (float32)."""
    import torch

    from rlsup.trainer.hf import HFGenerator

    g = HFGenerator(str(model_dir), "cpu")
    ids, *_ = g.generate([g.encode(PROMPT)], 8, [0.0], torch.Generator().manual_seed(0))
    return visible(g.decode(ids[0]))


def visible(text: str) -> str:
    """``text`` without U+FFFD: tokens that are not whole UTF-8 characters decode to it in transformers, while
    vLLM's incremental detokenizer holds such bytes back and returns nothing for them (seen in the engines
    stage: vLLM ``''`` where transformers gave eight of them for the same greedy tokens)."""
    return text.replace("\ufffd", "")


def keep_published(run: LoopRun, into: Path, stop: threading.Event) -> None:
    """Copy every published weights dir as it appears: the trainer keeps only the newest few."""
    while not stop.is_set():
        try:
            for d in run.weights.glob("step_*"):
                if (d / "STABLE").exists() and not (into / d.name).exists():
                    shutil.copytree(d, into / d.name)
        except OSError:
            pass
        time.sleep(0.3)
