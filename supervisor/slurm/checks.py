"""What the config's Slurm keys must satisfy, beyond their types (reported with file:line:col by config)."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import Any

Path_ = tuple[str | int, ...]


def config_problems(cfg: Any) -> Iterator[tuple[Path_, str, bool]]:
    """(key path, message, whether the position is the key's) for each problem."""
    names = list(cfg.components)
    slurm = cfg.slurm
    for n, c in cfg.components.items():
        base: Path_ = ("components", n)
        if slurm is None:
            if c.gpu_count is not None:
                yield (base + ("gpus",), "a GPU count needs a `slurm:` block (Slurm binds the GPUs); on one "
                                         "machine list the GPU indices, e.g. `gpus: [0, 1]`", False)
            for key in ("nodes", "colocate"):
                if getattr(c, key) is not None:
                    yield (base + (key,), f"`{key}` places a component on nodes of a Slurm allocation: it needs "
                                          "a `slurm:` block (nodes, gpus_per_node, ...)", True)
            continue
        if c.gpus is not None:
            yield (base + ("gpus",), "with a `slurm:` block, `gpus` is a count per node and Slurm picks the "
                                     f"GPUs: write `gpus: {len(c.gpus)}`", False)
        if c.gpu_count is not None:
            if c.gpu_count < 0:
                yield (base + ("gpus",), "a GPU count is 0 or more", False)
            elif c.gpu_count > slurm.gpus_per_node:
                yield (base + ("gpus",), f"{c.gpu_count} GPUs per node, but the allocation has "
                                         f"slurm.gpus_per_node: {slurm.gpus_per_node}", False)
        if c.nodes is not None and c.nodes > slurm.nodes:
            yield (base + ("nodes",), f"{c.nodes} nodes, but the allocation has slurm.nodes: {slurm.nodes}", False)
        if c.colocate is not None:
            if c.nodes is not None:
                yield (base + ("colocate",), "`colocate` and `nodes` together: a colocated component runs on "
                                             "the first node of the other one; drop one of them", True)
            elif c.colocate == n:
                yield (base + ("colocate",), "a component cannot colocate with itself", False)
            elif c.colocate not in cfg.components:
                close = difflib.get_close_matches(c.colocate, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; components are: {', '.join(names)}"
                yield (base + ("colocate",), f"unknown component {c.colocate!r}{hint}", False)
            elif cfg.components[c.colocate].nodes is None:
                yield (base + ("colocate",), f"{c.colocate!r} has no `nodes:` of its own to colocate with "
                                             f"(give it `nodes: 1`)", False)
