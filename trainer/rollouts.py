"""The rollout exchange between orchestrator and trainer: ``OUT/rollouts/step_{N}/``.

Each step directory holds ``meta.json`` and ``rollouts.jsonl`` (one sample per line: prompt,
completion, the server's per-token logprobs, reward, advantage) and appears atomically (see
``atomic.publish_dir``): a directory named ``step_N`` is always complete.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from rlsup.trainer import atomic


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
    # Which weights made it (rlsup.trainer.reloads.Label): the oldest weights step it may come from (None: an
    # orchestrator that did not label samples), whether it overlapped a reload, and whether that reload ran
    # without a pause, so that its tokens may come from two sets of weights.
    weights_step: int | None = None
    weights_straddled: bool = False
    weights_mixed: bool = False


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
    return atomic.steps(Path(out) / "rollouts")


def staleness(samples: list[Sample], step: int, fallback: int) -> dict[str, int]:
    """How off-policy step ``step``'s samples are: ``off_policy``, the most steps any sample's weights lag
    behind step - 1 (the weights an on-policy step samples with); ``off_policy_samples``, how many lag at all
    or overlapped a reload; ``straddled_samples``, how many overlapped a reload; ``mixed_samples``, how many
    overlapped one that ran without a pause. ``fallback``: the weights step of samples without a label."""
    lags = [step - 1 - (fallback if s.weights_step is None else s.weights_step) for s in samples]
    return {"off_policy": max(lags, default=0),
            "off_policy_samples": sum(1 for s, lag in zip(samples, lags, strict=True) if lag > 0 or s.weights_straddled),
            "straddled_samples": sum(s.weights_straddled for s in samples),
            "mixed_samples": sum(s.weights_mixed for s in samples)}
