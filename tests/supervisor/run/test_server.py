"""The control socket against a real daemon: protocol round trips, bad input, slow and many clients,
and a reconnecting session that loses no lifecycle event."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest

from rlsup.supervisor.client.session import Client, Session
from rlsup.supervisor.records import protocol
from rlsup.supervisor.records.events import is_lifecycle
from tests.conftest import PATIENCE, async_wait_for, wait_for, write_config

TWO = """
name: srv
components:
  ticker:
    command: ["{py}", "-u", "-c", "import time\\nfor i in range(1, 100000):\\n    print(f'tick {i}', flush=True)\\n    time.sleep(0.02)"]
  sleeper:
    command: ["{py}", "-c", "import time; time.sleep(1000)"]
"""


def raw(sock_path, *msgs: bytes, read: bool = True, timeout: float = 5.0) -> list[dict]:
    """Send raw bytes on a fresh connection; return every reply line received within the timeout."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(sock_path))
    s.settimeout(timeout)
    for m in msgs:
        s.sendall(m)
    out: list[dict] = []
    buf = b""
    if read:
        deadline = time.monotonic() + timeout
        want = sum(m.count(b"\n") for m in msgs)
        while len(out) < want and time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            out.extend(json.loads(x) for x in lines if x)
    s.close()
    return out


def hello(rid: int = 1, version: int = protocol.VERSION) -> bytes:
    return protocol.encode({"id": rid, "op": "hello", "version": version, "client": "test"})


def test_encode_decode_units():
    assert protocol.decode(protocol.encode({"a": "ü", "n": 1})) == {"a": "ü", "n": 1}
    for bad in (b"not json", b"[1, 2]", b"\xff\xfe"):
        with pytest.raises(protocol.ProtocolError):
            protocol.decode(bad)


def test_round_trips_and_bad_input(tmp_path, daemon):
    d = daemon(write_config(tmp_path, TWO))
    d.wait_event(lambda e: e["kind"] == "started" and e["component"] == "sleeper", what="started")
    # The two start in parallel: wait until the ticker's first line is in the supervisor's ring.
    wait_for(lambda: "tick 1" in d.cli("logs", "ticker", "-n", "100").stdout, what="the ticker's first line")
    replies = raw(d.sock, hello(), protocol.encode({"id": 2, "op": "ping"}),
                  protocol.encode({"id": 3, "op": "snapshot", "lines": 5}),
                  protocol.encode({"id": 4, "op": "events", "since": 0}),
                  protocol.encode({"id": 5, "op": "logs", "component": "ticker", "from_seq": 0, "limit": 3}),
                  protocol.encode({"id": 6, "op": "nonsense"}),
                  protocol.encode({"id": 7, "op": "command", "command": "explode", "component": "ticker"}),
                  protocol.encode({"id": 8, "op": "command", "command": "stop", "component": "ghost"}),
                  protocol.encode({"id": 9, "op": "logs"}))
    by_id = {r["id"]: r for r in replies}
    assert by_id[1]["ok"] and by_id[1]["version"] == protocol.VERSION and by_id[1]["server"]["name"] == "srv"
    assert by_id[2]["ok"]
    snap = by_id[3]
    assert snap["state"]["components"]["ticker"]["state"] == "running"
    assert len(snap["logs"]["ticker"]["lines"]) <= 5 and snap["seq"] >= 1
    assert [e["seq"] for e in by_id[4]["events"]] == sorted(e["seq"] for e in by_id[4]["events"])
    assert by_id[4]["events"][0]["kind"] == "run_started"
    assert by_id[5]["lines"][:1] == ["tick 1"] and by_id[5]["seq"] == 0
    assert not by_id[6]["ok"] and "unknown op" in by_id[6]["error"]
    assert not by_id[7]["ok"] and "unknown command" in by_id[7]["error"]
    assert not by_id[8]["ok"] and "no component 'ghost'" in by_id[8]["error"]
    assert not by_id[9]["ok"] and "bad logs request" in by_id[9]["error"]

    # Version mismatch: refused with both versions named.
    (r,) = raw(d.sock, hello(version=99))
    assert not r["ok"] and "99" in r["error"] and str(protocol.VERSION) in r["error"]
    # Anything before hello is refused.
    (r,) = raw(d.sock, protocol.encode({"id": 1, "op": "snapshot"}))
    assert not r["ok"] and "hello" in r["error"]
    # Malformed lines get an error reply (no id) and the connection goes on.
    rs = raw(d.sock, b"{not json\n", b"[1]\n", hello(5))
    assert [r["ok"] for r in rs] == [False, False, True]
    # An oversized message (3 MiB without a newline, then one) is refused once and skipped.
    big = b'{"id": 1, "op": "ping", "pad": "' + b"x" * (3 << 20) + b'"}\n'
    rs = raw(d.sock, big, hello(2), read=True, timeout=10)
    assert rs[0]["ok"] is False and "larger than" in rs[0]["error"]
    assert rs[-1]["id"] == 2 and rs[-1]["ok"]
    # A client that connects and vanishes mid-message harms nothing.
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(d.sock))
    s.sendall(b'{"id": 1, "op": "hel')
    s.close()
    st = d.cli("status", "--json")
    assert st.returncode == 0 and json.loads(st.stdout)["components"]["sleeper"]["state"] == "running"


