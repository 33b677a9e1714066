"""A client attached to a live run never shows it ended, through reconnects, take-overs, supervisor
restarts and resumes (docs/lifecycle.md, "What rlsup promises about a run"; issue 38's first bug).

The run is continued with ``--resume`` (the documented way), so the journal a client replays on its
first connection holds the earlier run's ``run_ended`` before the later ``run_started``. Then the link
drops: ``rlsup restart-supervisor``, ``kill -9`` of the supervisor and a take-over with ``up -d``. Every
client rides through: the session (what the TUI uses), ``rlsup attach --plain``, ``rlsup events -f``
and the fleet. Only ``rlsup down`` ends the run, and then each of them says so.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from rlsup.supervisor.client.fleet import Fleet, PodSpec
from rlsup.supervisor.client.session import unix_connector
from tests.conftest import pid_alive, wait_for, write_config
from tests.explorer.world import Follower
from tests.faults.harness import Subscriber

# A drop is a new supervisor starting (Python, the take-over) and each client's redial backoff (up to 10 s):
# at a load average of 10 that has taken longer than 60 s.
BACK = 120.0

COUNTER = """
name: resumed
components:
  counter:
    command: ["{py}", "-u", "-c", "import time\\nfor i in range(1, 10**7):\\n    print(f'n {i}', flush=True)\\n    time.sleep(0.05)"]
"""


class FleetThread:
    """The fleet's own :class:`Fleet` on one local pod (a unix connector instead of SSH), on a thread."""

    def __init__(self, sock: Path) -> None:
        self.fleet = Fleet([PodSpec(host="local", label="local")], lambda _spec: unix_connector(sock, "fleet"))
        self.seen_ended = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.thread.start()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        watch = asyncio.ensure_future(self._watch())
        await self.fleet.run()
        watch.cancel()

    async def _watch(self) -> None:
        pod = self.fleet.pods[0]
        while True:
            self.seen_ended |= pod.connected and pod.ended
            await asyncio.sleep(0.02)

    @property
    def pod(self) -> Any:
        return self.fleet.pods[0]

    def close(self) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.fleet.close)
        self.thread.join(30)


def _statuses(sub: Subscriber) -> list[str]:
    return [s for s, _ in sub.statuses]


