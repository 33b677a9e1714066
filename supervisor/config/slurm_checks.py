"""What the config's Slurm keys must satisfy, beyond their types (reported with file:line:col by config)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .model import Path_, did_you_mean
from .placement import MAX_PLACEHOLDERS, place

#: (key path, message, whether the position is the key's)
Found = tuple[Path_, str, bool]


def config_problems(cfg: Any) -> Iterator[Found]:
    """(key path, message, whether the position is the key's) for each problem."""
    if cfg.slurm is not None:
        yield from _warning_before_the_limit(cfg.slurm)
        yield from _shared_nodes_have_the_gpus(cfg)
    # The checks of one component, in the order their problems are reported.
    for n, c in cfg.components.items():
        if cfg.slurm is None:
            yield from _placement_alone(n, c)
        else:
            yield from _gpus_are_a_count_that_fits(cfg, n, c)
            yield from _nodes_fit(cfg, n, c)
            yield from _colocate_names_a_placed_component(cfg, n, c)


def _warning_before_the_limit(slurm: Any) -> Iterator[Found]:
    limit = slurm.time_limit_s()
    if slurm.warn_before is not None and limit is not None and slurm.warn_before >= limit:
        yield (("slurm", "warn_before"), f"warn_before: {slurm.warn_before} s is not shorter than the job's time "
                                         f"limit ({slurm.time}, {limit} s): Slurm would warn it as it starts; give "
                                         f"fewer seconds (at most {limit - 1}) or a longer `time`", False)


def _shared_nodes_have_the_gpus(cfg: Any) -> Iterator[Found]:
    """Components whose ``nodes:`` add up to more than ``slurm.nodes`` share nodes (placement wraps around): where
    their GPU counts on a shared node exceed ``gpus_per_node``, the later step would wait for GPUs for ever
    while its component shows ``running`` with an empty log."""
    # Placed again from the validated values: the loader places before `${NODES}` is interpolated. Only the
    # nodes components ask for can be shared: an allocation one longer than that is the same placement.
    asked = sum(_counted(c.nodes) for c in cfg.components.values())
    size = min(cfg.slurm.nodes, asked + 1)
    if size > MAX_PLACEHOLDERS:
        return  # components asking for that many nodes: Slurm alone judges
    if asked >= cfg.slurm.nodes and any(c.nodes == "rest" for c in cfg.components.values()):
        return  # a `rest` with no node left: reported by _nodes_fit
    nodes_of = place({n: {"nodes": c.nodes, "colocate": c.colocate} for n, c in cfg.components.items()},
                     [f"node-{i}" for i in range(size)])
    need: dict[str, list[tuple[str, int]]] = {}
    for n, nodes in nodes_of.items():
        count = cfg.components[n].gpu_count or 0
        for node in dict.fromkeys(nodes) if count else ():
            need.setdefault(node, []).append((n, count))
    for users in need.values():
        if len(users) > 1 and sum(k for _, k in users) > cfg.slurm.gpus_per_node:
            last = users[-1][0]
            who = " + ".join(f"{n} {k}" for n, k in users)
            yield (("components", last, "gpus"), f"{who} GPUs on one node of the allocation (they share it: `colocate:`, "
                   f"or `nodes:` adding up to more than slurm.nodes: {cfg.slurm.nodes}), which has "
                   f"gpus_per_node: {cfg.slurm.gpus_per_node}: {last}'s step would wait for GPUs for ever; raise "
                   "slurm.nodes or lower a count", True)


def _placement_alone(n: str, c: Any) -> Iterator[Found]:
    """Without a `slurm:` block: no GPU count, no `nodes` or `colocate`."""
    if c.gpu_count is not None:
        yield (("components", n, "gpus"), "a GPU count needs a `slurm:` block (Slurm binds the GPUs); on one "
                                          "machine list the GPU indices, e.g. `gpus: [0, 1]`", False)
    for key in ("nodes", "colocate"):
        if getattr(c, key) is not None:
            yield (("components", n, key), f"`{key}` places a component on nodes of a Slurm allocation: it needs "
                                           "a `slurm:` block (nodes, gpus_per_node, ...)", True)


def _gpus_are_a_count_that_fits(cfg: Any, n: str, c: Any) -> Iterator[Found]:
    if c.gpus is not None:
        yield (("components", n, "gpus"), "with a `slurm:` block, `gpus` is a count per node and Slurm picks the "
                                          f"GPUs: write `gpus: {len(c.gpus)}`", False)
    if c.gpu_count is not None and c.gpu_count < 0:
        yield (("components", n, "gpus"), "a GPU count is 0 or more", False)
    elif c.gpu_count is not None and c.gpu_count > cfg.slurm.gpus_per_node:
        yield (("components", n, "gpus"), f"{c.gpu_count} GPUs per node, but the allocation has "
                                          f"slurm.gpus_per_node: {cfg.slurm.gpus_per_node}", False)


def _counted(nodes: int | str | None) -> int:
    return nodes if isinstance(nodes, int) else 0


def _nodes_fit(cfg: Any, n: str, c: Any) -> Iterator[Found]:
    if isinstance(c.nodes, int) and c.nodes > cfg.slurm.nodes:
        yield (("components", n, "nodes"), f"{c.nodes} nodes, but the allocation has slurm.nodes: {cfg.slurm.nodes}",
               False)
    if c.nodes != "rest":
        return
    others = [m for m, o in cfg.components.items() if o.nodes == "rest"]
    taken = sum(_counted(o.nodes) for o in cfg.components.values())
    if others[0] != n:
        yield (("components", n, "nodes"), f"{others[0]} already takes the rest of the nodes; give one of them a "
                                           "number of nodes", False)
    elif taken >= cfg.slurm.nodes:
        yield (("components", n, "nodes"), f"`rest` leaves no node: the other components take {taken} of slurm.nodes: "
                                           f"{cfg.slurm.nodes}; raise slurm.nodes", False)


def _colocate_names_a_placed_component(cfg: Any, n: str, c: Any) -> Iterator[Found]:
    if c.colocate is None:
        return
    path: Path_ = ("components", n, "colocate")
    if c.nodes is not None:
        yield (path, "`colocate` and `nodes` together: a colocated component runs on "
                     "the first node of the other one; drop one of them", True)
    elif c.colocate == n:
        yield (path, "a component cannot colocate with itself", False)
    elif c.colocate not in cfg.components:
        hint = did_you_mean(c.colocate, list(cfg.components), "components are")
        yield (path, f"unknown component {c.colocate!r}{hint}", False)
    elif cfg.components[c.colocate].nodes is None:
        yield (path, f"{c.colocate!r} has no `nodes:` of its own to colocate with "
                     f"(give it `nodes: 1`)", False)
