"""A Ray actor (or task worker) that died without a cause Ray could name: which one, and what Ray says.

Ray prints such a death as ``ActorDiedError: The actor died unexpectedly before finishing this
task.`` with the actor's ``class_name`` / ``pid`` / ``name`` / ``ip``, then one line that says why
it knows the actor is gone ("its worker process has died", "its owner has died", "its node has
died") with the worker's exit type and, for a worker that vanished, a list of possible causes
("(1) ... OOM killer ... (2) ray stop --force ... (3) ... SIGSEGV ..."). The raylet logs the same
for a task's worker ("A worker died or was killed while executing a task by an unexpected system
error. ... Worker PID: N Worker exit type: SYSTEM_ERROR ..."). Ray does not know which cause it
was, so neither does rlsup: the summary names the actor and Ray's reason, the hint lists Ray's
possibilities and says where to look, never asserting one (ray/python/ray/exceptions.py
``ActorDiedError``; src/ray/raylet's worker-exit detail strings).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

_HEADER = re.compile(
    r"(?P<type>[\w.]*(?:ActorDiedError|RayActorError|WorkerCrashedError|ActorUnavailableError|NodeDiedError))"
    r"(?::|\b)"
)
_FIELD = re.compile(r"^\s*(?P<key>class_name|actor_id|pid|name|ip):\s*(?P<value>\S.*?)\s*$")
_BECAUSE = re.compile(r"The actor (?:is dead|died) because (?:its|of) (?P<why>[^.]+)\.")
_EXIT_TYPE = re.compile(r"(?P<who>Owner worker|Worker) exit type: (?P<type>UNEXPECTED_SY ?STEM_EXIT|[A-Z_]+)")
_DETAIL = re.compile(r"Worker exit detail: (?P<detail>.+?\.)(?=\s|$)")
# "There are some potential root causes. (1) ... (2) ... (3) ..." (Ray 2.x) or "Some common causes
# include: (1) ..., (2) ..., or (3) ..." (newer Ray)
_CAUSES = re.compile(
    r"(?:There are some potential root causes\.|Some common causes include:)\s*(?P<causes>\(1\).*?)"
    r"(?=\s+If the |\s*$)"
)
_RAYLET_DEATH = re.compile(r"A worker died or was killed while executing (?:a )?task")
_WORKER_PID = re.compile(r"Worker PID: (?P<pid>\d+)")
_WORKER_IP = re.compile(r"Worker IP address: (?P<ip>\S+)")
_UNAVAILABLE = re.compile(r"The actor (?P<actor_id>\w+) is unavailable")
_NODE_REASON = re.compile(r"the actor's node was terminated (?P<how>[^\n]+)")
_CAUSE_ITEM = re.compile(r"\(\d\)\s*")


@dataclass
class RayDeath:
    """What the tail says about the last Ray actor/worker death."""

    kind: str = "actor"  # actor | task worker
    exc_type: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    why: str | None = None  # "its worker process has died", "its owner has died", ...
    exit_type: str | None = None
    detail: str | None = None
    causes: list[str] = field(default_factory=list)
    node_reason: str | None = None
    lines: list[str] = field(default_factory=list)

    def summary(self) -> str:
        f = self.fields
        short = f.get("class_name", "").rsplit(".", 1)[-1]  # the class, without its module
        bits = [b for b in (f"pid {f['pid']}" if "pid" in f else "", f.get("name", ""),
                            f"on {f['ip']}" if "ip" in f else "") if b]
        who = f"Ray {self.kind}" + (f" {short}" if short else "") + (f" ({', '.join(bits)})" if bits else "")
        reason = self.why or ("it became unreachable" if self.exc_type and "Unavailable" in self.exc_type
                              else "its worker process died")
        extra = []
        if self.node_reason:
            extra.append(f"the node was terminated {self.node_reason}")
        if self.exit_type:
            extra.append(f"exit type {self.exit_type}" + (f": {self.detail}" if self.detail else ""))
        elif self.detail:
            extra.append(self.detail)
        tail = f" ({'; '.join(extra)})" if extra else ""
        unknown = not self.node_reason and (self.why is None or "worker process" in self.why)
        return f"{who} died: {reason}{tail}" + ("; Ray does not say why" if unknown else "")

    def hint(self) -> str:
        where = "that worker's log (`ray logs worker-*` or the session's logs/ folder on its node)"
        if self.why and "owner" in self.why:
            return ("The process that created this actor (its owner) died first, and the actor with it: find why "
                    "the owner ended (its own log) before restarting.")
        if self.why and "node" in self.why:
            return ("The Ray node under this actor went away (preemption, the autoscaler, a crash): check the node's "
                    "events and the raylet log of that node, and whether actors are placed to survive it.")
        if self.causes:
            listed = "; ".join(f"({k}) {c.rstrip(' ,.;')}" for k, c in enumerate(self.causes, 1))
            return (f"Ray lists possible causes without knowing which: {listed}. Read {where} and the node's kernel "
                    f"log (dmesg, for the OOM killer) to tell which.")
        return (f"Ray does not know why this {self.kind} died: read {where} and the node's kernel log "
                f"(dmesg, for the OOM killer) before restarting.")


def _split_causes(text: str) -> list[str]:
    parts = [p.strip() for p in _CAUSE_ITEM.split(text) if p.strip()]
    return [re.sub(r",?\s+or$", "", re.sub(r"^(?:or|and)\s+", "", p.rstrip(" ,;."))) for p in parts]


def describe(lines: Sequence[str], upto: int) -> RayDeath:
    """The last Ray death the lines (normalized text, oldest first) report, up to index ``upto``."""
    rd = RayDeath()
    start = _block_start(list(lines[: upto + 1]))
    # the block: the header and the field/reason lines under it (a few lines past the end scanned)
    for t in lines[start: start + 14] if start is not None else ():
        _read_block_line(rd, t)
    return rd


def _block_start(texts: list[str]) -> int | None:
    """Where the last header (ActorDiedError, WorkerCrashedError ...) or raylet death line is, else the
    last line that says why an actor died."""
    head = next((k for k in range(len(texts) - 1, -1, -1) if _HEADER.search(texts[k]) or _RAYLET_DEATH.search(texts[k])),
                None)
    return head if head is not None else next((k for k, t in enumerate(texts) if _BECAUSE.search(t)), None)


def _read_block_line(rd: RayDeath, t: str) -> None:
    """What one line of the block says about the death; a line that says something of it is kept as
    evidence (a field line only fills its field, a line with only the detail is not kept)."""
    said = False
    if hm := _HEADER.search(t):
        said = True
        if rd.exc_type is None:
            rd.exc_type = hm.group("type")
            rd.kind = "task worker" if "WorkerCrashedError" in t else rd.kind
    if _RAYLET_DEATH.search(t):  # the raylet's "A worker died ... while executing a task", with its pid and ip
        said = True
        rd.kind = "task worker" if rd.exc_type is None else rd.kind
        _fill(rd, t, (_WORKER_PID, _WORKER_IP))
    fm = _FIELD.match(t)
    if fm:
        rd.fields.setdefault(fm.group("key"), fm.group("value"))
        return
    for pat, attr, value in _FIRST_SAID:
        m = pat.search(t)
        if m and getattr(rd, attr) in (None, []):
            setattr(rd, attr, value(m))
        said = said or m is not None
    said = _fill(rd, t, (_UNAVAILABLE,)) or said
    if rd.detail is None and (dm := _DETAIL.search(t)):
        rd.detail = dm.group("detail")
    if t.strip() and said:
        rd.lines.append(t.strip())


def _fill(rd: RayDeath, t: str, pats: tuple[re.Pattern[str], ...]) -> bool:
    """The fields the patterns (each with one named group, the field) find in the line, where not known yet."""
    found = [m for p in pats if (m := p.search(t))]
    for m in found:
        key, value = next(iter(m.groupdict().items()))
        rd.fields.setdefault(key, value)
    return bool(found)


# What a line may say of the death, read where it first says it (every line is tried against each):
# (pattern, the RayDeath field it fills, the field's value)
_FIRST_SAID: tuple[tuple[re.Pattern[str], str, Callable[[re.Match[str]], object]], ...] = (
    (_BECAUSE, "why", lambda m: "its " + m.group("why").removeprefix("its ").strip()),
    (_EXIT_TYPE, "exit_type", lambda m: m.group("type").replace(" ", "")),
    (_CAUSES, "causes", lambda m: _split_causes(m.group("causes"))),
    (_NODE_REASON, "node_reason", lambda m: m.group("how").strip().rstrip(".")),
)