@pytest.mark.timeout(600)  # three drops, each up to BACK for every client to come back
def test_every_client_rides_through_the_link_drops_of_a_resumed_run(tmp_path, daemon):
    d = daemon(write_config(tmp_path, COUNTER))
    d.wait_event(lambda e: e["kind"] == "started", what="counter started")
    assert d.cli("down", timeout=60).returncode == 0
    r = d.cli("up", str(d.config), "-d", "--resume", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    d.wait_event(lambda e: e["kind"] == "started" and e.get("attempt") == 2, what="the resumed attempt")

    sub = Subscriber(d.sock)
    fleet = FleetThread(d.sock)
    plain = Follower(d.run_dir, None, "attach", "--plain")
    follow = Follower(d.run_dir, None, "events", "-f")
    try:
        wait_for(lambda: sub.attached and fleet.pod.connection == "attached", BACK, what="the clients attached")
        # The followers are processes (a Python start each): they have read the journal before the first drop.
        wait_for(lambda: "(attempt 2" in plain.out and "(attempt 2" in follow.out, BACK, what="the followers started")
        # The replayed journal holds the first run's end, then the resumed run's start.
        assert [e["kind"] for e in sub.events if e["kind"] in ("run_started", "run_ended")][-2:] == \
            ["run_ended", "run_started"]

        def drop(how: str) -> None:
            old = d.pid
            n = _statuses(sub).count("attached")
            if how == "restart-supervisor":
                assert d.cli("restart-supervisor", timeout=60).returncode == 0
            else:
                os.kill(old, signal.SIGKILL)
                wait_for(lambda: not pid_alive(old), what="the supervisor gone")
                r = d.cli("up", str(d.config), "-d", timeout=60)
                assert r.returncode == 0, r.stdout + r.stderr
            wait_for(lambda: d.pid != old, 30, what="a new supervisor")
            def back() -> bool:
                assert "ended" not in _statuses(sub), f"the session ended a live run after {how}: {sub.statuses}"
                return _statuses(sub).count("attached") > n

            wait_for(back, BACK, what=f"the session back after {how}")
            wait_for(lambda: fleet.pod.connection == "attached" and fleet.pod.session.server.get("pid") == d.pid,
                     BACK, what=f"the fleet back after {how}")
            try:  # (one that was still dialling when the drop came shows the new supervisor without a reconnect)
                wait_for(lambda: f"pid {d.pid}" in plain.out and f"pid {d.pid}" in follow.out, BACK)
            except AssertionError:
                raise AssertionError(f"the followers not back after {how}, showing the new supervisor (pid {d.pid}):\n"
                                     f"attach --plain:\n{plain.out[-3000:]}\nevents -f:\n{follow.out[-3000:]}") from None

        for how in ("restart-supervisor", "kill -9", "restart-supervisor"):
            drop(how)
            assert "ended" not in _statuses(sub), sub.statuses
            assert not fleet.seen_ended and not fleet.pod.ended
            assert plain.proc.poll() is None and follow.proc.poll() is None, "a follower stopped following a live run"
        assert d.cli("status", "--json").returncode == 0
        assert plain.reconnects() >= 2 and follow.reconnects() >= 2, (plain.out, follow.out)

        assert d.cli("down", timeout=60).returncode == 0  # now the run ends, and every client says so
        wait_for(lambda: "ended" in _statuses(sub), 30, what="the session's end")
        wait_for(lambda: fleet.pod.ended, 30, what="the fleet's pod ended")
        assert plain.proc.wait(30) == 0 and follow.proc.wait(30) == 0  # they end by themselves
    finally:
        sub.close()
        fleet.close()
        plain.kill(), follow.kill()  # (what is left of them: each ended by itself above)
        out_plain, out_follow = plain.out, follow.out
    assert "run ended: stopped by user" in out_plain and "detached; training continues" not in out_plain, out_plain
    assert "run ended: stopped by user" in out_follow, out_follow


class Recorder:
    """A session listener that keeps what it was told."""

    def __init__(self) -> None:
        self.statuses: list[str] = []
        self.kinds: list[str] = []
        self.resumed: list[bool] = []  # each snapshot's
        self.lines: list[str] = []

    def on_connection(self, status: str, detail: str) -> None:
        self.statuses.append(status)

    def on_snapshot(self, snapshot: dict, resumed: bool) -> None:
        self.resumed.append(resumed)
        for block in (snapshot.get("logs") or {}).values():
            self.lines += block["lines"]

    def on_event(self, event: Any) -> None:
        self.kinds.append(event.kind)

    def on_logs(self, component: str, seq: int, lines: list[str]) -> None:
        self.lines += lines

    def on_gap(self, component: str, from_seq: int, to_seq: int) -> None: ...


def test_a_run_that_ended_while_the_link_was_down_is_shown_ended(tmp_path, daemon):
    """The supervisor is killed, and before any take-over `rlsup down` ends the run without it: a client
    that was attached learns of the end from the journal (it kept saying "reconnecting" for ever)."""
    from rlsup.supervisor.client.session import Session, local_connector

    d = daemon(write_config(tmp_path, COUNTER))
    d.wait_event(lambda e: e["kind"] == "started", what="counter started")
    rec = Recorder()
    plain = Follower(d.run_dir, None, "attach", "--plain")
    follow = Follower(d.run_dir, None, "events", "-f")

    async def scenario() -> None:
        s = Session(local_connector(d.run_dir, "test"), rec, lines=0, backoff=(0.1, 0.5))
        task = asyncio.ensure_future(s.run())
        await asyncio.wait_for(s.connected.wait(), 30)
        await asyncio.to_thread(wait_for, lambda: "started" in plain.out and "started" in follow.out, 30)
        # Both are clients of the live supervisor, not only readers of its history (printed before a follower
        # looks for a supervisor): an event after they started reaches them. A follower that looked after the
        # kill below would rightly say that no supervisor owns the run, and end.
        assert (await asyncio.to_thread(d.cli, "restart", "counter")).returncode == 0
        await asyncio.to_thread(wait_for, lambda: "attempt 2" in plain.out and "attempt 2" in follow.out, 60)
        sup = d.pid
        os.kill(sup, signal.SIGKILL)
        await asyncio.to_thread(wait_for, lambda: not pid_alive(sup), 30)
        r = await asyncio.to_thread(d.cli, "down", timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        await asyncio.wait_for(task, 60)  # the session ends by itself

    try:
        asyncio.run(scenario())
        assert plain.proc.wait(60) == 0 and follow.proc.wait(60) == 0
    finally:
        plain.kill(), follow.kill()  # (what is left of them: each ended by itself above)
        out_plain, out_follow = plain.out, follow.out
    assert rec.statuses[-1] == "ended" and rec.kinds[-1] == "run_ended", (rec.statuses, rec.kinds)
    for out in (out_plain, out_follow):
        assert "run ended: stopped by `rlsup down`" in out, out
    assert "detached; training continues" not in out_plain


def test_a_session_that_looks_again_attaches_to_the_run_resumed_after_its_end(tmp_path, daemon):
    """A TUI left open through `rlsup down`: its session (``reopen_s``) says the run ended, then attaches to the
    supervisor that `up --resume` starts later, and the resumed run's events come after the end's, none twice.
    A session without it (a follower, a script) ends with the run, as before."""
    from rlsup.supervisor.client.session import Session, local_connector

    d = daemon(write_config(tmp_path, COUNTER))
    d.wait_event(lambda e: e["kind"] == "started", what="counter started")
    looks, ends = Recorder(), Recorder()

    async def scenario() -> None:
        s = Session(local_connector(d.run_dir, "test"), looks, lines=0, backoff=(0.1, 0.5), reopen_s=0.2)
        once = Session(local_connector(d.run_dir, "test"), ends, lines=0, backoff=(0.1, 0.5))
        task, task_once = asyncio.ensure_future(s.run()), asyncio.ensure_future(once.run())
        await asyncio.wait_for(asyncio.gather(s.connected.wait(), once.connected.wait()), 30)
        assert (await asyncio.to_thread(d.cli, "down", timeout=60)).returncode == 0
        await asyncio.wait_for(task_once, 30)  # ends with the run
        await asyncio.to_thread(wait_for, lambda: "ended" in looks.statuses, 30, what="the end said")
        await asyncio.sleep(1.0)  # it keeps looking: several dials of a run dir nobody holds
        assert not task.done() and looks.statuses[-1] == "ended", looks.statuses
        r = await asyncio.to_thread(d.cli, "up", str(d.config), "-d", "--resume", timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        await asyncio.wait_for(s.connected.wait(), BACK)
        await asyncio.to_thread(wait_for, lambda: looks.kinds.count("started") >= 2, 30,
                                what="the resumed attempt's start")
        s.close()
        await asyncio.wait_for(task, 30)

    asyncio.run(scenario())
    after = looks.statuses[looks.statuses.index("ended"):]
    assert after[:3] == ["ended", "reconnecting", "attached"], looks.statuses
    runs = [k for k in looks.kinds if k in ("run_started", "run_ended")]
    assert runs[-2:] == ["run_ended", "run_started"] and runs.count("run_ended") == 1, looks.kinds
    assert ends.statuses[-1] == "ended", ends.statuses


def test_a_session_that_looks_again_starts_over_with_a_run_started_anew(tmp_path, daemon):
    """After the end, `rlsup up CONFIG --fresh` keeps the old run aside and starts another in the run dir: a
    session that looks again takes it from its beginning (its journal's and logs' numbers start again), not
    from where the old run's left off (it showed none of the new run's events, nor its first lines)."""
    from rlsup.supervisor.client.session import Session, local_connector

    d = daemon(write_config(tmp_path, COUNTER))
    d.wait_event(lambda e: e["kind"] == "started", what="counter started")
    log = d.run_dir / "logs" / "counter.log"
    wait_for(lambda: log.exists() and "n 40" in log.read_text(), 60, what="an old run longer than the new one's start")
    rec = Recorder()

    async def scenario() -> None:
        s = Session(local_connector(d.run_dir, "test"), rec, lines=0, backoff=(0.1, 0.5), reopen_s=0.2)
        task = asyncio.ensure_future(s.run())
        await asyncio.wait_for(s.connected.wait(), 30)
        assert (await asyncio.to_thread(d.cli, "down", timeout=60)).returncode == 0
        await asyncio.to_thread(wait_for, lambda: "ended" in rec.statuses, 30, what="the end said")
        r = await asyncio.to_thread(d.cli, "up", str(d.config), "-d", "--fresh", timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        await asyncio.to_thread(wait_for, lambda: "n 3" in rec.lines and rec.kinds.count("started") >= 2, BACK,
                                what="the new run's start and first lines")
        s.close()
        await asyncio.wait_for(task, 30)

    asyncio.run(scenario())
    assert rec.resumed == [False, False], rec.resumed  # the second snapshot begins the new run
    after = rec.kinds[rec.kinds.index("run_ended"):]
    assert "run_started" in after, rec.kinds
