"""Issue 26 item 5: a 100% full disk never stops a component from starting.

The run dir lives on a 2 MiB tmpfs that a file then fills to the last byte. rlsup's own records
were reserved in advance (spare monitor-record slots, blocks allocated past the end of the journal,
two state.json slots), so sixteen restarts in a row each start the component, which ends up running;
while a second component floods the same disk (taking every block that comes free); the disk_full
flag stays raised while the disk is full (a new attempt does not clear it), and once
space is back the flag clears saying how many bytes of output were lost, and the log says it too.
``rlsup down`` on the full disk writes every event of the shutdown, ``run_ended`` included, and the
journal holds no torn record.

As a user: ``unshare --user --map-root-user --mount python -m pytest tests/faults/test_disk_full_restarts.py``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.faults import harness
from tests.faults.harness import LIVENESS_S, assert_no_orphans, journal

fault_run, small_disk, token = harness.fault_run, harness.small_disk, harness.token

CONFIG = """
name: fullrestart
components:
  ticker:
    command: ["sh", "-c", "while true; do echo tick tick tick tick tick tick tick tick tick tick tick tick tick tick; sleep 0.05; done"]
    stop: {signal: SIGTERM, timeout: 5}
    restart: {backoff: {initial: 0.2, max: 0.5}, max_restarts: 1000}
  flood:  # a runaway writer: takes every block that comes free at once
    command: ["{py}", "-c", "import sys, time; [(sys.stdout.write('x' * 4095 + chr(10)), sys.stdout.flush(), time.sleep(0.005)) for _ in iter(int, 1)]"]
    restart: {backoff: {initial: 0.2, max: 0.5}, max_restarts: 1000}
"""

RESTARTS = 16


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _fill(disk: Path) -> Path:
    """Fill the disk to the last byte (what a runaway checkpoint writer does)."""
    fill = disk / "fill"
    fd = os.open(fill, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 16, 4096, 1):
            while True:
                try:
                    os.write(fd, b"x" * size)
                except OSError:
                    break
    finally:
        os.close(fd)
    assert _free(disk) == 0
    return fill


# Twenty restarts and a shutdown, each waited on: 23 s on 2 idle cores, over the suite's 120 s at a load
# average of 10. A ceiling for a wedge, not a bound on speed.
@pytest.mark.timeout(600)
def test_sixteen_restarts_on_a_full_disk_then_down(fault_run, token, small_disk):
    run = fault_run(run_dir=small_disk / "run")
    run.write_config(CONFIG)
    run.up("--skip-checks")
    run.wait_event(lambda e: e["kind"] == "started" and e["component"] == "ticker", what="ticker started")
    fill = _fill(small_disk)
    run.wait_status(lambda s: "disk_full" in str(s["components"]["ticker"]["flags"]), what="disk_full raised")
    # The run's switch to its reserved state slots replaced a state.json that was a file of its own, freeing its
    # pages for whoever wrote next (the flood, or the ticker: then "log writable again", which is true). The
    # fill takes whatever is left of them, so that from here on nothing on the disk comes free.
    wait_for(lambda: any(os.path.samefile(run.run_dir / "state.json", run.run_dir / f".state.json.slot{i}")
                         for i in (0, 1) if (run.run_dir / f".state.json.slot{i}").exists()), 30,
             what="state.json written into its reserved slot")
    _fill(small_disk)
    run.wait_status(lambda s: "disk_full" in str(s["components"]["ticker"]["flags"]), what="disk_full raised")
    seq_full = max(e["seq"] for e in run.events())

    for i in range(RESTARTS):
        r = run.cli("restart", "ticker", timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        st = run.wait_status(lambda s, a=i + 2: s["components"]["ticker"]["attempt"] >= a
                             and s["components"]["ticker"]["state"] == "running", timeout=30,
                             what=f"restart {i + 1} of {RESTARTS} running")["components"]["ticker"]
        assert st["attempt"] == i + 2, st
        assert _free(small_disk) == 0  # still full: the reserve did the work, not freed space
    # The flag was not cleared by a new attempt while the disk stayed full.
    # (The ticker's log hit the wall, so its last block is full: none of its writes can succeed.)
    cleared = [e for e in run.events() if e["seq"] > seq_full and e["kind"] == "flag_cleared"
               and e["component"] == "ticker"]
    assert not cleared, cleared
    # state.json followed, in place, on the full disk.
    deadline = time.monotonic() + 10
    while json.loads((run.run_dir / "state.json").read_text())["components"]["ticker"]["attempt"] != RESTARTS + 1:
        assert time.monotonic() < deadline, "state.json did not follow on the full disk"
        time.sleep(0.1)

    # Space comes back: the flag clears only now, saying what was lost, and the log says it too.
    fill.unlink()
    e = run.wait_event(lambda e: e["kind"] == "flag_cleared" and e["component"] == "ticker", since=seq_full,
                       what="disk_full cleared once there is room")
    lost = int(e["message"].split("; ")[1].split()[0])
    assert lost > 0, e
    log = b"".join(p.read_bytes() for p in (run.run_dir / "logs").glob("ticker.log*"))
    assert f"[rlsup: {lost} bytes of output were lost".encode() in log

    # Full again, then down: every event of the shutdown is in the journal, whole.
    _fill(small_disk)
    for i in range(4):  # events enough to fill the journal's last block: later ones need new blocks
        assert run.cli("restart", "ticker", timeout=30).returncode == 0
        run.wait_status(lambda s, a=i + 2: s["components"]["ticker"]["attempt"] >= a, timeout=30, what="restart")
    before = max(e["seq"] for e in run.events())
    down = run.down(timeout=LIVENESS_S)
    assert down.returncode == 0, down.stdout + down.stderr
    assert_no_orphans(token, run.run_dir)
    events = journal(run.run_dir)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "an event was lost or repeated"
    tail = [e["kind"] for e in events if e["seq"] > before]
    assert "stopping" in tail and "stopped" in tail and tail[-1] == "run_ended", tail
    deadline = time.monotonic() + 10
    while not json.loads((run.run_dir / "state.json").read_text())["run"].get("ended_at"):
        assert time.monotonic() < deadline, "state.json did not record the end of the run on the full disk"
        time.sleep(0.1)


def test_down_on_a_full_disk_writes_every_event(fault_run, token, small_disk):
    """``down`` with the run dir's disk full: stopping, stopped and run_ended all reach the journal."""
    run = fault_run(run_dir=small_disk / "run")
    run.write_config(CONFIG)
    run.up("--skip-checks")
    for name in ("ticker", "flood"):
        run.wait_event(lambda e, n=name: e["kind"] == "started" and e["component"] == n, what=f"{name} started")
    _fill(small_disk)
    for i in range(4):  # events enough to fill the journal's last block: later ones need new blocks
        assert run.cli("restart", "ticker", timeout=30).returncode == 0
        run.wait_status(lambda s, a=i + 2: s["components"]["ticker"]["attempt"] >= a, timeout=30, what="restart")
    before = max(e["seq"] for e in run.events())
    down = run.down(timeout=LIVENESS_S)
    assert down.returncode == 0, down.stdout + down.stderr
    assert_no_orphans(token, run.run_dir)
    events = journal(run.run_dir)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "an event was lost or repeated"
    tail = [(e["kind"], e.get("component")) for e in events if e["seq"] > before]
    assert tail and tail[-1][0] == "run_ended", tail
    for name in ("ticker", "flood"):
        assert ("stopped", name) in tail, tail


