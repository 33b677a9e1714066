"""Clients of the control socket: one connection over any pair of asyncio streams (:class:`Client`) and a
reconnecting subscription (:class:`Session`) that the TUI, ``rlsup attach`` and the fleet use. No textual."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from ..records import protocol
from ..records.events import Record, RunEnded, RunStarted, is_lifecycle, parse
from ..records.protocol import ProtocolError, VersionMismatch


class NotRunning(Exception):
    """No supervisor answers on the socket (none started, or it has ended)."""


class RunOver(NotRunning):
    """No supervisor answers, none holds the run dir, and the run's journal says the run ended."""

    def __init__(self, message: str, journal: Path):
        super().__init__(message)
        self.journal = journal

    def events_since(self, seq: int) -> list[dict[str, Any]]:
        """The journal's lifecycle events after ``seq``: what the supervisor said after the link dropped."""
        return [e for e in _journal(self.journal)
                if isinstance(e.get("seq"), int) and e["seq"] > seq and is_lifecycle(str(e.get("kind")))]


class RequestFailed(Exception):
    def __init__(self, reply: dict[str, Any]):
        self.reply = reply
        super().__init__(reply.get("error") or "request failed")


Push = Callable[[dict[str, Any]], None]


class Client:
    """One protocol connection. Replies are matched to requests by id; pushes go to ``on_push``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, name: str = "client"):
        self.reader = reader
        self.writer = writer
        self.name = name
        self.server: dict[str, Any] = {}
        self.on_push: Push | None = None
        self._held: list[dict[str, Any]] | None = None  # pushes that came while a subscribe's reply was in flight
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader_task: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()
        self.close_reason = ""

    @classmethod
    async def open_unix(cls, path: str | os.PathLike[str], *, name: str = "client", timeout: float = 5.0) -> Client:
        """Connect to a run's socket and say hello; raises :class:`NotRunning` if nobody answers."""
        from ..rundir.layout import sock_address

        try:
            with sock_address(Path(path)) as addr:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_unix_connection(addr, limit=protocol.STREAM_LIMIT), timeout)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise NotRunning(f"no supervisor is listening on {path} ({e.strerror})") from None
        except asyncio.TimeoutError:
            raise NotRunning(f"no answer from {path} within {timeout:g}s") from None
        client = cls(reader, writer, name=name)
        await client.start(timeout)
        return client

    async def start(self, timeout: float = 10.0) -> dict[str, Any]:
        self._reader_task = asyncio.ensure_future(self._read_loop())
        try:
            reply = await self.request("hello", version=protocol.VERSION, client=self.name, timeout=timeout,
                                       check=False)
        except BaseException as e:  # not left reading a link nobody uses (a reconnecting session dials again)
            await self.close()
            if isinstance(e, asyncio.TimeoutError):  # accepted, not answered: a stopped or overloaded supervisor
                raise asyncio.TimeoutError(f"no answer from the supervisor within {timeout:g}s") from None
            raise
        if not reply.get("ok"):
            await self.close()
            if "version" in (reply.get("error") or ""):
                raise VersionMismatch(reply["error"])
            raise ProtocolError(reply.get("error") or "hello refused")
        self.server = reply.get("server") or {}
        return self.server

    async def _read_loop(self) -> None:
        try:
            while line := await self.reader.readline():
                try:
                    msg = protocol.decode(line)
                except ProtocolError:
                    continue
                self._dispatch(msg)
            self.close_reason = "connection closed by the supervisor"
        except (ConnectionError, OSError, asyncio.IncompleteReadError, ValueError) as e:
            # ValueError: a line over STREAM_LIMIT (asyncio's LimitOverrunError surfaces as it)
            self.close_reason = f"connection lost ({e})"
        finally:
            self.closed.set()
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(self.close_reason or "connection closed"))
            self._pending.clear()

    def _dispatch(self, msg: dict[str, Any]) -> None:
        """A reply to its request; a push to ``on_push``, or held while a subscribe's reply is taken in."""
        rid = msg.get("id")
        if rid is not None and "type" not in msg:
            fut = self._pending.pop(rid, None)
            if fut is not None and not fut.done():
                fut.set_result(msg)
        elif self._held is not None:
            self._held.append(msg)
        elif self.on_push is not None:
            self.on_push(msg)

    async def request(self, op: str, *, timeout: float | None = 30.0, check: bool = True,
                      **fields: Any) -> dict[str, Any]:
        if self.closed.is_set():
            raise ConnectionError(self.close_reason or "connection closed")
        self._next_id += 1
        rid = self._next_id
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        self.writer.write(protocol.encode({"id": rid, "op": op, **fields}))
        await self.writer.drain()
        reply = await asyncio.wait_for(fut, timeout) if timeout else await fut
        if check and not reply.get("ok"):
            raise RequestFailed(reply)
        return reply

    async def command(self, command: str, component: str | None = None, **args: Any) -> dict[str, Any]:
        """Send a command; the reply has ``ok`` and ``message`` or ``error`` (never raises on refusal)."""
        return await self.request("command", command=command, component=component, args=args, check=False)

    async def snapshot(self, lines: int = 0) -> dict[str, Any]:
        return await self.request("snapshot", lines=lines)

    async def subscribe(self, on_push: Push, *, lines: int = 1000, since: int | None = None,
                        log_from: dict[str, int] | None = None, logs: bool = True,
                        on_snapshot: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Snapshot, then pushes to ``on_push``; ``logs=False`` leaves log lines out of the stream.

        The supervisor pushes right after its reply, often in the same read: ``on_snapshot`` takes the
        snapshot in before any of those pushes reaches ``on_push`` (held until then), so that a client
        never sees a pushed line or event ahead of the snapshot's older ones."""
        self.on_push, self._held = None, []
        try:
            snap = await self.request("subscribe", lines=lines, since=since, log_from=log_from or {}, logs=logs,
                                      timeout=60.0)
            if on_snapshot is not None:
                on_snapshot(snap)
            for msg in self._held or ():
                on_push(msg)
        finally:
            self.on_push, self._held = on_push, None
        return snap

    async def log_read(self, component: str, *, from_seq: int | None = None, before_seq: int | None = None,
                       limit: int = 2000) -> dict[str, Any]:
        """Lines of a component's log from disk (see ``log_read`` in :mod:`~rlsup.supervisor.records.protocol`)."""
        fields: dict[str, Any] = {"component": component, "limit": limit, "from_seq": from_seq}
        if before_seq is not None:
            fields["before_seq"] = before_seq
        return await self.request("log_read", **fields)

    async def log_search(self, component: str, query: str, *, before_seq: int | None = None,
                         after_seq: int | None = None) -> dict[str, Any]:
        return await self.request("log_search", component=component, query=query, before_seq=before_seq,
                                  after_seq=after_seq, timeout=120.0)

    async def events(self, since: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        return (await self.request("events", since=since, limit=limit))["events"]

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(BaseException):
                await self._reader_task
        self.closed.set()


# ---------------------------------------------------------------------- reconnecting subscription


class SessionListener(Protocol):
    """What a view gets from a :class:`Session`: callbacks on the session's loop, in order, that must not block."""

    def on_connection(self, status: str, detail: str) -> None:
        """``connecting`` | ``attached`` | ``reconnecting`` | ``ended`` (the run is over) | ``closed``."""

    def on_snapshot(self, snapshot: dict[str, Any], resumed: bool) -> None:
        """Full state after (re)connecting; ``resumed`` when it continues an earlier connection."""

    def on_event(self, event: Record) -> None:
        """Lifecycle events (in seq order, none missed across reconnects) and gauges, each parsed once."""

    def on_logs(self, component: str, seq: int, lines: list[str]) -> None: ...

    def on_gap(self, component: str, from_seq: int, to_seq: int) -> None: ...


Connector = Callable[[], Awaitable[Client]]
# After the run ended, given the last lifecycle seq the session saw: why the run goes on all the same (a
# requeued Slurm job: its next supervisor continues it), or None. See :class:`Session`.
GoesOn = Callable[[int | None], Awaitable[str | None]]


class Session:
    """Keeps a subscription alive: reconnects with backoff and resyncs from the last lifecycle ``seq`` and each
    component's next log line, so that no lifecycle event is missed and the log streams continue (or gap)."""

    def __init__(self, connect: Connector, listener: SessionListener, *, lines: int = 1000,
                 backoff: tuple[float, float] = (0.5, 10.0), logs: bool = True, goes_on: GoesOn | None = None,
                 reopen_s: float | None = None):
        self.connect = connect
        self.goes_on = goes_on  # the session waits for the next supervisor instead of ending where it says
        # After the end, dial again every reopen_s seconds: a run resumed later (`rlsup up CONFIG --resume`
        # from another shell) is attached to again; None: the session ends with the run (followers, scripts).
        self.reopen_s = reopen_s
        self.logs = logs
        self.listener = listener
        self.lines = lines
        self.backoff = backoff
        self.client: Client | None = None
        self.seq: int | None = None
        self.log_next: dict[str, int] = {}
        self.server: dict[str, Any] = {}
        self.run_ended = False
        self._stop = asyncio.Event()
        self.connected = asyncio.Event()

    async def run(self) -> None:
        """Until :meth:`close`: connect, subscribe, deliver; reconnect when the link drops."""
        delay = self.backoff[0]
        first = True
        waiting = ""  # what the session waits for, said with every retry (a requeued job)
        client: Client | None = None  # dialled already: a supervisor that came after the end
        while not self._stop.is_set():
            if client is None:
                self.listener.on_connection("connecting" if first else "reconnecting", waiting)
                try:
                    if (client := await self._dial()) is None:
                        return
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # refused, unreachable, auth: say why and retry
                    self.listener.on_connection("reconnecting", f"{waiting}{'; ' if waiting else ''}{e}; "
                                                                f"retrying in {delay:.1f}s")
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), delay)
                    delay = min(delay * 2, self.backoff[1]) * random.uniform(0.9, 1.1)
                    continue
            first, waiting = False, ""
            delay = await self._attend(client, delay)
            why, client = client.close_reason, None
            if self._stop.is_set():
                break
            if self.run_ended:
                more = await self.goes_on(self.seq) if self.goes_on is not None else None
                if more is None:
                    if (client := await self._after_end(why or "the run has ended")) is None:
                        return
                    continue
                self.run_ended, waiting = False, more
                continue
            self.listener.on_connection("reconnecting", why or "connection lost")
        self.listener.on_connection("closed", "")

    async def _attend(self, client: Client, delay: float) -> float:
        """Serve ``client`` until the link drops or the session is closed; the wait before the next dial."""
        try:
            await self._serve(client)
            return self.backoff[0]  # it was attached: the next retry starts at the shortest wait
        except OSError as e:  # (ConnectionError, TimeoutError) gone before the subscribe's answer: a kill -9
            client.close_reason = client.close_reason or f"connection lost ({e})"
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
            return min(delay * 2, self.backoff[1])
        finally:
            self.connected.clear()
            self.client = None
            await client.close()

    async def _dial(self) -> Client | None:
        """A connection; None where the session is over: refused for good (another protocol version), or the
        run ended while the link was down (and, with ``reopen_s``, the session was closed before it resumed)."""
        try:
            return await self.connect()
        except VersionMismatch as e:
            self.listener.on_connection("closed", str(e))
            return None
        except RunOver as e:
            for event in e.events_since(self.seq or 0):
                self._event(event)
            return await self._after_end(str(e))

    async def _after_end(self, why: str) -> Client | None:
        """Say the run ended; with ``reopen_s``, look at once and then every ``reopen_s`` for the supervisor of
        a live run (the run was resumed) and return its connection; None once the session is closed."""
        said = False
        while self.reopen_s is not None and not self._stop.is_set():
            if (client := await self._live()) is not None:
                self.run_ended = False
                self.listener.on_connection("reconnecting", f"the run goes on: a new supervisor (pid "
                                                            f"{client.server.get('pid', '?')}) holds it")
                return client
            if not said:
                self.listener.on_connection("ended", why)
                said = True
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.reopen_s)
        if not said:
            self.listener.on_connection("ended", why)
        return None

    async def _live(self) -> Client | None:
        """A connection to the supervisor of a live run, or None: the run is still over (or read back from its
        run dir, as ``rlsup bridge`` serves an ended run), or the new supervisor is not listening yet."""
        try:
            client = await self.connect()
        except asyncio.CancelledError:
            raise
        except Exception:
            return None
        if client.server.get("ended"):
            await client.close()
            return None
        return client

    async def _serve(self, client: Client) -> None:
        was, now = self.server.get("journal"), client.server.get("journal")
        if was and now and was != now:  # a run started anew in the run dir (`up --fresh`): from its beginning
            self.seq, self.log_next = None, {}
        resumed = self.seq is not None
        await client.subscribe(self._push, lines=self.lines, since=self.seq, log_from=dict(self.log_next),
                               logs=self.logs, on_snapshot=lambda snap: self._attached(client, snap, resumed))
        closed = asyncio.ensure_future(client.closed.wait())
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({closed, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            stop.cancel()

    def _attached(self, client: Client, snap: dict[str, Any], resumed: bool) -> None:
        """The subscribe's snapshot taken in, before any push that followed it."""
        self.client = client
        self.server = client.server
        for e in snap.get("events", []):
            self._event(e)
        for name, block in (snap.get("logs") or {}).items():
            want = self.log_next.get(name)
            if want is not None and block["seq"] > want:
                self.listener.on_gap(name, want, block["seq"])
            self.log_next[name] = block["seq"] + len(block["lines"])
        self.seq = max(self.seq or 0, snap.get("seq", 0))
        self.listener.on_snapshot(snap, resumed)
        self.listener.on_connection("attached", client.server.get("host", ""))
        self.connected.set()

    def _event(self, e: dict[str, Any]) -> None:
        rec = parse(e)  # the socket's edge: typed once, here
        if is_lifecycle(rec.kind):
            if self.seq is not None and rec.seq <= self.seq:
                return  # already delivered before the reconnect
            self.seq = rec.seq
        if isinstance(rec.event, (RunEnded, RunStarted)):
            # The latest of the two says: a run resumed, taken over or requeued after an end goes on
            # (the first snapshot replays an earlier run's end from the journal).
            self.run_ended = isinstance(rec.event, RunEnded)
        self.listener.on_event(rec)

    def _push(self, msg: dict[str, Any]) -> None:
        t = msg.get("type")
        if t == "event":
            self._event(msg["event"])
        elif t == "logs":
            name, seq, lines = msg["component"], msg["seq"], msg["lines"]
            self.log_next[name] = seq + len(lines)
            self.listener.on_logs(name, seq, lines)
        elif t == "gap":
            self.log_next[msg["component"]] = msg["to_seq"]
            self.listener.on_gap(msg["component"], msg["from_seq"], msg["to_seq"])

    async def _ask(self, request: Callable[[Client], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """``request`` on the live connection; ``ok: false`` with a reason where it was not done."""
        if self.client is None:
            return {"ok": False, "error": "not connected to the supervisor (reconnecting)"}
        try:
            return await request(self.client)
        except RequestFailed as e:
            return e.reply
        except (ConnectionError, asyncio.TimeoutError) as e:
            return {"ok": False, "error": f"connection lost before the answer ({e})"}

    async def command(self, command: str, component: str | None = None, **args: Any) -> dict[str, Any]:
        """Send a command on the live connection; a reply with ``ok: false`` says why it was not done."""
        return await self._ask(lambda c: c.command(command, component, **args))

    async def disk(self, op: str, component: str, **fields: Any) -> dict[str, Any]:
        """``log_read`` or ``log_search`` on the live connection."""
        return await self._ask(lambda c: getattr(c, op)(component, **fields))

    def close(self) -> None:
        self._stop.set()


def unix_connector(sock: str | Path, name: str = "client") -> Connector:
    return partial(Client.open_unix, sock, name=name)


def local_connector(run_dir: str | Path, name: str = "client") -> Connector:
    """The run dir's socket; :class:`RunOver` where no supervisor holds the run dir and the journal says the
    run ended (else a session keeps trying: a take-over may come)."""
    from ..rundir.layout import RunPaths, is_locked

    paths = RunPaths(Path(run_dir))
    ended_at: list[tuple[int, int]] = []  # the journal's size and mtime when it last said the run ended

    async def connect() -> Client:
        try:
            return await Client.open_unix(paths.sock, name=name)
        except NotRunning as e:
            try:
                st = os.stat(paths.events)
                seen = (st.st_size, st.st_mtime_ns)
            except OSError:
                seen = (-1, -1)
            # Dialled every few seconds after the end (Session.reopen_s): the journal unchanged since it said
            # so, the run is still over, and neither the lock (a new supervisor must find it free) nor the
            # journal is read again.
            if seen not in ended_at and (is_locked(paths) or not _journal_ended(paths.events)):
                raise
            ended_at[:] = [seen]
            raise RunOver(f"{e}; the run has ended", paths.events) from None

    return connect


def _journal(path: Path, having: bytes = b"") -> list[dict[str, Any]]:
    """The journal's events (of the lines holding ``having``); torn or foreign lines skipped (not through
    rundir.journal: the TUI reaches a run only through this module)."""
    import json

    out = []
    with contextlib.suppress(OSError), open(path, "rb") as f:
        for raw in f:
            if having in raw:
                with contextlib.suppress(ValueError):
                    e = json.loads(raw)
                    if isinstance(e, dict):
                        out.append(e)
    return out


def _journal_ended(path: Path) -> bool:
    """The journal's last run event is ``run_ended``."""
    kinds = [e.get("kind") for e in _journal(path, b'"run_') if e.get("kind") in ("run_started", "run_ended")]
    return bool(kinds) and kinds[-1] == "run_ended"
