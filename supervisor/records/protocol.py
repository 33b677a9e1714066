"""The control protocol spoken on ``<run_dir>/rlsup.sock`` (and relayed unchanged over SSH).

Newline-delimited JSON, one object per line, UTF-8. A client opens with ``hello``; every request
carries an ``id`` that its reply echoes. After ``subscribe`` the server also pushes messages
without an ``id`` (they carry ``type``) on the same connection.

Requests (client -> server)::

    {"id": 1, "op": "hello", "version": 1, "client": "tui"}
    {"id": 2, "op": "snapshot", "lines": 200}
    {"id": 3, "op": "subscribe", "lines": 1000, "since": 41, "log_from": {"trainer": 5120}}
    {"id": 4, "op": "logs", "component": "trainer", "from_seq": 100, "limit": 5000}
    {"id": 5, "op": "events", "since": 0, "limit": 1000}
    {"id": 6, "op": "command", "command": "restart", "component": "trainer", "args": {}}
    {"id": 7, "op": "ping"}
    {"id": 8, "op": "log_read", "component": "trainer", "before_seq": 100, "limit": 2000}
    {"id": 9, "op": "log_search", "component": "trainer", "query": "nan", "before_seq": 100}

Replies: ``{"id": N, "ok": true, ...}`` or ``{"id": N, "ok": false, "error": "..."}``.

``hello`` answers ``{"version", "server": {"pid", "host", "name", "run_dir", "config", "rlsup"}}``;
a version other than :data:`VERSION` is refused with an error naming both versions.

``snapshot`` / ``subscribe`` answer ``{"state": <status JSON>, "logs": {NAME: {"seq", "lines"}},
"events": [...lifecycle events...], "seq": <last journal seq>}``. ``logs[NAME].seq`` is the sequence
number of the first line given. ``events`` are the lifecycle events after ``since`` (when given;
otherwise the most recent ones), read from the journal, so a client that reconnects loses none.
``log_from`` asks for each component's lines from that sequence number on, so a reconnecting client
continues where it stopped (lines that left the ring come as a ``gap``). ``"logs": false`` in a
subscribe leaves log lines out of the stream (a client that shows only state, like the fleet view).

Pushes after ``subscribe``::

    {"type": "event", "event": {...}}                    lifecycle: never dropped, in seq order;
                                                         gauges (kind progress/gpu): latest wins
    {"type": "logs", "component": C, "seq": S, "lines": [...]}   lines S, S+1, ... of C's stream
    {"type": "gap", "component": C, "from_seq": A, "to_seq": B}   lines A..B-1 were not sent
                                                         (client too slow); refill with ``logs``
                                                         (what left the ring is on disk only)

``log_read`` reads a component's log *from disk* (every file of its rotation, oldest first), by
sequence number, whatever the ring still holds: ``from_seq`` (null or absent: the first line on
disk) or ``before_seq``, at most ``limit`` (<= 5000) lines. It answers ``{"seq", "lines",
"disk_first_seq", "disk_end_seq", "ring_first_seq", "file"}``: lines before the stream's first one
(earlier runs' output in the same file) have sequence numbers below zero. ``log_search`` answers
the nearest line holding ``query`` (case-insensitive) before ``before_seq`` or after
``after_seq``: ``{"seq", "line"}``, both null when there is none. Both work on ended runs too.

Commands: ``start``, ``stop``, ``restart``, ``resume`` (``args.step`` optional), ``signal``
(``args.signal``), ``stop_all``, ``stack`` (``args.native`` optional: the Python stacks of the component's
processes, answered once taken: ``{"lines", "path", "processes", "component", "attempt"}``). Their reply
says what was done (``message``) or why not (``error``).
"""

from __future__ import annotations

import json
from itertools import accumulate
from typing import Any

VERSION = 1
MAX_REQUEST_BYTES = 1 << 20  # one request line; larger ones are refused and skipped
STREAM_LIMIT = 64 << 20  # client side: the largest message accepted (a big snapshot)
OPS = ("hello", "snapshot", "subscribe", "logs", "events", "command", "ping", "log_read", "log_search")
COMMANDS = ("start", "stop", "restart", "resume", "signal", "stop_all", "handover", "stack")


class ProtocolError(Exception):
    """A message that is not a JSON object, or one the peer cannot accept."""


class VersionMismatch(ProtocolError):
    pass


def encode(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":"), ensure_ascii=False, default=str).encode() + b"\n"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


MAX_DEPTH = 64


def decode(line: bytes | str) -> dict[str, Any]:
    """One message from one line; raises :class:`ProtocolError` with a reason a peer can read."""
    raw = line.encode() if isinstance(line, str) else line
    if _depth(raw) > MAX_DEPTH:
        raise ProtocolError(f"nested deeper than {MAX_DEPTH} levels")
    try:
        msg = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise ProtocolError(f"not JSON: {e}") from None
    if not isinstance(msg, dict):
        raise ProtocolError(f"expected a JSON object, got {type(msg).__name__}")
    return msg


def _depth(raw: bytes) -> int:
    """How deeply ``raw`` nests brackets (strings are not parsed: an upper bound is enough here)."""
    return max(accumulate((1 if b in b"[{" else -1 for b in raw.translate(None, delete=_NOT_BRACKETS)), initial=0))


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def error(req_id: Any, message: str, **extra: Any) -> dict[str, Any]:
    return {"id": req_id, "ok": False, "error": message, **extra}


def ok(req_id: Any, **fields: Any) -> dict[str, Any]:
    return {"id": req_id, "ok": True, **fields}
