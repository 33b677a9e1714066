"""What the cluster allows: a `slurm:` block checked against Slurm's own view of its partitions and nodes.

:func:`ask` reads ``scontrol show partition -o`` and ``sinfo -N`` once (None where Slurm does not answer: the
check then says nothing rather than guess); :func:`problems` is pure: the allocation the config asks for
(partition, nodes, GPUs per node) against what the cluster has, each with the key to change and how.
A job that asks for more than its partition can ever give pends for ever (``PartitionNodeLimit``); this says so
before ``sbatch``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config.placement import expand_hostlist
from .jobs import key_values, run

TIMEOUT_S = 10.0
_GPU_RE = re.compile(r"gpu(?::[^:(,]+)?:(\d+)")  # the GPUs of a gres: gpu:2, gpu:a100:8(S:0-1), gpu:4,shard:8


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: list[str]
    max_nodes: int | None  # None: UNLIMITED
    default: bool = False
    state: str = "UP"


@dataclass(frozen=True)
class Cluster:
    partitions: dict[str, Partition]
    gpus: dict[str, int] = field(default_factory=dict)  # node -> GPUs (its gres)


def parse(partitions_out: str, nodes_out: str) -> Cluster:
    """``scontrol show partition -o`` and ``sinfo -h -N -o '%N|%G'``, as a :class:`Cluster`."""
    parts = {}
    for line in partitions_out.splitlines():
        f = key_values(line)
        if not f.get("PartitionName"):
            continue
        nodes = expand_hostlist(f["Nodes"]) if f.get("Nodes") and f["Nodes"] != "(null)" else []
        mx = f.get("MaxNodes", "UNLIMITED")
        parts[f["PartitionName"]] = Partition(f["PartitionName"], nodes, int(mx) if mx.isdigit() else None,
                                              f.get("Default") == "YES", f.get("State", "UP"))
    gpus: dict[str, int] = {}
    for line in nodes_out.splitlines():
        node, _, gres = line.strip().partition("|")
        if node:
            gpus[node] = max(gpus.get(node, 0), sum(int(m.group(1)) for m in _GPU_RE.finditer(gres)))
    return Cluster(parts, gpus)


def ask() -> Cluster | None:
    """The cluster as Slurm describes it; None where ``scontrol``/``sinfo`` are missing or do not answer."""
    p = run(["scontrol", "show", "partition", "-o"], TIMEOUT_S)
    n = run(["sinfo", "-h", "-N", "-o", "%N|%G"], TIMEOUT_S) if p is not None and p.returncode == 0 else None
    return parse(p.stdout, n.stdout) if p is not None and n is not None and n.returncode == 0 else None


Problem = tuple[tuple[str, ...], str, str]  # (key path, message, fix)


def problems(slurm: Any, cluster: Cluster) -> list[Problem]:
    """What the `slurm:` block asks for that this cluster can never give."""
    name = slurm.partition
    if name is None:
        part = next((p for p in cluster.partitions.values() if p.default), None)
        if part is None:
            return []  # no default partition: sbatch says which to name
    elif name not in cluster.partitions:
        known = sorted(cluster.partitions)
        close = difflib.get_close_matches(name, known, n=1)
        return [(("slurm", "partition"), f"partition {name!r} does not exist on this cluster"
                 + (f" (did you mean {close[0]!r}?)" if close else "") + f"; partitions: {', '.join(known)}",
                 f"partition: {close[0] if close else known[0] if known else '<one of sinfo -s>'}")]
    else:
        part = cluster.partitions[name]
    return _nodes(slurm, part) + _gpus(slurm, part, cluster.gpus)


def _nodes(slurm: Any, part: Partition) -> list[Problem]:
    have = len(part.nodes)
    if have and slurm.nodes > have:
        return [(("slurm", "nodes"), f"slurm.nodes: {slurm.nodes}, but partition {part.name!r} has {have} node(s): "
                 "the job would pend for ever (PartitionNodeLimit)", f"nodes: {have} (or another partition)")]
    if part.max_nodes is not None and slurm.nodes > part.max_nodes:
        return [(("slurm", "nodes"), f"slurm.nodes: {slurm.nodes}, but partition {part.name!r} allows at most "
                 f"{part.max_nodes} node(s) a job (MaxNodes)", f"nodes: {part.max_nodes} (or another partition)")]
    return []


def _gpus(slurm: Any, part: Partition, gpus: Mapping[str, int]) -> list[Problem]:
    counts = sorted((gpus.get(n, 0) for n in part.nodes), reverse=True)
    enough = sum(c >= slurm.gpus_per_node for c in counts)
    if not slurm.gpus_per_node or not counts or enough >= slurm.nodes:
        return []
    most = counts[0]
    where = f"the nodes of partition {part.name!r} have at most {most} GPU(s)" if enough == 0 else (
        f"only {enough} node(s) of partition {part.name!r} have {slurm.gpus_per_node} GPUs")
    return [(("slurm", "gpus_per_node"), f"slurm.gpus_per_node: {slurm.gpus_per_node}, but {where}: the job would "
             "pend for ever", f"gpus_per_node: {most}" if enough == 0 else f"nodes: {enough}")]
