"""The trainer's step loop, one for both policies: the tiny one (``train``) and a Hugging Face model (``hf``).

For each step N: the chaos fault due at N, wait for ``OUT/rollouts/step_N``, one update, publish
``OUT/weights/step_N`` (and tell the server), a checkpoint every ``--ckpt-every`` steps and at the
last, and the ``Step N/T`` line. What differs between the policies (the update, how weights and
checkpoints are written, the metrics they add) comes in as functions.

SIGUSR1 asks for a checkpoint now (what rlsup sends on a preemption, ``preempt: {signal: SIGUSR1}``): the
step done last is checkpointed at the next safe point, between two steps or while waiting for a batch, and
training goes on (rlsup stops it once the checkpoint is complete).
"""

from __future__ import annotations

import argparse
import signal
import time
from collections.abc import Callable
from pathlib import Path

import torch

from rlsup.trainer import checkpoint, rollouts, steplog, stopping, waiting
from rlsup.trainer.chaos import Chaos
from rlsup.trainer.sync import make_sync


class CheckpointAsked:
    """SIGUSR1 received: checkpoint the last step done at the next safe point (:meth:`honour`)."""

    asked = False

    def install(self) -> None:
        """From the start: a SIGUSR1 before the loop runs (the model still loading) must not kill the process."""
        signal.signal(signal.SIGUSR1, self._on)

    def _on(self, signum: int, frame: object) -> None:
        self.asked = True

    def honour(self, done: int, save: Callable[[int], None]) -> None:
        """If asked, checkpoint step ``done`` (the last one trained) now."""
        if self.asked:
            self.asked = False
            # rlsup stops the trainer as soon as the checkpoint is there: the line must not be cut off
            with stopping.held("a checkpoint asked for on SIGUSR1", "writing it and saying so"):
                save(done)
                steplog.log(f"Checkpoint of step {done} written on SIGUSR1 (asked to checkpoint now)")
            stopping.exit_if_stopped()


CHECKPOINT = CheckpointAsked()


def wait_for_batch(out: Path, step: int, between: Callable[[], None]) -> tuple[list[rollouts.Sample], dict]:
    """Block until step ``step``'s rollouts are published; log the wait every few seconds. ``between`` runs
    before each look (a checkpoint asked for meanwhile is written there)."""
    def look() -> tuple[list[rollouts.Sample], dict] | None:
        between()
        return rollouts.read_step(out, step)

    found = waiting.poll(look, say=lambda: steplog.log("Waiting for training batch to arrive"))
    assert found is not None  # no patience: poll returns only what it found
    return found


def run(args: argparse.Namespace, start: int, update: Callable[[list[rollouts.Sample], float], dict[str, float]],
        write_weights: Callable[[int], Path], write_model: Callable[[Path], None], optimizer: torch.optim.Optimizer,
        after: Callable[[], dict[str, float]] = dict, cuda_rng: bool = False) -> int:
    """Train steps ``start``..``args.steps``, having published the weights of ``start - 1``.

    ``update(samples, temperature)`` trains on one step's rollouts and returns the metrics of the line (after
    ``reward``); ``after()`` those that end it (measured over the whole step). ``write_weights(step)`` publishes
    a weights dir, ``write_model(dir)`` writes the model of a checkpoint (:func:`checkpoint.write`)."""
    chaos = Chaos(args.chaos, args.out / "chaos", "trainer")
    sync = make_sync(args)
    run_args = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}

    def publish(step: int) -> None:
        sync.publish(step, write_weights(step))  # writes latest.json only once the server has loaded it

    def save(step: int) -> None:
        checkpoint.write(args.out, step, write_model, optimizer, run_args, args.keep_ckpts, cuda_rng)

    publish(start - 1)
    for step in range(start, args.steps + 1):
        chaos.step(step)
        t0 = time.monotonic()
        samples, meta = wait_for_batch(args.out, step, lambda step=step: CHECKPOINT.honour(step - 1, save))
        wait_s = time.monotonic() - t0
        t1 = time.monotonic()
        stats = update(samples, float(meta.get("temperature", 1.0)))
        train_s = time.monotonic() - t1
        publish(step)
        if step % args.ckpt_every == 0 or step == args.steps:
            save(step)
        steplog.log_step(step, args.steps, {
            "reward": sum(s.reward for s in samples) / len(samples),
            **stats,
            **rollouts.staleness(samples, step, int(meta.get("weights_step", step - 1))),
            "wait_s": wait_s,
            "train_s": train_s,
            **after(),
        })
    steplog.log(f"Training finished: {args.steps} steps")
    return 0
