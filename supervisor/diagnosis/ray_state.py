"""Ray's own view of its cluster, read from the dashboard's state API: dead nodes and why actors died.

A pure parser of the JSON that Ray's dashboard serves at ``GET /api/v0/nodes`` and
``GET /api/v0/actors?detail=true`` (ray/dashboard/modules/state/state_head.py, ``list_nodes`` and
``list_actors``; the rows are ``NodeState`` and ``ActorState`` of ray/util/state/common.py, where
``death_cause`` is a detail-only column: Ray 2.60.0). The answer is Ray's reply envelope
``{"result": bool, "msg": str, "data": {"result": {"result": [rows], "total": N, ...}}}``.

What it adds to an exit's diagnosis: the driver's log names the actor it lost (``ActorDiedError``,
see :mod:`.ray_deaths`); the state API also says which node it was on and why Ray declared that
node dead (``state_message``: "Unexpected termination: health check failed due to missing too many
heartbeats"), and names actors that died while the driver still waited on them. No ``ray`` import:
the supervisor reads HTTP (:mod:`rlsup.supervisor.run.rayprobe`) and this module reads the JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


class RayApiError(ValueError):
    """The answer is not the state API's envelope, or Ray says the call failed."""


@dataclass(frozen=True)
class RayNode:
    node_id: str
    ip: str
    name: str
    is_head: bool
    state: str  # ALIVE | DEAD
    message: str | None  # why it is DEAD, as Ray says it

    @property
    def short(self) -> str:
        return self.node_id[:8]

    def death(self) -> str:
        where = self.ip + (f", {self.name}" if self.name and self.name != self.ip else "")
        return f"Ray {'head ' if self.is_head else ''}node {self.short} ({where}) is DEAD" + (
            f": {self.message}" if self.message else "")


@dataclass(frozen=True)
class RayActor:
    actor_id: str
    class_name: str
    name: str | None
    state: str  # DEPENDENCIES_UNREADY | PENDING_CREATION | ALIVE | RESTARTING | DEAD
    node_id: str | None
    pid: int | None
    job_id: str | None
    cause_kind: str | None = None  # the death_cause's one key: actor_died_error_context, creation_task_failure_context...
    reason: str | None = None  # ActorDiedErrorContext.reason: NODE_DIED, WORKER_DIED, OWNER_DIED, RAY_KILL, OUT_OF_MEMORY...
    error: str | None = None  # Ray's message for the death, first lines
    node_death: dict[str, Any] = field(default_factory=dict)  # node_death_info, where Ray gives one

    @property
    def consequential(self) -> bool:
        """A death that follows from another: an actor whose owner (the driver) died goes down with it."""
        return self.reason == "OWNER_DIED"

    def label(self) -> str:
        bits = [self.class_name] if self.name and self.class_name else []
        if self.pid:
            bits.append(f"pid {self.pid}")
        who = self.name or self.class_name or self.actor_id[:12]
        return f"Ray actor {who}" + (f" ({', '.join(bits)})" if bits else "")


def _rows(payload: bytes | str | Mapping[str, Any]) -> list[dict[str, Any]]:
    try:
        doc = json.loads(payload) if isinstance(payload, bytes | str) else payload
    except ValueError as e:
        raise RayApiError(f"not JSON: {e}") from None
    if not isinstance(doc, Mapping) or "result" not in doc:
        raise RayApiError("not Ray's state API reply (no 'result')")
    if doc.get("result") is not True:
        raise RayApiError(str(doc.get("msg") or "Ray says the call failed"))
    data = doc.get("data")
    inner = data.get("result") if isinstance(data, Mapping) else None
    rows = inner.get("result") if isinstance(inner, Mapping) else inner
    if not isinstance(rows, list):
        raise RayApiError("Ray's reply holds no list of rows")
    return [dict(r) for r in rows if isinstance(r, Mapping)]


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def parse_nodes(payload: bytes | str | Mapping[str, Any]) -> list[RayNode]:
    """The nodes of ``GET /api/v0/nodes`` (detail or not)."""
    return [RayNode(node_id=str(r.get("node_id") or ""), ip=str(r.get("node_ip") or ""),
                    name=str(r.get("node_name") or ""), is_head=bool(r.get("is_head_node")),
                    state=str(r.get("state") or "UNKNOWN"), message=r.get("state_message") or None)
            for r in _rows(payload)]


def parse_actors(payload: bytes | str | Mapping[str, Any]) -> list[RayActor]:
    """The actors of ``GET /api/v0/actors?detail=true`` (without ``detail`` there is no death cause)."""
    out = []
    for r in _rows(payload):
        raw = r.get("death_cause")
        cause: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        kind = next(iter(cause), None) if cause else None
        ctx = cause.get(kind) if kind else None
        ctx = ctx if isinstance(ctx, Mapping) else {}
        error = ctx.get("error_message") or ctx.get("formatted_exception_string") or ctx.get("error_msg")
        error = " ".join([x.strip() for x in str(error).splitlines() if x.strip()][:3]) if error else None  # first lines
        nd = ctx.get("node_death_info")
        out.append(RayActor(
            actor_id=str(r.get("actor_id") or ""), class_name=str(r.get("class_name") or ""),
            name=r.get("name") or None, state=str(r.get("state") or "UNKNOWN"), node_id=r.get("node_id") or None,
            pid=_int(r.get("pid")) or None, job_id=r.get("job_id") or None, cause_kind=kind,
            reason=ctx.get("reason") or None, error=error,
            node_death=dict(nd) if isinstance(nd, Mapping) else {}))
    return out


