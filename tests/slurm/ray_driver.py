"""A real Ray driver, standing in for verl's main_ppo (which needs GPUs): joins the running Ray
cluster (``ray.init()`` reads ``RAY_ADDRESS``, as verl's ``ray.init(**ray_kwargs.ray_init)`` does),
places one actor on each node, and runs training steps on them, printing ``Step N/T``.

Checkpoints ``<ckpt>/step_N`` every ``--ckpt-every`` steps and, with ``--resume-step N``, goes on from
step N+1. An actor that is only unreachable for a moment (``ActorUnavailableError``, which Ray documents
as retriable) is retried; one Ray declares dead (``ActorDiedError``) ends the driver with Ray's error,
as a verl driver ends when a worker group's actor is lost.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=0)
class Learner:
    def __init__(self, rank: int):
        self.rank = rank

    def step(self, i: int) -> tuple[int, int, int]:
        return self.rank, os.getpid(), i


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--total", type=int, default=200)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--sleep", type=float, default=0.3)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--ckpt-every", type=int, default=5)
    ap.add_argument("--resume-step", type=int, default=0)
    a = ap.parse_args()
    ray.init()  # RAY_ADDRESS=HEAD:PORT: join the cluster the ray-head component runs
    deadline = time.time() + 120
    while True:
        alive = [n for n in ray.nodes() if n["Alive"]]
        if len(alive) >= a.nodes or time.time() > deadline:
            break
        time.sleep(0.5)
    if len(alive) < a.nodes:
        print(f"only {len(alive)} Ray nodes alive after 120 s, wanted {a.nodes}", flush=True)
        return 2
    alive.sort(key=lambda n: not n["Resources"].get("node:__internal_head__"))  # the head's first
    actors = [Learner.options(name=f"learner-{k}", scheduling_strategy=NodeAffinitySchedulingStrategy(
        n["NodeID"], soft=False)).remote(k) for k, n in enumerate(alive)]
    print("actors on nodes", [n["NodeID"][:8] for n in alive], flush=True)
    if a.resume_step:
        print(f"resuming: starting at step {a.resume_step + 1}", flush=True)
    for i in range(a.resume_step + 1, a.total + 1):
        while True:
            try:
                ray.get([x.step.remote(i) for x in actors], timeout=120)
                break
            except ray.exceptions.ActorUnavailableError as e:  # retriable (ray/exceptions.py)
                print(f"actor unavailable, retrying: {str(e)[:160]}", flush=True)
                time.sleep(1)
        print(f"Step {i}/{a.total}", flush=True)
        if i % a.ckpt_every == 0:  # complete or absent: written aside, then renamed into place
            tmp = os.path.join(a.ckpt, f".step_{i}.tmp")
            os.makedirs(tmp, exist_ok=True)
            with open(os.path.join(tmp, "state.json"), "w") as f:
                f.write(f'{{"step": {i}}}\n')
            os.replace(tmp, os.path.join(a.ckpt, f"step_{i}"))
        time.sleep(a.sleep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
