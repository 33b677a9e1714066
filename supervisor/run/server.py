"""The control socket: snapshots, the event stream and commands for every client of a run.

Runs on the supervisor's loop and never waits on a client. Writes go to the transport's buffer
without awaiting a drain; how much a client may fall behind is decided per kind of data:

- lifecycle events are always queued (a client hopelessly far behind is disconnected, and
  catches up from the journal by ``seq`` when it reconnects);
- log lines are *pulled* from each component's ring on a 20 Hz flush, only while the client's
  buffer is below :data:`HIGH_WATER`; lines that left the ring meanwhile become a ``gap``;
- gauges (progress, gpu) keep only the latest value per component until the next flush.

Memory per client is bounded: a client's replies wait until it has read the previous ones, and a
client whose backlog passes :meth:`ControlServer.backlog_limit` (:data:`MAX_CLIENT_BACKLOG`, or its
share of :data:`TOTAL_BACKLOG` when many clients are connected) is disconnected with a reason (it
resyncs from the journal by ``seq`` when it reconnects); log lines stop at half that limit. The
server sees the run only through :class:`RunView` (read-only state, rings, journal position) and
its ``command`` entry point.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import inspect
import itertools
import os
import socket
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from ..records import protocol
from ..records.events import Record, is_lifecycle
from ..rundir.journal import read_records
from ..rundir.layout import RunPaths, sock_address
from ..rundir.logpages import MAX_PAGE, LogPages
from ..rundir.logs import LogRing, Position
from .daemonlog import say

HIGH_WATER = 1 << 20  # bytes queued to a client above which no more log lines are sent to it
MAX_CLIENT_BACKLOG = 32 << 20  # bytes queued to one client at which it is given up on
# ... unless many clients share the run: all of them together may hold TOTAL_BACKLOG, each at least
# MIN_CLIENT_BACKLOG (a thousand subscribers that never read took the daemon to 1.6 GB otherwise).
TOTAL_BACKLOG = 128 << 20
MIN_CLIENT_BACKLOG = 256 << 10
MAX_LINES_PER_PUSH = 5000
MAX_SNAPSHOT_LINES = 100_000
RECENT_EVENTS = 20_000
TRIM_AFTER_S = 1.0  # after a client leaves, the heap is given back to the OS this much later


class RunView(Protocol):
    """What the control server may see of a run: read-only, plus one entry point for commands."""

    paths: RunPaths
    subscribers: list[Callable[[dict[str, Any]], None]]
    line_listeners: list[Callable[[Any], None]]

    def snapshot_state(self) -> dict[str, Any]: ...

    def rings(self) -> Mapping[str, LogRing]: ...

    @property
    def journal_seq(self) -> int: ...

    def hello(self) -> dict[str, Any]: ...

    def redact_lines(self, lines: list[str]) -> list[str]:
        """Log lines as a client may see them (secrets masked): rings keep raw lines, masked only on
        the way out, so output that no client reads costs no masking."""

    def command(self, cmd: str, name: str | None = None, by: str = "user", client: str | None = None,
                **args: Any) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        """The reply, or an awaitable one (``stack``: taken off the loop)."""

    def watchers_changed(self) -> None:
        """A client connected or left (the run samples GPUs more often while someone looks)."""

    def log_pages(self, name: str) -> tuple[LogPages, Position] | None:
        """The component's log on disk and the position up to which the ring has read it (the
        anchor that ties line numbers on disk to sequence numbers); None for no such component."""


def _ints(msg: dict[str, Any], *keys: str) -> list[int | None]:
    """The request's ``keys`` as integers (None where absent or null)."""
    return [None if msg.get(k) is None else int(msg[k]) for k in keys]