def actor_death(actor: RayActor, nodes: Mapping[str, RayNode]) -> str:
    """One line that says which actor died and why, in Ray's words, with its node where that is why."""
    node = nodes.get(actor.node_id or "")
    if actor.reason == "NODE_DIED" or (node is not None and node.state == "DEAD" and not actor.consequential):
        where = node.death() if node is not None else f"Ray node {(actor.node_id or '?')[:8]}"
        return f"{actor.label()} died: its node died ({where})"
    return f"{actor.label()} died: {actor.error or actor.reason or 'Ray gives no cause'}"


@dataclass(frozen=True)
class RayDeaths:
    """Nodes and actors first seen dead in one window (an attempt), in the order they were seen."""

    nodes: tuple[RayNode, ...] = ()
    actors: tuple[RayActor, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.nodes or self.actors)

    def __add__(self, other: RayDeaths) -> RayDeaths:
        return RayDeaths(self.nodes + other.nodes, self.actors + other.actors)

    def causes(self) -> list[RayActor]:
        """The actors whose death is not the consequence of another (an owner's), first."""
        return [a for a in self.actors if not a.consequential] + [a for a in self.actors if a.consequential]


def known_dead(nodes: Iterable[RayNode], actors: Iterable[RayActor]) -> frozenset[str]:
    return frozenset([f"node:{n.node_id}" for n in nodes if n.state == "DEAD"]
                     + [f"actor:{a.actor_id}" for a in actors if a.state == "DEAD"])


def new_deaths(known: frozenset[str], nodes: list[RayNode], actors: list[RayActor]) -> tuple[RayDeaths, frozenset[str]]:
    """What is dead now and was not in ``known``, and the new ``known``."""
    dn = tuple(n for n in nodes if n.state == "DEAD" and f"node:{n.node_id}" not in known)
    da = tuple(a for a in actors if a.state == "DEAD" and f"actor:{a.actor_id}" not in known)
    return RayDeaths(dn, da), known | known_dead(dn, da)


# What Ray's own record of a death outranks: no cause at all, Ray's death as the log tells it, or a
# symptom (a refused connection, a timeout: what a driver prints while its actors' node is gone; a
# real Ray 2.60 driver's tail ends with raylet lines about broken connections after its ActorDiedError).
OUTRANKED = frozenset({"ray_actor_died", "unknown", "none", "killed", "connection_refused", "distributed_timeout",
                       "watchdog_timeout"})
RAY_EXCEPTIONS = ("ActorDiedError", "RayActorError", "ActorUnavailableError", "WorkerCrashedError",
                  "NodeDiedError", "RaySystemError", "GetTimeoutError")


def refine(diag: Mapping[str, Any], deaths: RayDeaths, nodes: Mapping[str, RayNode], url: str) -> dict[str, Any]:
    """An exit's diagnosis with what Ray's state API said about this attempt's window.

    ``diag["ray"]`` lists the dead nodes and actors; where the exit is Ray's doing (the log already says
    ``ray_actor_died``, or only an unexplained exit, a symptom such as a refused connection, or a Ray
    exception is known) the summary names the actor that died and why, and its node. A cause the program printed itself (a CUDA OOM, a bug of its
    own) stays first: Ray's view is kept beside it."""
    out = dict(diag)
    if not deaths:
        return out
    causes = deaths.causes()
    own = [a for a in causes if not a.consequential]  # deaths that are no other death's consequence
    known = {**nodes, **{n.node_id: n for n in deaths.nodes}}
    out["ray"] = {"url": url, "dead_nodes": [asdict(n) for n in deaths.nodes],
                  "dead_actors": [{"actor_id": a.actor_id, "class_name": a.class_name, "name": a.name, "pid": a.pid,
                                   "node_id": a.node_id, "job_id": a.job_id, "reason": a.reason, "error": a.error,
                                   "death": actor_death(a, known)} for a in causes]}
    lines = [f"{url}/api/v0/nodes: {n.death()}" for n in deaths.nodes]
    lines += [f"{url}/api/v0/actors: {actor_death(a, known)}" for a in own][:5]
    out["evidence"] = list(diag.get("evidence") or []) + lines
    exc = str(diag.get("exception") or "")
    if (own or deaths.nodes) and (diag.get("category") in OUTRANKED or any(x in exc for x in RAY_EXCEPTIONS)):
        more = len(own) - 1
        many = f" (and {more} more actor{'s' if more > 1 else ''})" if more > 0 else ""
        out["category"] = "ray_actor_died"
        out["summary"] = (actor_death(own[0], known) + many if own
                          else f"{deaths.nodes[0].death()} (Ray's state API); the program ended after it")
    return out