FLOOD = """
name: flood
components:
  flood:
    command: ["{py}", "-c", "import os, runpy, sys, time\\nwhile not os.path.exists('go'): time.sleep(0.02)\\nsys.argv = ['flood', '200000']\\nrunpy.run_path('{scripts}/flood.py')"]
    restart: {policy: never}
  sleeper:
    command: ["{py}", "-c", "import time; time.sleep(1000)"]
"""
FLOOD_LINES = 200_000


def read_until(sock: socket.socket, done, timeout: float = 60.0) -> list[dict]:
    """Read messages until ``done(msgs)`` (gauges keep coming every second, so no idle timeout)."""
    sock.settimeout(1.0)
    buf, msgs = b"", []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done(msgs):
        try:
            chunk = sock.recv(1 << 20)
        except TimeoutError:
            continue
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        msgs.extend(json.loads(x) for x in lines if x)
    return msgs


def _flood_total(msgs: list[dict]) -> int:
    lines = sum(len(m["lines"]) for m in msgs if m.get("type") == "logs" and m["component"] == "flood")
    return lines + sum(m["to_seq"] - m["from_seq"] for m in msgs if m.get("type") == "gap" and m["component"] == "flood")


def _flood_got(rec: Recorder) -> int:
    """The flood's lines a session received, or was told (by a gap) it missed."""
    return len(rec.logs.get("flood", [])) + sum(b - a for c, a, b in rec.gaps if c == "flood")


