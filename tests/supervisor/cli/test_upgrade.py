"""Training outlives the supervisor: an upgrade in place (`rlsup restart-supervisor`) and a supervisor
killed outright both leave the components running, their logs whole, and a client that reconnects
sees every line exactly once (issue 15)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

from rlsup.supervisor.client.session import Session, unix_connector
from tests.conftest import PATIENCE, async_wait_for, pid_alive, rlsup, wait_for, write_config

COUNTER = """
name: up
components:
  counter:
    command: ["{py}", "-u", "-c", "import time\\nfor i in range(1, 10**7):\\n    print(f'n {i}', flush=True)\\n    time.sleep(0.002)"]
"""


class Lines:
    """A client that keeps every line it is sent, by sequence number."""

    def __init__(self) -> None:
        self.lines: dict[int, str] = {}
        self.gaps: list[tuple[int, int]] = []
        self.status: list[str] = []

    def on_connection(self, status: str, detail: str) -> None:
        self.status.append(status)

    def on_snapshot(self, snapshot: dict, resumed: bool) -> None:
        block = snapshot["logs"].get("counter") or {}
        self.on_logs("counter", block.get("seq", 0), block.get("lines", []))

    def on_event(self, event: dict) -> None:
        pass

    def on_logs(self, component: str, seq: int, lines: list[str]) -> None:
        for i, line in enumerate(lines):
            assert self.lines.setdefault(seq + i, line) == line, f"line {seq + i} seen twice with different text"

    def on_gap(self, component: str, from_seq: int, to_seq: int) -> None:
        self.gaps.append((from_seq, to_seq))


def _numbers(log_dir) -> list[int]:
    text = "".join(p.read_text() for p in sorted(log_dir.glob("counter.log*"), reverse=True))
    return [int(x.split()[1]) for x in text.splitlines() if x.startswith("n ")]


def test_restart_supervisor_replaces_it_without_touching_the_component(tmp_path, daemon):
    d = daemon(write_config(tmp_path, COUNTER))
    started = d.wait_event(lambda e: e["kind"] == "started", what="counter started")
    old = d.pid
    sock = d.run_dir / "rlsup.sock"
    rec = Lines()

    async def scenario() -> None:
        s = Session(unix_connector(sock, name="test"), rec, lines=10_000, backoff=(0.1, 0.5))
        task = asyncio.ensure_future(s.run())
        await asyncio.wait_for(s.connected.wait(), PATIENCE)
        await async_wait_for(lambda: len(rec.lines) > 100, PATIENCE, what="the counter's lines before the restart")
        r = await asyncio.to_thread(d.cli, "restart-supervisor", timeout=60)
        assert r.returncode == 0, r.stderr
        assert "supervisor replaced" in r.stdout and "1 component(s) kept running" in r.stdout
        await async_wait_for(lambda: rec.status.count("attached") >= 2 and len(rec.lines) > 2000, 30,
                             what="the client reconnected to the new supervisor and caught up")
        top = max(rec.lines)  # and the lines the new supervisor reads keep coming
        await async_wait_for(lambda: max(rec.lines) > top + 200, PATIENCE, what="new lines after the reconnect")
        s.close()
        await task

    asyncio.run(scenario())
    assert d.pid != old and not pid_alive(old)
    assert pid_alive(started["pid"])  # the same process, never restarted
    adopted = d.wait_event(lambda e: e["kind"] == "adopted", what="adopted")
    assert adopted["pid"] == started["pid"] and adopted["attempt"] == 1
    kinds = [e["kind"] for e in d.events()]
    assert kinds.count("started") == 1 and "supervisor_exited" in kinds and "restart_scheduled" not in kinds
    # Not a line missing on disk...
    nums = _numbers(d.run_dir / "logs")
    assert nums == list(range(1, len(nums) + 1))
    # ...nor for the client: every sequence number from its first to its last, exactly once, same text.
    seqs = sorted(rec.lines)
    assert seqs == list(range(seqs[0], seqs[-1] + 1)) and not rec.gaps
    assert [int(rec.lines[s].split()[1]) for s in seqs] == list(range(seqs[0] + 1, seqs[-1] + 2))
    st = json.loads(d.cli("status", "--json").stdout)["components"]["counter"]
    assert st["pid"] == started["pid"] and st["state"] == "running" and st["uptime_s"] > 1


def test_kill_9_of_the_supervisor_loses_nothing(tmp_path, daemon):
    d = daemon(write_config(tmp_path, COUNTER))
    started = d.wait_event(lambda e: e["kind"] == "started", what="counter started")
    for _ in range(3):
        old = d.pid
        os.kill(old, signal.SIGKILL)
        wait_for(lambda old=old: not pid_alive(old), what="supervisor gone")
        time.sleep(0.3)  # the counter goes on with no supervisor at all
        r = d.cli("up", str(d.config), "-d", "--run-dir", str(d.run_dir))
        assert r.returncode == 0, r.stderr
        wait_for(lambda old=old: d.pid != old, what="a new supervisor")
    assert pid_alive(started["pid"])
    adopted = [e for e in d.events() if e["kind"] == "adopted"]
    assert len(adopted) == 3 and {e["pid"] for e in adopted} == {started["pid"]}
    nums = _numbers(d.run_dir / "logs")
    assert nums == list(range(1, len(nums) + 1))
    kinds = [e["kind"] for e in d.events()]
    assert kinds.count("started") == 1 and "exited" not in kinds


def test_what_completed_before_a_supervisor_died_is_not_started_again(tmp_path, daemon):
    cfg = write_config(tmp_path, COUNTER + """
  prepare:
    command: ["{py}", "-c", "print('prepared')"]