def test_a_new_supervisor_adopts_the_run_on_a_full_disk(fault_run, token, small_disk):
    """The supervisor is killed; the disk is full when the next one takes the run dir over: it adopts
    the running components (same pids), and restart and down work."""
    import signal

    run = fault_run(run_dir=small_disk / "run")
    run.write_config(CONFIG)
    run.up("--skip-checks")
    for name in ("ticker", "flood"):
        run.wait_event(lambda e, n=name: e["kind"] == "started" and e["component"] == n, what=f"{name} started")
    pids = {n: c["pid"] for n, c in run.status()["components"].items()}
    os.kill(run.pid, signal.SIGKILL)
    _fill(small_disk)
    r = run.up("--skip-checks", check=False)
    assert r.returncode == 0, r.stdout + r.stderr + run.daemon_log()
    st = run.wait_status(lambda s: all(c["state"] == "running" for c in s["components"].values()),
                         what="both adopted")
    assert {n: c["pid"] for n, c in st["components"].items()} == pids
    assert run.cli("restart", "ticker", timeout=30).returncode == 0
    run.wait_status(lambda s: s["components"]["ticker"]["attempt"] == 2 and s["components"]["ticker"]["state"]
                    == "running", what="ticker restarted after adoption")
    down = run.down(timeout=LIVENESS_S)
    assert down.returncode == 0, down.stdout + down.stderr
    assert_no_orphans(token, run.run_dir)
    events = journal(run.run_dir)
    assert [e["kind"] for e in events][-1] == "run_ended"
    assert sum(e["kind"] == "adopted" for e in events) == 2


WRITER = """
name: fullwriter
components:
  writer:  # writes its output files beside the run dir, as the demo's orchestrator writes rollouts
    command: ["sh", "-c", "sleep 1; while printf '%4096s\\n' wrote && head -c 4096 /dev/zero >> {disk}/rollouts; do sleep 0.05; done; echo 'OSError: [Errno 28] No space left on device' >&2; exit 1"]
    restart: {backoff: {initial: 0.2, max: 0.5}, max_restarts: 1000}
"""


def test_an_exit_on_a_full_disk_whose_output_was_lost_is_called_disk_full(fault_run, token, small_disk):
    """A component's own writes fail on a full disk and it exits 1, saying why on stderr; the same disk holds
    its log, so that line is lost. `rlsup why` names the full disk, not "no known failure" (the demo's
    orchestrator on a 30 MB run dir, walked by hand)."""
    run = fault_run(run_dir=small_disk / "run")
    run.write_config(WRITER.replace("{disk}", str(small_disk)))
    run.up("--skip-checks")
    run.wait_event(lambda e: e["kind"] == "started" and e["component"] == "writer", what="writer started")
    _fill(small_disk)
    e = run.wait_event(lambda e: e["kind"] == "exited" and e["component"] == "writer"
                       and e["diagnosis"]["category"] == "disk_full", what="an exit called disk_full")
    why = run.cli("why", "writer", "--attempt", str(e["attempt"]))
    assert why.returncode == 0, why.stdout + why.stderr
    if "No space left on device" in e["diagnosis"]["summary"]:  # a loaded machine: the line reached the log first
        assert "No space left on device" in why.stdout, why.stdout
    else:  # the line was lost with the log's writes: the full disk is named all the same
        assert "full disk" in e["diagnosis"]["summary"] and "ENOSPC" in e["diagnosis"]["summary"], e
        assert "on a full disk: its log could not be written (ENOSPC" in why.stdout, why.stdout
    assert "no known failure" not in why.stdout
    down = run.down(timeout=LIVENESS_S)  # the run may have ended already: disk_full twice is deterministic
    assert down.returncode == 0 or "has already ended" in down.stderr, down.stdout + down.stderr
    assert_no_orphans(token, run.run_dir)
