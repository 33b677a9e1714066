"""A subscribe's snapshot reaches the client before the pushes that follow it; a supervisor gone between the
hello and the subscribe's answer is reconnected to, not the session's end.

The supervisor pushes lines and events right after its reply to ``subscribe``; on a loaded machine the
reply and the first pushes arrive in one read. Seen in the README suite at load 10: an SSH session
showed ``tick 34`` and then the snapshot's ``tick 1``..``tick 33``, and a pushed lifecycle event taken
in first made the snapshot's older events look already delivered, so they were dropped.

The peer here speaks the control protocol and writes the reply and two pushes in one ``write``: the
interleaving injected on purpose, which a real supervisor produces only under load.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from rlsup.supervisor.client.session import Session, unix_connector
from rlsup.supervisor.records import protocol


def _started(seq: int) -> dict[str, Any]:
    return {"ts": 1.0 + seq, "seq": seq, "kind": "started", "component": "ticker", "pid": 100 + seq, "attempt": seq}


async def _peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while line := await reader.readline():
        msg = json.loads(line)
        if msg["op"] == "hello":
            writer.write(protocol.encode({"id": msg["id"], "ok": True, "version": protocol.VERSION,
                                          "server": {"host": "pod"}}))
        elif msg["op"] == "subscribe":
            snap = {"id": msg["id"], "ok": True, "seq": 2, "events": [_started(1), _started(2)],
                    "logs": {"ticker": {"seq": 1, "lines": [f"tick {i}" for i in range(1, 34)]}}}
            writer.write(protocol.encode(snap)
                         + protocol.encode({"type": "logs", "component": "ticker", "seq": 34, "lines": ["tick 34"]})
                         + protocol.encode({"type": "event", "event": _started(3)}))
        await writer.drain()


class Recorder:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.events: list[int] = []

    def on_connection(self, status: str, detail: str) -> None: ...

    def on_snapshot(self, snapshot: dict[str, Any], resumed: bool) -> None:
        for block in (snapshot.get("logs") or {}).values():
            self.lines.extend(block["lines"])

    def on_event(self, rec: Any) -> None:
        self.events.append(rec.seq)

    def on_logs(self, component: str, seq: int, lines: list[str]) -> None:
        self.lines.extend(lines)

    def on_gap(self, component: str, from_seq: int, to_seq: int) -> None: ...


async def _follow(sock: Any, peer: Any) -> Recorder:
    """A session on ``peer`` until it has event 3 (or it ended on its own: its error is raised)."""
    server = await asyncio.start_unix_server(peer, path=str(sock))
    rec = Recorder()
    session = Session(unix_connector(sock), rec, lines=50, backoff=(0.05, 0.1))
    task = asyncio.ensure_future(session.run())
    try:
        for _ in range(500):
            if 3 in rec.events or task.done():
                break
            await asyncio.sleep(0.01)
    finally:
        session.close()
        await asyncio.wait_for(task, 10)
        server.close()
    return rec


def test_pushes_that_arrive_with_the_snapshot_come_after_it(tmp_path):
    rec = asyncio.run(_follow(tmp_path / "rlsup.sock", _peer))
    assert rec.lines == [f"tick {i}" for i in range(1, 35)]
    assert rec.events == [1, 2, 3]


def test_a_supervisor_gone_between_the_hello_and_the_subscribe_is_reconnected_to(tmp_path):
    """The fault explorer (RLSUP_EXPLORE_SEED=90): two `kill -9`s of the supervisor 1.7 s apart; `rlsup attach`
    reconnected to the first take-over, which was killed after its hello and before its subscribe's answer, and
    attach ended (exit 1, "ConnectionError: connection closed by the supervisor") with the run going on. The
    first connection here closes at the subscribe, as the killed supervisor's did; the session goes on."""
    connections = []

    async def dies_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        if len(connections) > 1:
            return await _peer(reader, writer)
        hello = json.loads(await reader.readline())
        writer.write(protocol.encode({"id": hello["id"], "ok": True, "version": protocol.VERSION, "server": {}}))
        await writer.drain()
        await reader.readline()  # the subscribe: killed before it answers
        writer.close()

    rec = asyncio.run(_follow(tmp_path / "rlsup.sock", dies_once))
    assert len(connections) == 2 and rec.events == [1, 2, 3]