""")
    d = daemon(cfg)
    d.wait_event(lambda e: e["kind"] == "completed" and e["component"] == "prepare", what="prepare completed")
    counter = d.wait_event(lambda e: e["kind"] == "started" and e["component"] == "counter", what="counter")
    old = d.pid
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: not pid_alive(old), what="supervisor gone")
    r = d.cli("up", str(d.config), "-d", "--run-dir", str(d.run_dir))
    assert r.returncode == 0, r.stderr
    d.wait_event(lambda e: e["kind"] == "adopted" and e["component"] == "counter", what="counter adopted")
    time.sleep(1.0)  # deliberate: the completed component is not started again in this window
    starts = [e for e in d.events() if e["kind"] == "started"]
    assert [e["component"] for e in starts].count("prepare") == 1  # completed, and it stays completed
    assert [e["pid"] for e in starts if e["component"] == "counter"] == [counter["pid"]]
    st = json.loads(d.cli("status", "--json").stdout)["components"]
    assert st["prepare"]["state"] == "completed" and st["counter"]["state"] == "running"
    runs = [e["how"] for e in d.events() if e["kind"] == "run_started"]
    assert runs == ["new", "adopted"]


def test_the_new_supervisor_reads_the_config_in_its_predecessors_environment(tmp_path, daemon):
    """Walking the README's path: `rlsup up configs/demo.yaml -d` with RLSUP_DEMO_PORT and RLSUP_DEMO_STEPS set,
    `rlsup restart-supervisor` from another terminal without them, then `rlsup resume trainer`: the trainer came
    back with `--steps 200` and port 8731, the defaults: the new supervisor had read the config in the
    environment (and the directory) of whoever asked for it. It reads it in its predecessor's."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "greeting").write_text("hello\n")
    cfg = write_config(tmp_path, """
        components:
          echo:
            command: ["/bin/sh", "-c", "echo steps=${STEPS:-200} $(cat data/greeting); exec sleep 600"]
    """)
    d = daemon(cfg, env={"STEPS": "3000"})
    d.wait_event(lambda e: e["kind"] == "started", what="echo started")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = rlsup("restart-supervisor", "--run-dir", str(d.run_dir), cwd=elsewhere, env={"STEPS": "7"}, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    r = rlsup("restart", "echo", "--run-dir", str(d.run_dir), cwd=elsewhere, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    d.wait_event(lambda e: e["kind"] == "started" and e.get("attempt") == 2, what="echo started again")
    log = d.run_dir / "logs" / "echo.log"
    wait_for(lambda: log.read_text().count("steps=") == 2, PATIENCE, what="the second attempt's line")
    assert log.read_text().splitlines()[-1] == "steps=3000 hello", log.read_text()