class Conn:
    """One connected client."""

    def __init__(self, server: ControlServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.server = server
        self.reader = reader
        self.writer = writer
        self.transport = writer.transport
        self.hello = False
        self.name = "?"
        self.subscribed = False
        self.want_logs = True  # subscribe {"logs": false}: lifecycle and gauges only (the fleet view)
        self.log_next: dict[str, int] = {}
        self.gauges: dict[tuple[str, str | None], dict[str, Any]] = {}
        self.closed = False

    @property
    def buffered(self) -> int:
        return self.transport.get_write_buffer_size()

    def send(self, msg: dict[str, Any]) -> None:
        if self.closed:
            return
        self.transport.write(protocol.encode(msg))
        if self.buffered > self.server.backlog_limit():
            self.give_up(f"{self.buffered >> 10} KiB behind")

    def give_up(self, why: str) -> None:
        say(f"rlsup: client {self.name} is {why}; disconnecting it (it resyncs from the journal when it "
            "reconnects)")
        self.transport.abort()  # drop the backlog now rather than flush it
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.transport.close()

    async def serve(self) -> None:
        buf = b""
        discarding = False
        try:
            while not self.closed:
                chunk = await self.reader.read(1 << 16)
                if not chunk:
                    break
                buf, discarding = await self._lines(buf + chunk, discarding)
        except (ConnectionError, OSError):
            pass
        finally:
            self.server.drop(self)

    async def _lines(self, buf: bytes, discarding: bool) -> tuple[bytes, bool]:
        """Handle every whole request in ``buf``; the incomplete rest, and whether the rest of an
        oversized message is being skipped (``discarding``)."""
        while (nl := buf.find(b"\n")) >= 0:
            line, buf = buf[:nl], buf[nl + 1:]
            if discarding:
                discarding = False  # the tail of an oversized message
                continue
            if line.strip():
                await self.handle(line)
                if self.buffered > HIGH_WATER and not self.closed:
                    # Back-pressure: no more replies until this client reads the ones it has.
                    try:
                        await asyncio.wait_for(self.writer.drain(), 60.0)
                    except (asyncio.TimeoutError, TimeoutError):
                        self.give_up(f"not reading its replies ({self.buffered >> 10} KiB waiting)")
        if len(buf) > protocol.MAX_REQUEST_BYTES:
            if not discarding:
                self.send(protocol.error(None, f"message larger than {protocol.MAX_REQUEST_BYTES} "
                                               "bytes; ignored"))
            discarding, buf = True, b""
        return buf, discarding

    async def handle(self, line: bytes) -> None:
        try:
            msg = protocol.decode(line)
        except protocol.ProtocolError as e:
            self.send(protocol.error(None, str(e)))
            return
        rid = msg.get("id")
        op = msg.get("op")
        try:
            reply = await self._reply(op, rid, msg)
            if reply is not None:  # None: answered later
                self.send(reply)
        except (KeyError, TypeError, ValueError) as e:
            self.send(protocol.error(rid, f"bad {op} request: {e!r}"))
        except Exception as e:  # noqa: BLE001 - a client's request must never end the run it asks about
            import traceback

            say(f"rlsup: the {op} request of a client failed (the run goes on):\n{traceback.format_exc().rstrip()}")
            self.send(protocol.error(rid, f"{op} failed in the supervisor: {e!r} (see supervisor.log)"))

    async def _reply(self, op: Any, rid: Any, msg: dict[str, Any]) -> dict[str, Any] | None:
        """The reply to one request: hello first, then any op of :data:`_OPS`."""
        if op == "hello":
            return self.server.op_hello(self, rid, msg)
        if not self.hello:
            return protocol.error(rid, "say hello first: {\"op\": \"hello\", \"version\": "
                                       f"{protocol.VERSION}}}")
        handler = _OPS.get(op) if isinstance(op, str) else None
        if handler is None:
            return protocol.error(rid, f"unknown op {op!r}; ops: {', '.join(protocol.OPS)}")
        reply = handler(self.server, self, rid, msg)
        return await reply if inspect.isawaitable(reply) else reply


class ControlServer:
    def __init__(self, view: RunView, path: Path):
        self.view = view
        self.path = path
        self.conns: set[Conn] = set()
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_EVENTS)
        self._dirty_logs: set[str] = set()
        self._flush_handle: asyncio.TimerHandle | None = None
        self._trim_handle: asyncio.TimerHandle | None = None
        self._dropped = False  # a client left while a trim was already due
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Listen on the run's socket (mode 0600); the caller holds the run lock, so a leftover
        socket file belongs to a dead supervisor and is replaced."""
        self.path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # no window in which the socket is reachable by others
        try:
            with sock_address(self.path) as addr:
                sock.bind(addr)
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        self.view.subscribers.append(self._on_event)
        self.view.line_listeners.append(self._on_lines)
        await self._preload()
        self._server = await asyncio.start_unix_server(self._accept, sock=sock)

    async def _preload(self) -> None:
        """The journal's newest lifecycle events, so that a client's timeline holds the whole run (a
        resumed run, one taken over, an ended one), not only what this server saw happen."""
        path = self.view.paths.events

        def tail() -> list[dict[str, Any]]:
            out: deque[Record] = deque(maxlen=RECENT_EVENTS)
            with contextlib.suppress(OSError):
                out.extend(read_records(path, kinds=is_lifecycle))
            return [r.to_dict() for r in out]  # only the ones kept: the wire's dicts

        old = await asyncio.to_thread(tail)
        last = old[-1].get("seq", 0) if old else 0
        live = [e for e in self.recent if e.get("seq", 0) > last]  # emitted while the journal was read
        self.recent = deque([*old, *live], maxlen=RECENT_EVENTS)

    async def close(self) -> None:
        if self._trim_handle is not None:
            self._trim_handle.cancel()
        for c in list(self.conns):
            c.close()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
        with contextlib.suppress(OSError):  # gone already, or a run dir that turned read-only
            self.path.unlink()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Conn(self, reader, writer)
        self.conns.add(conn)
        self.view.watchers_changed()
        await conn.serve()

    def backlog_limit(self) -> int:
        """How far behind (bytes queued) one client may fall before it is given up on."""
        return max(MIN_CLIENT_BACKLOG, min(MAX_CLIENT_BACKLOG, TOTAL_BACKLOG // max(1, len(self.conns))))

    def drop(self, conn: Conn) -> None:
        conn.close()
        self.conns.discard(conn)
        self.view.watchers_changed()
        # The heap is trimmed a while after clients leave, not at once: a closed transport frees its
        # backlog only once the write to the gone peer has failed, turns of the loop later.
        if self._trim_handle is None:
            self._trim_handle = asyncio.get_running_loop().call_later(TRIM_AFTER_S, self._trim)
        else:
            self._dropped = True

    def _trim(self) -> None:
        """Give the memory of departed clients back to the OS (glibc keeps it otherwise: a thousand of them must
        not leave the daemon at its peak size); again a while later while clients keep leaving."""
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None).malloc_trim(0)
        self._trim_handle = None
        if self._dropped:
            self._dropped = False
            self._trim_handle = asyncio.get_running_loop().call_later(TRIM_AFTER_S, self._trim)

    # ------------------------------------------------------------------ from the supervisor

    def _on_event(self, e: dict[str, Any]) -> None:
        kind = e.get("kind", "")
        if is_lifecycle(kind):
            self.recent.append(e)
            msg = {"type": "event", "event": e}
            for c in list(self.conns):
                if c.subscribed:
                    c.send(msg)
        else:
            key = (kind, e.get("component"))
            for c in self.conns:
                if c.subscribed:
                    c.gauges[key] = e
            self._schedule()

    def _on_lines(self, comp: Any) -> None:
        self._dirty_logs.add(comp.name)
        self._schedule()

    def _schedule(self) -> None:
        if self._flush_handle is None and self.conns:
            self._flush_handle = asyncio.get_running_loop().call_later(0.05, self._flush)  # 20 Hz

    def _flush(self) -> None:
        self._flush_handle = None
        dirty, self._dirty_logs = self._dirty_logs, set()
        behind = False
        # Log lines only to a client whose backlog leaves room for a push within its limit.
        high_water = min(HIGH_WATER, self.backlog_limit() // 2)
        for c in list(self.conns):
            if not c.subscribed or c.closed:
                continue
            if c.gauges:
                gauges, c.gauges = c.gauges, {}
                for e in gauges.values():
                    c.send({"type": "event", "event": e})
            if not c.want_logs:
                continue
            for name in (dirty | {n for n in c.log_next if self._has_more(c, n)}):
                if c.buffered >= high_water or c.closed:
                    behind = True
                    break
                self._send_lines(c, name)
            if any(self._has_more(c, n) for n in c.log_next):
                behind = True
        if behind:
            self._schedule()  # come back for clients that were too full this time

    def _has_more(self, c: Conn, name: str) -> bool:
        ring = self.view.rings().get(name)
        return ring is not None and c.log_next.get(name, 0) < ring.next_seq

    def _send_lines(self, c: Conn, name: str) -> None:
        ring = self.view.rings().get(name)
        if ring is None:
            return
        want = c.log_next.get(name, ring.next_seq)
        if want < ring.first_seq:
            c.send({"type": "gap", "component": name, "from_seq": want, "to_seq": ring.first_seq})
            want = ring.first_seq
        start, lines = ring.since(want, MAX_LINES_PER_PUSH)
        room = self.backlog_limit() // 2
        if len(lines) > 100 and sum(map(len, lines)) > room:  # one push must not overshoot the limit
            lines = lines[:max(1, bisect.bisect_right(list(itertools.accumulate(len(x) + 4 for x in lines)), room))]
        if lines:
            c.send({"type": "logs", "component": name, "seq": start, "lines": self.view.redact_lines(lines)})
        c.log_next[name] = start + len(lines)

    # ------------------------------------------------------------------ requests

    def op_hello(self, conn: Conn, rid: Any, msg: dict[str, Any]) -> dict[str, Any]:
        v = msg.get("version")
        if v != protocol.VERSION:
            return protocol.error(rid, f"protocol version mismatch: client speaks {v}, this supervisor speaks "
                                       f"{protocol.VERSION}; use the same rlsup version on both ends")
        conn.hello = True
        conn.name = str(msg.get("client", "?"))[:64]
        return protocol.ok(rid, version=protocol.VERSION, server=self.view.hello())

    async def op_snapshot(self, rid: Any, msg: dict[str, Any], sub: Conn | None) -> dict[str, Any]:
        n = max(0, min(int(msg.get("lines") or 0), MAX_SNAPSHOT_LINES))
        since = msg.get("since")
        log_from = msg.get("log_from") or {}
        logs: dict[str, dict[str, Any]] = {}
        for name, ring in self.view.rings().items():
            if name in log_from:
                start, lines = ring.since(max(int(log_from[name]), ring.first_seq))
            else:
                start, lines = ring.tail(n) if n else (ring.next_seq, [])
            logs[name] = {"seq": start, "lines": self.view.redact_lines(lines)}
            if sub is not None:
                sub.log_next[name] = start + len(lines)
        events = await self._events_since(int(since) if since is not None else None, 1000 if since is None else None)
        if sub is not None:
            sub.subscribed = True
            sub.want_logs = msg.get("logs", True) is not False
        return protocol.ok(rid, state=self.view.snapshot_state(), logs=logs, events=events,
                           seq=self.view.journal_seq)

    async def _events_since(self, since: int | None, limit: int | None) -> list[dict[str, Any]]:
        if since is None:
            out = list(self.recent)
        elif self.recent and self.recent[0]["seq"] <= since + 1:
            out = [e for e in self.recent if e["seq"] > since]
        else:  # older than what we keep in memory: the journal has it
            path = self.view.paths.events
            out = await asyncio.to_thread(lambda: [r.to_dict() for r in read_records(path, since)])
        return out[-limit:] if limit else out

    def op_logs(self, rid: Any, msg: dict[str, Any]) -> dict[str, Any]:
        name = msg["component"]
        ring = self.view.rings().get(name)
        if ring is None:
            return protocol.error(rid, f"no component {name!r}")
        limit = max(1, min(int(msg.get("limit") or MAX_LINES_PER_PUSH), MAX_SNAPSHOT_LINES))
        start, lines = ring.since(int(msg.get("from_seq", 0)), limit)
        return protocol.ok(rid, component=name, seq=start, lines=self.view.redact_lines(lines), first_seq=ring.first_seq,
                           next_seq=ring.next_seq, file=str(self.view.paths.log(name)))

    async def on_disk(self, rid: Any, msg: dict[str, Any],
                      op: Callable[..., Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """``op(rid, msg, name, pages, anchor)`` on the component's log on disk, or why it cannot be read."""
        name = str(msg["component"])
        src = self.view.log_pages(name)
        if src is None:
            return protocol.error(rid, f"no component {name!r}" if name not in self.view.rings()
                                  else f"the log of {name} cannot be read from disk here")
        return await op(rid, msg, name, *src)

    async def op_log_read(self, rid: Any, msg: dict[str, Any], name: str, pages: LogPages,
                          anchor: Position) -> dict[str, Any]:
        """Lines of a component's log from disk by sequence number, whatever the ring still holds:
        ``from_seq`` (absent or null: the first line on disk) or ``before_seq``, ``limit`` lines."""
        limit = max(1, min(int(msg.get("limit") or MAX_PAGE), MAX_PAGE))
        start_seq, before = _ints(msg, "from_seq", "before_seq")
        start, lines, first, end = await asyncio.to_thread(pages.read, anchor, start_seq, limit, before_seq=before)
        ring = self.view.rings().get(name)
        return protocol.ok(rid, component=name, seq=start, lines=self.view.redact_lines(lines), disk_first_seq=first,
                           disk_end_seq=end, ring_first_seq=ring.first_seq if ring is not None else end,
                           file=str(pages.path))

    async def op_log_search(self, rid: Any, msg: dict[str, Any], name: str, pages: LogPages,
                            anchor: Position) -> dict[str, Any]:
        """The nearest line of a component's log on disk holding ``query`` (case-insensitive),
        before ``before_seq`` or after ``after_seq``: ``{"seq", "line"}`` (both null: none)."""
        query = str(msg.get("query") or "")
        before, after = _ints(msg, "before_seq", "after_seq")
        found = await asyncio.to_thread(pages.search, anchor, query, before_seq=before, after_seq=after,
                                        redact=self.view.redact_lines)
        first, end = await asyncio.to_thread(pages.bounds, anchor)
        return protocol.ok(rid, component=name, seq=found[0] if found else None, line=found[1] if found else None,
                           disk_first_seq=first, disk_end_seq=end)

    async def op_events(self, rid: Any, msg: dict[str, Any]) -> dict[str, Any]:
        limit = max(1, min(int(msg.get("limit") or 1000), RECENT_EVENTS))
        return protocol.ok(rid, events=await self._events_since(int(msg.get("since") or 0), limit))

    def op_command(self, conn: Conn, rid: Any, msg: dict[str, Any]) -> dict[str, Any] | None:
        cmd = msg.get("command")
        if cmd not in protocol.COMMANDS:
            return protocol.error(rid, f"unknown command {cmd!r}; commands: {', '.join(protocol.COMMANDS)}")
        args = msg.get("args") or {}
        if not isinstance(args, dict):
            return protocol.error(rid, "args must be an object")
        args = {k: args[k] for k in ("step", "signal", "reason", "from_component", "native") if args.get(k) is not None}
        reply = self.view.command(cmd, msg.get("component"), by="user", client=f"rlsup {conn.name}", **args)
        if inspect.isawaitable(reply):
            # Answered when done (``stack``: seconds), while this client's other requests go on.
            task = asyncio.ensure_future(self._answer_later(conn, rid, reply))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return None
        return {"id": rid, **reply}

    async def _answer_later(self, conn: Conn, rid: Any, reply: Awaitable[dict[str, Any]]) -> None:
        try:
            conn.send({"id": rid, **(await reply)})
        except Exception as e:  # noqa: BLE001 - a client's request must never end the run it asks about
            conn.send(protocol.error(rid, f"command failed in the supervisor: {e!r}"))


#: The ops a client may send once it has said hello: (server, connection, request id, request) -> reply.
_OPS: dict[str, Callable[[ControlServer, Conn, Any, dict[str, Any]], Any]] = {
    "ping": lambda _s, _c, rid, _m: protocol.ok(rid),
    "snapshot": lambda s, _c, rid, m: s.op_snapshot(rid, m, None),
    "subscribe": lambda s, c, rid, m: s.op_snapshot(rid, m, c),
    "logs": lambda s, _c, rid, m: s.op_logs(rid, m),
    "events": lambda s, _c, rid, m: s.op_events(rid, m),
    "log_read": lambda s, _c, rid, m: s.on_disk(rid, m, s.op_log_read),
    "log_search": lambda s, _c, rid, m: s.on_disk(rid, m, s.op_log_search),
    "command": ControlServer.op_command,
}