def test_stalled_subscriber_does_not_block_output(tmp_path, daemon):
    cfg = write_config(tmp_path, FLOOD)
    d = daemon(cfg)
    d.wait_event(lambda e: e["kind"] == "started" and e["component"] == "flood", what="flood started")
    stalled = socket.socket(socket.AF_UNIX)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(str(d.sock))
    stalled.sendall(hello() + protocol.encode({"id": 2, "op": "subscribe", "lines": 0}))

    async def scenario():
        rec = Recorder()
        fast = Session(lambda: Client.open_unix(d.sock, name="fast"), rec, lines=0)
        task = asyncio.ensure_future(fast.run())
        await asyncio.wait_for(fast.connected.wait(), PATIENCE)
        (tmp_path / "go").touch()  # the flood starts while one subscriber is stuck
        await async_wait_for(lambda: any(e.get("kind") == "completed" and e.get("component") == "flood"
                                         for e in rec.events) and _flood_got(rec) >= FLOOD_LINES, 60,
                             what="the flood completed and every line (or gap) reached the reading client")
        fast.close()
        await task
        return rec

    rec = _run(scenario())
    assert any(e.get("kind") == "completed" and e.get("component") == "flood" for e in rec.events)
    # Every byte reached the log file, though one client never read.
    log = (d.run_dir / "logs" / "flood.log").read_bytes()
    assert log.count(b"\n") == FLOOD_LINES
    # The reading client got every line, or was told exactly which ones it missed.
    assert _flood_got(rec) == FLOOD_LINES
    # The stuck client, reading at last: lifecycle events complete and in order, log lines plus gaps add up.
    msgs = read_until(stalled, lambda ms: _flood_total(ms) >= FLOOD_LINES and any(
        m.get("type") == "event" and m["event"]["kind"] == "completed" for m in ms))
    stalled.close()
    events = [m["event"] for m in msgs if m.get("type") == "event"]
    life = [e for e in events if is_lifecycle(e["kind"])]
    assert any(e["kind"] == "completed" and e["component"] == "flood" for e in life)
    seqs = [e["seq"] for e in life]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    lines = sum(len(m["lines"]) for m in msgs if m.get("type") == "logs" and m["component"] == "flood")
    gaps = [m for m in msgs if m.get("type") == "gap" and m["component"] == "flood"]
    assert gaps, "a client this far behind must be told about the lines it missed"
    assert lines + sum(g["to_seq"] - g["from_seq"] for g in gaps) == FLOOD_LINES
    # And the supervisor is fine.
    assert d.cli("status").returncode == 0


def _run(coro):
    return asyncio.run(coro)


class Recorder:
    def __init__(self):
        self.status: list[tuple[str, str]] = []
        self.events: list[dict] = []
        self.logs: dict[str, list[str]] = {}
        self.first_seq: dict[str, int] = {}
        self.gaps: list[tuple[str, int, int]] = []
        self.snapshots = 0

    def on_connection(self, status, detail):
        self.status.append((status, detail))

    def on_snapshot(self, snapshot, resumed):
        self.snapshots += 1
        for name, block in snapshot["logs"].items():
            self.first_seq.setdefault(name, block["seq"])
            self.logs.setdefault(name, []).extend(block["lines"])

    def on_event(self, e):
        self.events.append(e.to_dict())  # the session hands records; these tests read the dicts that came

    def on_logs(self, component, seq, lines):
        self.logs.setdefault(component, []).extend(lines)

    def on_gap(self, component, a, b):
        self.gaps.append((component, a, b))


