"""A component's log on disk by sequence number (``log_read`` / ``log_search``): rotated files in
order, an unterminated last line, pages anywhere in the file, and the join with the live ring."""

from __future__ import annotations

import asyncio
import os
import sys

from rlsup.supervisor.client.session import Client
from rlsup.supervisor.rundir import logpages
from rlsup.supervisor.rundir.logpages import LogPages
from rlsup.supervisor.rundir.logs import Position
from tests.conftest import wait_for, write_config

LINES = [f"line {i} " + "x" * (i % 37) for i in range(5000)]


def _chain(tmp_path):
    for name, part in (("t.log.2", LINES[:1500]), ("t.log.1", LINES[1500:3200]), ("t.log", LINES[3200:])):
        (tmp_path / name).write_text("".join(x + "\n" for x in part))
    st = os.stat(tmp_path / "t.log")
    return LogPages(tmp_path / "t.log"), Position(st.st_ino, st.st_size, 4000)


def test_pages_anywhere_across_rotated_files(tmp_path, monkeypatch):
    monkeypatch.setattr(logpages, "STRIDE", 1000)  # many checkpoints, reads that straddle them
    monkeypatch.setattr(logpages, "CHUNK", 700)
    pages, anchor = _chain(tmp_path)
    assert pages.bounds(anchor) == (-1000, 4000)  # 5000 lines on disk, the anchor's seq is 4000
    seq, lines, first, end = pages.read(anchor, None, 10)
    assert (seq, lines, first, end) == (-1000, LINES[:10], -1000, 4000)
    for start in (-1000, -1, 0, 499, 500, 2199, 2200, 3000, 3995):
        seq, lines, _, _ = pages.read(anchor, start, 2000)
        assert (seq, lines) == (start, LINES[start + 1000: start + 3000])
        seq, lines, _, _ = pages.read(anchor, None, 2000, before_seq=start)
        assert seq == max(-1000, start - 2000) and lines == LINES[seq + 1000: start + 1000]


def test_search_both_ways_and_an_unterminated_last_line(tmp_path):
    pages, anchor = _chain(tmp_path)
    assert pages.search(anchor, "LINE 17 ") == (-983, LINES[17])
    assert pages.search(anchor, "line 17 ", before_seq=4000) == (-983, LINES[17])
    assert pages.search(anchor, "line 4999 ", after_seq=0) == (3999, LINES[4999])
    assert pages.search(anchor, "line 4999 ", before_seq=3999) is None
    assert pages.search(anchor, "no such text") is None
    with open(tmp_path / "t.log", "a") as f:
        f.write("\x1b[31mpartial\x1b[0m")
    st = os.stat(tmp_path / "t.log")
    anchor = Position(st.st_ino, st.st_size, 4001)
    assert pages.read(anchor, None, 3, before_seq=4001)[1] == [LINES[-2], LINES[-1], "partial"]


CONFIG = """
name: pages
logs: {{max_bytes: 100000, backups: 20, ring_lines: 500}}  # 5 rotations in well under a second
components:
  writer:
    command: ["{py}", "-u", "-c", "import time\\nfor i in range(20000):\\n    print(f'w {{i:05d}} secret-token-abc', flush=i % 1000 == 0)\\nprint('done', flush=True)\\ntime.sleep(600)"]
    env: {{API_TOKEN: secret-token-abc}}
"""


def test_a_live_run_serves_its_whole_log_in_seq_order_joined_with_the_ring(tmp_path, daemon):
    cfg = write_config(tmp_path, CONFIG.format(py=sys.executable))
    d = daemon(cfg)

    async def go():
        c = await Client.open_unix(d.sock, name="test")
        try:
            async def done():
                r = await c.request("logs", component="writer", from_seq=0, limit=5000)
                return r["lines"] and r["lines"][-1] == "done"

            for _ in range(300):  # the supervisor follows the log across every rotation, to its end
                if await done():
                    break
                await asyncio.sleep(0.1)
            ring = await c.request("logs", component="writer", from_seq=0, limit=5000)
            assert ring["lines"][-1] == "done", ring["lines"][-3:]
            first = ring["first_seq"]
            assert first > 10_000  # most of the log left the ring long ago
            head = await c.log_read("writer", from_seq=None, limit=3)
            assert head["seq"] == 0 and head["disk_first_seq"] == 0
            assert head["lines"] == ["w 00000 ***", "w 00001 ***", "w 00002 ***"]  # masked as the ring is
            # The page just before the ring ends exactly where the ring begins.
            before = await c.log_read("writer", before_seq=first, limit=100)
            assert before["seq"] == first - 100
            assert before["lines"][-1] == f"w {first - 1:05d} ***"
            assert ring["lines"][0] == f"w {first:05d} ***"
            same = await c.log_read("writer", from_seq=first, limit=len(ring["lines"]))
            assert same["lines"] == ring["lines"]
            hit = await c.log_search("writer", "w 00042 ", before_seq=first)
            assert (hit["seq"], hit["line"]) == (42, "w 00042 ***")
            miss = await c.log_search("writer", "secret-token", before_seq=first)
            assert miss["seq"] is None  # a secret is not found by searching for it
        finally:
            await c.close()

    wait_for(lambda: d.sock.exists(), 30, what="the control socket")
    asyncio.run(go())
    assert len([n for n in os.listdir(d.run_dir / "logs") if n.startswith("writer.log")]) > 2  # rotated


def test_nothing_on_disk_yet_reads_as_no_lines(tmp_path):
    """A pane opened before the component wrote its first byte (the Quickstart's TUI does this): the
    anchor names no file on disk yet; the read is empty, not an IndexError that ended the run."""
    pages = LogPages(tmp_path / "t.log")
    anchor = Position(None, 0, 0)
    assert pages.read(anchor, None, 100) == (0, [], 0, 0)
    assert pages.read(anchor, None, 100, before_seq=0) == (0, [], 0, 0)
    (tmp_path / "t.log").write_text("a\n")
    stale = Position(os.stat(tmp_path / "t.log").st_ino + 1, 2, 1)  # the anchor's file was replaced
    assert pages.read(stale, None, 100) == (1, [], 1, 1)


def test_a_request_that_fails_in_the_supervisor_is_answered_not_raised():
    """A bug behind one client's request (here: log_read raising IndexError, as an empty log did) is
    answered with an error; it used to escape the connection and end the run as an internal error."""
    import json

    from rlsup.supervisor.run.server import Conn

    sent: list[dict] = []

    class Transport:
        def write(self, data: bytes) -> None:
            sent.append(json.loads(data))

        def get_write_buffer_size(self) -> int:
            return 0

    class Writer:
        transport = Transport()

    class Server:
        async def op_log_read(self, rid, msg):
            raise IndexError("list index out of range")

        def backlog_limit(self) -> int:
            return 1 << 20

    conn = Conn(Server(), None, Writer())  # type: ignore[arg-type]
    conn.hello = True
    asyncio.run(conn.handle(b'{"id": 7, "op": "log_read", "component": "trainer", "limit": 3}'))
    assert sent and sent[-1]["id"] == 7 and not sent[-1]["ok"]
    assert "log_read failed in the supervisor" in sent[-1]["error"]
