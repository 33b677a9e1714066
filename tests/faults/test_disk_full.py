"""Fault 1 of issue 16: a full disk never wedges the daemon and never tears the journal.

The run dir lives on a 2 MiB tmpfs (skipped where mounting is refused) with a component flooding
it. The component is not blocked while the disk is full; when space comes back its log says how
much it lost. While the disk is full,
``rlsup status``, ``restart`` and ``stop`` work and nothing hangs in ``stopping``; a new attempt
that cannot even create its monitor record waits in backoff, saying why, and starts once there is
room. Once space is freed the journal catches up (every event, in order, whole lines), and
``rlsup down`` works and does not hang with the disk full again.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from rlsup.supervisor.monitor.shim import PIPE_SIZE
from tests.faults import harness
from tests.faults.harness import (
    LIVENESS_S,
    NUMBERED,
    assert_no_orphans,
    journal,
)

# The fault matrix's fixtures (not in a conftest.py here: it would shadow tests/conftest.py for
# the `from conftest import ...` of other test modules).
fault_run, small_disk, token = harness.fault_run, harness.small_disk, harness.token

CONFIG = """
name: full
logs: {max_bytes: 4000000, backups: 2}
components:
  flood:
    command: ["{py}", "%(numbered)s", "--copy", "{tmp}/flood.copy", "--rate", "50000", "--steps", "500"]
    progress: {pattern: 'Step (?P<step>\\d+)/'}
    stop: {signal: SIGTERM, timeout: 5}
    restart: {backoff: {initial: 0.5, max: 1}, max_restarts: 1000}
  quiet:
    command: ["sleep", "100000"]
    restart: {backoff: {initial: 0.5, max: 1}, max_restarts: 1000}
"""


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _wait_full(disk: Path, what: str) -> None:
    deadline = time.monotonic() + LIVENESS_S
    while _free(disk) > 8192:
        assert time.monotonic() < deadline, f"the disk never filled ({what}): {_free(disk)} bytes free"
        time.sleep(0.1)
    time.sleep(1.0)  # let every writer hit the wall


def test_full_disk_restart_and_down_work_and_the_journal_stays_whole(fault_run, token, small_disk):
    ballast = [small_disk / f"ballast{i}" for i in range(2)]
    for b in ballast:
        b.write_bytes(b"\0" * (192 << 10))
    run = fault_run(run_dir=small_disk / "run")
    run.write_config(CONFIG % {"numbered": NUMBERED})
    r = run.up(check=False)
    assert r.returncode == 1 and "free on the file system" in r.stderr, r.stderr  # preflight saw it coming
    run.up("--skip-checks")
    run.wait_event(lambda e: e["kind"] == "started" and e["component"] == "flood", what="flood started")
    _wait_full(small_disk, "first flood")

    # Space comes back while the flood goes on: the log says what was lost.
    ballast[0].unlink()
    deadline = time.monotonic() + LIVENESS_S
    logs = [p for p in (run.run_dir / "logs").glob("flood.log*")]
    while not any(b"bytes of output were lost" in p.read_bytes() for p in logs if p.exists()):
        assert time.monotonic() < deadline, "no marker of the lost output once the disk had room"
        time.sleep(0.2)
        logs = [p for p in (run.run_dir / "logs").glob("flood.log*")]
    _wait_full(small_disk, "second flood")

    # The component is not blocked by the full disk: it goes on writing (its own copy, on another
    # disk, grows by more than the pipe to its monitor holds; a monitor waiting for the disk would
    # have stopped it once the pipe was full).
    copy = Path(run.tmp) / "flood.copy"
    size = copy.stat().st_size
    deadline = time.monotonic() + LIVENESS_S
    while copy.stat().st_size < size + 2 * PIPE_SIZE:
        assert time.monotonic() < deadline, "the component stopped writing while the disk was full"
        time.sleep(0.1)

    # While full: the daemon answers; a restart goes through (the stop signal is sent, the old
    # attempt ends) and the new attempt runs, or waits in backoff because the disk refused even its
    # monitor record, saying so. Nothing stays in `stopping`.
    st = run.status(timeout=30)
    assert st["components"]["flood"]["state"] == "running"
    assert "disk_full" in str(st["components"]["flood"]["flags"]), st["components"]["flood"]["flags"]
    for name in ("flood", "quiet"):
        r = run.cli("restart", name, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        st = run.wait_status(lambda s, n=name: s["components"][n]["attempt"] >= 2
                             and s["components"][n]["state"] in ("running", "backoff"), timeout=30,
                             what=f"{name} restarted (or waiting to)")["components"][name]
        if st["state"] == "backoff":
            assert "No space left" in json.dumps(st["last_exit"]), st["last_exit"]

    # Stop the flood on a full disk, then free space: every pending event reaches the journal.
    r = run.cli("stop", "flood", timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    run.wait_status(lambda s: s["components"]["flood"]["state"] == "stopped", timeout=30, what="flood stopped")
    ballast[1].unlink()
    quiet = run.wait_status(lambda s: s["components"]["quiet"]["state"] == "running", timeout=30,
                            what="quiet running once there is room")["components"]["quiet"]
    deadline = time.monotonic() + 30
    while sum(e["kind"] == "stopped" and e["component"] == "flood" for e in run.events()) < 2:  # restart, stop
        assert time.monotonic() < deadline, "the journal did not catch up after space was freed"
        time.sleep(0.1)
    events = journal(run.run_dir)
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), "events were lost or repeated while the disk was full"
    kinds = [(e["kind"], e.get("component"), e.get("attempt")) for e in events]
    assert ("started", "quiet", quiet["attempt"]) in kinds

    # Full again, then down: it ends everything and does not hang.
    r = run.cli("start", "flood", timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    _wait_full(small_disk, "third flood")
    down = run.down(timeout=LIVENESS_S)  # does not hang
    assert down.returncode == 0, down.stdout + down.stderr
    assert "no process of the run is left" in down.stdout, down.stdout
    assert_no_orphans(token, run.run_dir)
    journal(run.run_dir)  # whatever the full disk let through is whole, line by line
    # Afterwards the ended run still reads, and with space back a new run starts in the same place.
    for p in (run.run_dir / "logs").glob("flood.log*"):
        p.unlink()
    r = run.cli("status", timeout=30)
    assert r.returncode == 0, r.stderr
    r = run.up("--fresh", "--skip-checks", check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    run.wait_event(lambda e: e["kind"] == "started" and e["component"] == "quiet", what="the new run")
    assert run.down().returncode == 0
    assert_no_orphans(token, run.run_dir)
