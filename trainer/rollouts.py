"""The rollout exchange between orchestrator and trainer: ``OUT/rollouts/step_{N}/``.

Each step directory holds ``meta.json`` and ``rollouts.jsonl`` (one sample per line: prompt,
completion, the server's per-token logprobs, reward, advantage) and appears atomically (see
``atomic.publish_dir``): a directory named ``step_N`` is always complete.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from rlsup.trainer import atomic

_STEP_DIR = re.compile(r"step_(\d+)\Z")


@dataclass
class Sample:
    prompt: str
    completion: str
    tokens: list[str]
    logprobs: list[float]
    reward: float
    advantage: float
    group: int
    # What the server sampled, where it says (`return_token_ids`: vLLM, SGLang >= 0.5.17, rlsup): trained as is.
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    finish_reason: str | None = None  # "stop" | "length" | ...
    # What ended a "stop" finish: the stop string (str) or stop token id (int); None: EOS.
    # vLLM's stop_reason, SGLang's matched_stop (orchestrator.choice_fields).
    stop_reason: str | int | None = None


def step_dir(out: Path, step: int) -> Path:
    return Path(out) / "rollouts" / f"step_{step}"


def write_step(out: Path, step: int, samples: list[Sample], meta: dict) -> Path:
    """Publish step ``step``'s samples atomically (replacing an older copy); returns its directory."""
    final = step_dir(out, step)
    tmp = atomic.temp_dir_for(final)
    (tmp / "rollouts.jsonl").write_text("".join(json.dumps(asdict(s)) + "\n" for s in samples))
    (tmp / "meta.json").write_text(json.dumps({"step": step, "num_samples": len(samples), **meta}))
    atomic.publish_dir(tmp, final)
    return final


def read_step(out: Path, step: int) -> tuple[list[Sample], dict] | None:
    """Step ``step``'s samples and meta, or ``None`` while the step is not published yet."""
    d = step_dir(out, step)
    # Read both files through one handle on the directory, so a concurrent replacement of the step
    # (rename old away, rename new in) can't pair one copy's meta with the other copy's samples.
    try:
        dir_fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return None  # not published yet
    try:
        meta = json.loads(_read_at(dir_fd, "meta.json"))
        lines = _read_at(dir_fd, "rollouts.jsonl").splitlines()
    except FileNotFoundError:
        return None  # replaced and removed while we read: the caller asks again
    finally:
        os.close(dir_fd)
    samples = [Sample(**json.loads(line)) for line in lines]
    if len(samples) != meta["num_samples"]:
        raise RuntimeError(f"{d}: {len(samples)} samples, meta says {meta['num_samples']}")
    return samples, meta


def _read_at(dir_fd: int, name: str) -> str:
    fd = os.open(name, os.O_RDONLY, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as f:
        return f.read().decode()


def published_steps(out: Path) -> list[int]:
    """Steps with a published rollout directory, ascending."""
    root = Path(out) / "rollouts"
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)))
