"""Which nodes of the allocation each component runs on (pure functions of the config and the node list).

The rule, in file order: a component with ``nodes: k`` takes the next ``k`` nodes of the allocation
(in ``SLURM_JOB_NODELIST`` order, the batch node first), wrapping around to the first node when the
allocation is used up; ``colocate: X`` runs on X's first node; a component with neither runs on the
first node (where the supervisor is). Slurm still decides everything inside a node (which GPUs, which
cores): a component's ``gpus: G`` is a ``--gres=gpu:G`` request on each of its nodes.

On a login node, before the job starts, the names are not known yet: placeholders
``<name>-node-<i>`` stand in so that the config can be checked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

PLACEHOLDER = "{name}-node-{i}"
# Placeholders stand in for at most this many nodes (on a login node, where `${RLSUP_NODES_C}` only has to
# look like what it will be): `slurm.nodes: ${N}` with N huge made a list of that many names (a config that
# took all 24 GiB of memory, found by the config fuzzer). Inside the job the real node list is used.
MAX_PLACEHOLDERS = 4096


def env_name(component: str) -> str:
    """`trainer-0.b` -> `TRAINER_0_B`: the suffix of a component's variables."""
    return re.sub(r"[^A-Za-z0-9_]", "_", component).upper()


def expand_hostlist(expr: str) -> list[str]:
    """Slurm's compressed host list (``rn[1-3,7],gpu-[01-02]x``) as names, in order."""
    # The names between the commas outside brackets (an unclosed bracket runs to the end).
    return [name for part in re.findall(r"(?:\[[^\]]*\]?|[^,\[])+", expr.strip()) for name in _expand_one(part)]


def _expand_one(s: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", s)
    if not m:
        return [s]
    items: list[str] = []
    for rng in m.group(1).split(","):
        if "-" in rng:
            a, b = rng.split("-", 1)
            width = len(a) if a.startswith("0") else 0
            items += [str(i).zfill(width) for i in range(int(a), int(b) + 1)]
        else:
            items.append(rng)
    return [s[:m.start()] + x + rest for x in items for rest in _expand_one(s[m.end():])]


def _int(v: Any, default: int) -> int:
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else default


REST = "rest"  # `nodes: rest`: every node of the allocation that no other component's `nodes:` takes


def place(components: Mapping[str, Any], allocation: list[str]) -> dict[str, list[str]]:
    """component -> its node names. ``components`` is the raw config mapping (before validation: a
    wrong value falls back to a default here and is reported by validation)."""
    out: dict[str, list[str]] = {}
    if not allocation:
        return out
    cursor = 0
    n = len(allocation)
    rest = []
    comps = {name: c if isinstance(c, Mapping) else {} for name, c in components.items()}
    for name, c in comps.items():
        if c.get("nodes") == REST:
            rest.append(name)
        elif c.get("nodes") is not None:
            k = min(_int(c.get("nodes"), 1), n)
            out[name] = [allocation[(cursor + i) % n] for i in range(k)]
            cursor = (cursor + k) % n
    taken = {node for nodes in out.values() for node in nodes}
    for name in rest:  # none left is refused by validation (config.slurm_checks)
        out[name] = [node for node in allocation if node not in taken] or allocation[-1:]
    for name, c in comps.items():
        if name not in out:
            target = c.get("colocate")
            out[name] = out[target][:1] if isinstance(target, str) and target in out else allocation[:1]
    return out


def allocation_nodes(slurm: Mapping[str, Any], environ: Mapping[str, str], run_name: str) -> tuple[list[str], bool]:
    """The allocation's node names and whether they are real (inside the job) or placeholders."""
    if environ.get("SLURM_JOB_ID") and environ.get("SLURM_JOB_NODELIST"):
        return expand_hostlist(environ["SLURM_JOB_NODELIST"]), True
    count = _int(slurm.get("nodes"), 1) if isinstance(slurm, Mapping) else 1
    return [PLACEHOLDER.format(name=run_name, i=i) for i in range(min(count, MAX_PLACEHOLDERS))], False


ADDRS_ENV = "RLSUP_NODE_ADDRS"  # inside the job: "name=addr,..." (Slurm's NodeAddr of each node), set by `rlsup up`


def node_addresses(environ: Mapping[str, str]) -> dict[str, str]:
    """Node name -> the address that reaches it (Slurm's ``NodeAddr``), from :data:`ADDRS_ENV`."""
    pairs = (p.split("=", 1) for p in environ.get(ADDRS_ENV, "").split(",") if "=" in p)
    return {name: addr for name, addr in pairs if name and addr}


def variables(placement: Mapping[str, list[str]], addrs: Mapping[str, str] | None = None) -> dict[str, str]:
    """``RLSUP_NODES_C`` (node names), ``RLSUP_ADDRS_C`` and ``RLSUP_HEAD_C`` (addresses that reach them:
    Slurm's ``NodeAddr``, the name where it is not set) and ``RLSUP_NNODES_C`` for every component C."""
    out: dict[str, str] = {}
    at = addrs or {}
    for name, nodes in placement.items():
        e = env_name(name)
        reach = [at.get(n, n) for n in nodes]
        out[f"RLSUP_NODES_{e}"] = ",".join(nodes)
        out[f"RLSUP_ADDRS_{e}"] = ",".join(reach)
        out[f"RLSUP_HEAD_{e}"] = reach[0] if reach else ""
        out[f"RLSUP_NNODES_{e}"] = str(len(nodes))
    return out
