"""Trainer checkpoints for exact resume: ``OUT/checkpoints/step_{N}/``.

Holds ``model.pt`` + ``config.json`` (the policy), ``optimizer.pt``, ``trainer_state.pt`` (step,
next step to train = data position, torch and Python RNG states, run arguments) and, written last,
the marker ``STABLE``.  The directory appears atomically (temp dir, fsync, rename); a directory
without the marker is never a valid checkpoint.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rlsup.trainer import atomic, steplog

MARKER = atomic.MARKER


def checkpoint_dir(out: Path, step: int) -> Path:
    return Path(out) / "checkpoints" / f"step_{step}"


def write(out: Path, step: int, write_model: Callable[[Path], None], optimizer: torch.optim.Optimizer,
          args: dict[str, Any], keep: int = 3, cuda_rng: bool = False) -> Path:
    """The checkpoint of step ``step`` for any policy: ``write_model(dir)`` writes the model; the optimizer, the
    trainer state (``cuda_rng``: with the CUDA RNG states too) and the marker follow, then the dir appears
    atomically and all but the newest ``keep`` go."""
    final = checkpoint_dir(out, step)
    tmp = atomic.temp_dir_for(final)
    write_model(tmp)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    state = {"step": step, "next_step": step + 1, "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(),
             "args": args}
    if cuda_rng:
        state["cuda_rng"] = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    torch.save(state, tmp / "trainer_state.pt")
    (tmp / MARKER).write_text("")  # last, and all is fsynced before the dir appears
    atomic.publish_dir(tmp, final)
    atomic.prune(final.parent, complete_steps(out), keep, step)
    return final


def complete_steps(out: Path) -> list[int]:
    """Steps with a complete (marked) checkpoint, ascending."""
    return [s for s in atomic.steps(Path(out) / "checkpoints") if (checkpoint_dir(out, s) / MARKER).exists()]


def begin(args: argparse.Namespace) -> tuple[Path | None, dict[str, Any] | None]:
    """Seed torch and Python with ``--seed``; (dir, trainer state) of the ``--resume-step`` checkpoint, else
    (None, None) -- saying how to continue instead where complete checkpoints exist."""
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    if args.resume_step is not None:
        return read(args.out, args.resume_step)
    if done := complete_steps(args.out):
        steplog.warn(f"starting from scratch although {args.out}/checkpoints has step_{done[-1]}; "
                     f"pass --resume-step {done[-1]} to continue that run")
    return None, None


def read(out: Path, step: int) -> tuple[Path, dict[str, Any]]:
    """(dir, trainer state) of the complete checkpoint of ``step``, for any policy. Raises
    ``FileNotFoundError`` for a missing or incomplete one."""
    d = checkpoint_dir(out, step)
    if not (d / MARKER).exists():
        raise FileNotFoundError(f"no complete checkpoint at {d} (missing {MARKER} marker)")
    return d, torch.load(d / "trainer_state.pt", weights_only=False)


def restore(d: Path | None, state: dict[str, Any] | None, optimizer: torch.optim.Optimizer) -> int:
    """The first step to train; for a resume (:func:`begin`'s checkpoint) the optimizer's and the RNGs' states
    (CUDA's too where saved) put back, after the model was built: its initialisation draws from the RNGs."""
    if d is None or state is None:
        return 1
    optimizer.load_state_dict(torch.load(d / "optimizer.pt", weights_only=True, map_location="cpu"))
    torch.set_rng_state(state["torch_rng"])
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    random.setstate(state["python_rng"])
    steplog.log(f"Resumed from {d}; next step {state['next_step']}")
    return state["next_step"]