def test_session_reconnects_without_losing_lifecycle_events(tmp_path, daemon):
    d = daemon(write_config(tmp_path, TWO))
    d.wait_event(lambda e: e["kind"] == "started" and e["component"] == "sleeper", what="started")

    async def scenario():
        rec_a, rec_b = Recorder(), Recorder()
        clients: list[Client] = []

        async def connect():
            c = await Client.open_unix(d.sock, name="test")
            clients.append(c)
            return c

        a = Session(connect, rec_a, lines=100, backoff=(0.1, 0.5))
        b = Session(lambda: Client.open_unix(d.sock, name="other"), rec_b, lines=100)
        ta, tb = asyncio.ensure_future(a.run()), asyncio.ensure_future(b.run())
        await asyncio.wait_for(a.connected.wait(), PATIENCE)
        await asyncio.wait_for(b.connected.wait(), PATIENCE)
        # Cut A's link abruptly; while it is down, things happen.
        clients[0].writer.transport.abort()
        reply = await b.command("restart", "sleeper")
        assert reply["ok"], reply
        await async_wait_for(lambda: any(e.get("kind") == "started" and e.get("attempt") == 2 for e in rec_b.events),
                             PATIENCE, what="B to see the sleeper's attempt 2")
        await async_wait_for(lambda: len(clients) >= 2 and a.connected.is_set() and any(
            e.get("kind") == "started" and e.get("attempt") == 2 for e in rec_a.events), PATIENCE,
            what="A reconnected and caught up to the sleeper's attempt 2")
        # The ticker's lines arrive on both, A's after its reconnect too.
        after = len(rec_a.logs.get("ticker", []))
        await async_wait_for(lambda: len(rec_a.logs.get("ticker", [])) > max(after, 10) and rec_b.logs.get("ticker"),
                             PATIENCE, what="the ticker's lines on both sessions")
        a.close()
        b.close()
        await asyncio.gather(ta, tb)
        return rec_a, rec_b, clients

    rec_a, rec_b, clients = _run(scenario())
    assert len(clients) >= 2, "A never reconnected"
    assert ("reconnecting", "connection lost (connection closed by the supervisor)") in rec_a.status or \
        any(s == "reconnecting" for s, _ in rec_a.status)
    # Gauges (progress, gpu, resources every 5 s) carry the seq they were sampled at: not lifecycle.
    life_a = [e["seq"] for e in rec_a.events if e.get("seq") and is_lifecycle(e["kind"])]
    life_b = [e["seq"] for e in rec_b.events if e.get("seq") and is_lifecycle(e["kind"])]
    assert life_a == sorted(set(life_a)), "duplicate or out-of-order lifecycle events after the reconnect"
    # Both views saw the same lifecycle history from the first event they share.
    common = min(life_b)
    assert [s for s in life_a if s >= common] == [s for s in life_b if s >= common][:len([s for s in life_a if s >= common])]
    assert any(e["kind"] == "stopped" and e["component"] == "sleeper" for e in rec_a.events)
    # The ticker's stream continued across the reconnect: no missing and no repeated line.
    ticks = [int(x.split()[1]) for x in rec_a.logs["ticker"]]
    assert ticks == list(range(ticks[0], ticks[0] + len(ticks))) or rec_a.gaps
    assert len(ticks) > 10


def test_many_clients_see_the_same_state(tmp_path, daemon):
    d = daemon(write_config(tmp_path, TWO))
    d.wait_event(lambda e: e["kind"] == "started" and e["component"] == "sleeper", what="started")

    async def snap_all():
        cs = [await Client.open_unix(d.sock, name=f"c{i}") for i in range(5)]
        snaps = await asyncio.gather(*(c.snapshot() for c in cs))
        for c in cs:
            await c.close()
        return snaps

    snaps = _run(snap_all())
    states = {json.dumps({n: (c["state"], c["pid"], c["attempt"]) for n, c in s["state"]["components"].items()})
              for s in snaps}
    assert len(states) == 1
    wait_for(lambda: True)


def test_subscribe_without_logs_gets_events_but_no_lines(tmp_path, daemon):
    d = daemon(write_config(tmp_path, TWO))
    d.wait_event(lambda e: e["kind"] == "started" and e["component"] == "sleeper", what="started")

    async def go():
        rec_quiet, rec_full = Recorder(), Recorder()
        quiet = Session(lambda: Client.open_unix(d.sock, name="q"), rec_quiet, lines=0, logs=False)
        full = Session(lambda: Client.open_unix(d.sock, name="f"), rec_full, lines=0)
        tasks = [asyncio.ensure_future(s.run()) for s in (quiet, full)]
        await asyncio.wait_for(quiet.connected.wait(), PATIENCE)
        await asyncio.wait_for(full.connected.wait(), PATIENCE)
        assert (await quiet.command("restart", "sleeper"))["ok"]
        await async_wait_for(lambda: any(e.get("kind") == "started" and e.get("attempt") == 2
                                         for e in rec_quiet.events), PATIENCE, what="the sleeper's attempt 2")
        # Lines reach the full session; the quiet one, subscribed as long, gets none of them.
        await async_wait_for(lambda: len(rec_full.logs.get("ticker", [])) >= 10, PATIENCE,
                             what="ticker lines on the full session")
        quiet.close()
        full.close()
        await asyncio.gather(*tasks)
        return rec_quiet, rec_full

    quiet, full = _run(go())
    assert any(e.get("kind") == "started" and e.get("attempt") == 2 for e in quiet.events)
    assert not quiet.logs.get("ticker") and full.logs.get("ticker")
