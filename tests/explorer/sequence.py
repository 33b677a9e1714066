"""A seed -> a sequence of real faults and user actions against the demo stack (pure: no process here).

The whole sequence is drawn from the seed before anything runs, so the printed line replays it exactly
(``RLSUP_EXPLORE_SEED=N``): the chaos knobs of configs/demo-chaos.yaml, the run's length and the
actions in order. What each action finds when it runs (a component already dead, the run over) is
timing; the harness waits on state before each one and says what it did.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

COMPONENTS = ("inference", "orchestrator", "trainer")

# kind -> (weight, what it targets): "component", "supervisor", "run", "client" or "disk".
KINDS: dict[str, tuple[int, str]] = {
    # real faults
    "kill9": (6, "component"),          # kill -9 of a component's process
    "sigstop": (3, "component"),        # SIGSTOP, a pause of `arg` seconds, SIGCONT
    "kill9_monitor": (2, "component"),  # kill -9 of a component's monitor
    "sigstop_monitor": (2, "component"),  # a component's monitor paused `arg` seconds (its pipe fills)
    "kill9_supervisor": (4, "supervisor"),  # kill -9 of the supervisor, then a take-over with `up -d`
    "sigstop_supervisor": (2, "supervisor"),  # the supervisor paused `arg` seconds
    "disk_full": (2, "disk"),           # the run dir's file system full for `arg` seconds (tmpfs only)
    "client_drop": (2, "client"),       # the attached client killed, a new one attached
    "preempt": (2, "supervisor"),       # SIGTERM to the supervisor (the platform takes the machine), then `up -d`
    # user actions
    "restart": (3, "component"),
    "stop": (2, "component"),           # `rlsup stop`, and later a `start` (drawn as its own action)
    "start": (2, "component"),
    "resume": (2, "trainer"),           # `rlsup resume trainer` (the only component with checkpoints)
    "restart_supervisor": (3, "supervisor"),
    "down_resume": (2, "run"),          # `rlsup down`, then `rlsup up CONFIG -d --resume`
}

# A component's one-shot chaos fault (configs/demo-chaos.yaml's knobs): kind -> components it fits.
CHAOS = {
    "trainer": ("crash", "oom", "exit0", "hang"),
    "orchestrator": ("crash", "oom", "exit0"),
    "inference": ("die",),
}


@dataclass(frozen=True)
class Action:
    kind: str
    target: str | None = None
    arg: float | None = None
    at: int = 0  # done once the trainer reached this step (or the run is not live, or a ceiling passed)

    def __str__(self) -> str:
        parts = [f"@{self.at}", self.kind] + ([self.target] if self.target else [])
        if self.arg is not None:
            parts.append(f"{self.arg:g}s")
        return " ".join(parts)


@dataclass(frozen=True)
class Sequence:
    seed: int
    steps: int  # RLSUP_DEMO_STEPS
    chaos: dict[str, str]  # component -> RLSUP_CHAOS_* value ("none" for no fault)
    actions: tuple[Action, ...]
    ending: str  # "down" (rlsup down) or "finish" (wait for the run to end by itself, then down)

    def env(self) -> dict[str, str]:
        return {"RLSUP_DEMO_STEPS": str(self.steps),
                **{f"RLSUP_CHAOS_{c.upper()}": self.chaos.get(c, "none") for c in COMPONENTS}}

    def describe(self) -> str:
        chaos = " ".join(f"{c}={v}" for c, v in sorted(self.chaos.items()) if v != "none") or "no chaos"
        return (f"RLSUP_EXPLORE_SEED={self.seed}: steps {self.steps}, {chaos}; "
                + " -> ".join([*(str(a) for a in self.actions), self.ending]))


def _chaos(rng: random.Random, steps: int) -> dict[str, str]:
    out = {}
    for comp, kinds in CHAOS.items():
        if rng.random() >= 0.35:
            out[comp] = "none"
            continue
        kind = rng.choice(kinds)
        out[comp] = f"die@{rng.randint(4, 25)}s" if kind == "die" else f"{kind}@{rng.randint(3, steps - 2)}"
    return out


def _action(rng: random.Random, kind: str, at: int, disk: bool) -> Action:
    what = KINDS[kind][1]
    if kind == "disk_full" and not disk:
        return Action("kill9", rng.choice(COMPONENTS), at=at)
    if what == "component":
        target = rng.choice(COMPONENTS)
        if kind in ("sigstop", "sigstop_monitor"):
            return Action(kind, target, rng.choice((1, 2, 4, 8, 25)), at=at)
        return Action(kind, target, at=at)
    if kind == "resume":
        return Action(kind, "trainer", at=at)
    if kind == "sigstop_supervisor":
        return Action(kind, None, rng.choice((1, 3, 8)), at=at)
    if kind == "disk_full":
        return Action(kind, None, rng.choice((2, 5, 15)), at=at)
    return Action(kind, at=at)


def generate(seed: int, *, disk: bool = True, length: tuple[int, int] = (3, 6)) -> Sequence:
    """The sequence of ``seed``. ``disk``: whether the run dir is a file system the harness can fill."""
    rng = random.Random(seed)
    steps = rng.randint(20, 60)
    chaos = _chaos(rng, steps)
    names = list(KINDS)
    weights = [KINDS[k][0] for k in names]
    kinds = rng.choices(names, weights, k=rng.randint(*length))
    # spread over the run: each action waits for a later step of the trainer than the one before
    ats = sorted(rng.randint(0, steps - 1) for _ in kinds)
    actions = tuple(_action(rng, k, at, disk) for k, at in zip(kinds, ats, strict=True))
    ending = rng.choice(("down", "finish"))
    return Sequence(seed, steps, chaos, actions, ending)
