"""Trainer checkpoints for exact resume: ``OUT/checkpoints/step_{N}/``.

Holds ``model.pt`` + ``config.json`` (the policy), ``optimizer.pt``, ``trainer_state.pt`` (step,
next step to train = data position, torch and Python RNG states, run arguments) and, written last,
the marker ``STABLE``.  The directory appears atomically (temp dir, fsync, rename); a directory
without the marker is never a valid checkpoint.
"""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from rlsup.trainer import atomic
from rlsup.trainer.policy import Policy, load_weights, save_weights

MARKER = "STABLE"
_STEP_DIR = re.compile(r"step_(\d+)\Z")


def checkpoint_dir(out: Path, step: int) -> Path:
    return Path(out) / "checkpoints" / f"step_{step}"


def save(out: Path, step: int, policy: Policy, optimizer: torch.optim.Optimizer, args: dict[str, Any],
         keep: int = 3) -> Path:
    """Checkpoint after training step ``step``; keeps the newest ``keep`` checkpoints."""
    final = checkpoint_dir(out, step)
    tmp = atomic.temp_dir_for(final)
    save_weights(policy, tmp)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    state = {
        "step": step,
        "next_step": step + 1,
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
        "args": args,
    }
    torch.save(state, tmp / "trainer_state.pt")
    atomic.fsync_tree(tmp)
    (tmp / MARKER).write_text("")  # last: its presence means everything above is on disk
    atomic.publish_dir(tmp, final)
    for old in complete_steps(out)[:-keep]:
        if old != step:
            shutil.rmtree(checkpoint_dir(out, old), ignore_errors=True)
    return final


def complete_steps(out: Path) -> list[int]:
    """Steps with a complete (marked) checkpoint, ascending."""
    root = Path(out) / "checkpoints"
    if not root.is_dir():
        return []
    found = (int(m.group(1)) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)))
    return sorted(s for s in found if (checkpoint_dir(out, s) / MARKER).exists())


def load(out: Path, step: int, optimizer_factory) -> tuple[Policy, torch.optim.Optimizer, dict[str, Any]]:
    """Restore policy, optimizer (built by ``optimizer_factory(policy)``) and RNG states; return the
    trainer state dict.  Raises ``FileNotFoundError`` for a missing or incomplete checkpoint."""
    d = checkpoint_dir(out, step)
    if not (d / MARKER).exists():
        raise FileNotFoundError(f"no complete checkpoint at {d} (missing {MARKER} marker)")
    policy = load_weights(d)
    optimizer = optimizer_factory(policy)
    optimizer.load_state_dict(torch.load(d / "optimizer.pt", weights_only=True))
    state = torch.load(d / "trainer_state.pt", weights_only=False)
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    return policy, optimizer, state
