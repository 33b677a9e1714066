"""The synthetic verifiable task: single-digit addition whose reward is checked exactly.

A problem is ``"a+b="`` with ``a + b <= 9``; the right completion is the one digit ``str(a + b)``.
A policy that guesses uniformly over the tiny vocabulary scores about 1/13 (~0.08); one that has
learnt addition scores 1.0.  Prompts for a step depend only on ``(seed, step)``, so a restarted
orchestrator regenerates the very same prompts for a step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    prompt: str
    answer: str


def all_problems() -> list[Problem]:
    """Every problem of the task, in a fixed order."""
    return [Problem(f"{a}+{b}=", str(a + b)) for a in range(10) for b in range(10) if a + b <= 9]


def problems_for_step(seed: int, step: int, count: int, pool: list[Problem] | None = None) -> list[Problem]:
    """``count`` problems for ``step`` from ``pool`` (GSM8K's, :func:`rlsup.trainer.hf.load_problems`; default:
    every problem of this task), a pure function of ``(seed, step)``."""
    rng = random.Random(seed * 1_000_003 + step)
    pool = pool or all_problems()
    return [pool[rng.randrange(len(pool))] for _ in range(count)]


def reward(completion: str, answer: str) -> float:
    """1.0 when the completion is exactly the answer (surrounding whitespace ignored), else 0.0."""
    return 1.0 if completion.strip() == answer else 0.0
