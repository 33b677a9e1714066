"""Fault 4 of issue 16: memory per client is bounded, and returned when clients leave.

A component floods the daemon while clients misbehave on the control socket: one sends snapshot
requests and never reads a reply; a thousand subscribe and never read. The daemon's RSS is sampled
throughout (the figures are printed with ``pytest -s``); it must stay bounded while they hang on,
other clients must still be answered, and the memory must come back once they are gone.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import psutil

from rlsup.supervisor.records import protocol
from tests.faults import harness
from tests.faults.harness import NUMBERED, Subscriber, assert_no_lost_line, assert_no_orphans, figure, journal

# The fault matrix's fixtures (not in a conftest.py here: it would shadow tests/conftest.py for
# the `from conftest import ...` of other test modules).
fault_run, token = harness.fault_run, harness.token

FLOOD = """
name: mem
components:
  flood:
    command: ["{py}", "%(numbered)s", "--copy", "{tmp}/flood.copy", "--rate", "20000", "--until", "{tmp}/enough"]
  keep:
    command: ["sleep", "100000"]
"""

SUBSCRIBERS = 1000
SNAPSHOTS = 400


def _rss(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


class Sampler:
    """The daemon's RSS every 0.2 s, on a thread; ``peak`` since the last ``reset``."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, _rss(self.pid))
            except psutil.Error:
                return
            time.sleep(0.2)

    def reset(self) -> None:
        self.peak = _rss(self.pid)

    def stop(self) -> None:
        self._stop.set()
        self._t.join(5)


def _stuck_client(sock_path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(str(sock_path))
    return s


def _settle(pid: int, baseline: float, slack: float, timeout: float = 30.0) -> float:
    deadline = time.monotonic() + timeout
    while True:
        now = _rss(pid)
        if now <= baseline + slack or time.monotonic() > deadline:
            return now
        time.sleep(0.5)


def test_clients_that_never_read_cost_bounded_memory(fault_run, token):
    run = fault_run()
    run.write_config(FLOOD % {"numbered": NUMBERED})
    run.up()
    run.wait_event(lambda e: e["kind"] == "started" and e["component"] == "flood", what="flood started")
    sock = run.run_dir / "rlsup.sock"
    sup = run.pid
    copy = Path(run.tmp) / "flood.copy"
    deadline = time.monotonic() + 60
    while not copy.exists() or copy.stat().st_size < 20_000 * 73:  # the ring (10,000 lines) fills
        assert time.monotonic() < deadline, "the flood never wrote 20,000 lines"
        time.sleep(0.1)
    time.sleep(1.0)  # and the daemon reaches its working size
    baseline = _rss(sup)
    sampler = Sampler(sup)
    try:
        # 1. Snapshot requests, each for the most lines there are, and no reply is ever read.
        greedy = _stuck_client(sock)
        greedy.sendall(protocol.encode({"id": 0, "op": "hello", "version": protocol.VERSION, "client": "greedy"}))
        greedy.settimeout(10)
        sent = 0
        try:
            for i in range(1, SNAPSHOTS + 1):
                greedy.sendall(protocol.encode({"id": i, "op": "snapshot", "lines": 100_000}))
                sent = i
        except (TimeoutError, OSError):
            pass  # the daemon stopped reading our requests: back-pressure, as it should
        time.sleep(2.0)  # the daemon reads what it will of them (the sampler sees the peak)
        greedy_peak = sampler.peak - baseline
        assert run.status(timeout=30)["components"]["flood"]["state"] == "running"
        greedy.close()
        after_greedy = _settle(sup, baseline, 20)

        # 2. A thousand subscribers that never read, while the flood goes on, and one that reads.
        reader = Subscriber(sock)
        sampler.reset()
        stuck = []
        for i in range(SUBSCRIBERS):
            s = _stuck_client(sock)
            s.sendall(protocol.encode({"id": 1, "op": "hello", "version": protocol.VERSION, "client": f"s{i}"})
                      + protocol.encode({"id": 2, "op": "subscribe", "lines": 0}))
            stuck.append(s)
        time.sleep(8.0)  # the daemon's fan-out to a thousand clients takes a while to fill each one's share
        # The reading client is served all the while (polled: on shared cores the fan-out is slower).
        deadline = time.monotonic() + 60
        while len(reader.by_seq.get("flood") or {}) <= 10_000:
            assert time.monotonic() < deadline, \
                f"the reading subscriber got only {len(reader.by_seq.get('flood') or {})} lines"
            time.sleep(0.2)
        subs_peak = sampler.peak - baseline
        st = run.status(timeout=30)  # a client that reads is still served
        assert st["components"]["flood"]["state"] == "running"
        for s in stuck:
            s.close()
        # The memory comes back while a client stays (a TUI left open), not only once all have gone.
        after_subs = _settle(sup, baseline, 30)
        reader.close()
    finally:
        sampler.stop()
    given_up = (run.run_dir / "supervisor.log").read_text().count("disconnecting it")
    # The reading client was served throughout: every line it was sent is in order, and what it
    # was not sent it was told about (a gap it can refill), nothing silently missing.
    got = reader.by_seq.get("flood") or {}
    told = set()
    for _c, a, b in reader.gaps:
        told.update(range(a, b))
    silent = [q for q in range(min(got), max(got)) if q not in got and q not in told]
    assert not silent, f"{len(silent)} lines neither sent nor reported as a gap"
    assert not reader.dups
    figure("client_memory", baseline_mb=round(baseline), snapshot_requests_sent=sent,
           snapshot_peak_growth_mb=round(greedy_peak), after_snapshot_client_mb=round(after_greedy),
           subscribers=SUBSCRIBERS, subscribers_peak_growth_mb=round(subs_peak),
           after_subscribers_left_mb=round(after_subs), stuck_clients_disconnected=given_up,
           reading_client_lines=len(got), reading_client_reconnects=sum(x == "attached" for x, _ in reader.statuses) - 1)
    assert greedy_peak < 100, f"one client's unread snapshots grew the daemon by {greedy_peak:.0f} MB"
    assert subs_peak < 400, f"{SUBSCRIBERS} unread subscribers grew the daemon by {subs_peak:.0f} MB"
    assert after_greedy <= baseline + 20 and after_subs <= baseline + 30, (baseline, after_greedy, after_subs)
    (Path(run.tmp) / "enough").touch()
    run.wait_event(lambda e: e["kind"] == "completed" and e["component"] == "flood", what="flood completed")
    assert_no_lost_line(run.run_dir, "flood", Path(run.tmp) / "flood.copy")
    journal(run.run_dir)
    assert run.down().returncode == 0
    assert_no_orphans(token, run.run_dir)
