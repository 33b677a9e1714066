"""A subscribe's snapshot reaches the client before the pushes that follow it.

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


def test_pushes_that_arrive_with_the_snapshot_come_after_it(tmp_path):
    sock = tmp_path / "rlsup.sock"

    async def scenario() -> Recorder:
        server = await asyncio.start_unix_server(_peer, path=str(sock))
        rec = Recorder()
        session = Session(unix_connector(sock), rec, lines=50)
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

    rec = asyncio.run(scenario())
    assert rec.lines == [f"tick {i}" for i in range(1, 35)]
    assert rec.events == [1, 2, 3]
