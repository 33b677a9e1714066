"""The redactor on the log hot path (issue 26 item 7): MB/s of ``Redactor.redact_lines``.

    python tests/perf/bench_redact.py [--mb 20] [--rounds 5] [--base REV]

Lines like a trainer's and an inference server's (steps, losses, HTTP access lines, warnings, paths,
model names, timestamps), in batches of 1,000 as the server sends them, with a run's redactor holding
six known secrets; one line in 5,000 holds one of them. The median of ``--rounds``. ``--base REV``
also measures the redactor of that commit (its supervisor/records/redact.py, loaded from ``git show``) in the
same process on the same lines, side by side. Nothing here is a timed assertion.
Results: tests/perf/results/redact.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {"HF_TOKEN": "hf_AbCdEfGhIjKlMnOpQrStUv123456", "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
           "DB_PASSWORD": "s3cr3t-Pass.word", "OPENAI_API_KEY": "sk-proj-AbCdEf0123456789GhIjKl",
           "MY_SERVICE_TOKEN": "tok_9f8e7d6c5b4a", "GITHUB_PAT": "ghp_ZyXwVuTsRqPoNmLkJiHgFeDcBa0987654321"}
TEMPLATES = [
    "2026-11-25 15:{m:02d}:{s:02d} INFO trainer.py:212] Step {i}/10000 loss={l:.4f} lr=3.0e-05 grad_norm=0.{n} "
    "tokens/s=18234 mfu=41.2%",
    'INFO:     127.0.0.1:{p} - "POST /v1/completions HTTP/1.1" 200 OK',
    "(EngineCore_0 pid=4242) INFO 11-25 15:{m:02d}:{s:02d} [metrics.py:88] Avg prompt throughput: 1{n}.3 tokens/s, "
    "Running: {k} reqs, GPU KV cache usage: 3{n}.1%",
    "WARNING: loading checkpoint /scratch/ckpt/global_step_{i}/actor/model_world_size_8_rank_0.pt",
    "[rank0]: Qwen/Qwen2.5-7B-Instruct tokenizer=Qwen2TokenizerFast max_tokens=2048 key_file=/etc/ssl/k.pem",
    "wandb: Syncing run cosmic-{n}-{k} https://wandb.ai/team/proj/runs/{h}",
]


def lines(mb: int, rng: random.Random) -> list[str]:
    out, size, vals = [], 0, list(SECRETS.values())
    while size < mb << 20:
        t = rng.choice(TEMPLATES).format(m=rng.randrange(60), s=rng.randrange(60), i=rng.randrange(10000),
                                         l=rng.random(), n=rng.randrange(10), p=rng.randrange(30000, 60000),
                                         k=rng.randrange(64), h=f"{rng.getrandbits(32):08x}")
        if rng.randrange(5000) == 0:
            t += " auth with " + rng.choice(vals)
        out.append(t)
        size += len(t) + 1
    return out


def load(source: str, name: str):
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def measure(mod, data: list[str], rounds: int) -> float:
    red = mod.Redactor.for_run([SECRETS])
    mb = sum(map(len, data)) / 1e6
    speeds = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for i in range(0, len(data), 1000):
            red.redact_lines(data[i:i + 1000])
        speeds.append(mb / (time.perf_counter() - t0))
    return statistics.median(speeds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--base", help="also measure supervisor/records/redact.py of this commit")
    a = ap.parse_args()
    data = lines(a.mb, random.Random(7))
    mods = {"this checkout": load((ROOT / "supervisor/records/redact.py").read_text(), "redact_now")}
    if a.base:
        src = subprocess.run(["git", "show", f"{a.base}:supervisor/records/redact.py"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
        mods[f"base {a.base}"] = load(src, "redact_base")
    res = {}
    for name, mod in mods.items():
        res[name] = measure(mod, data, a.rounds)
        print(f"{name:>24}: {res[name]:7.1f} MB/s  (redact_lines, batches of 1,000 lines, {a.mb} MB)")
    out = ROOT / "tests/perf/results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "redact.json").write_text(json.dumps({"mb_per_s": res, "mb": a.mb, "rounds": a.rounds}, indent=1))


if __name__ == "__main__":
    main()
