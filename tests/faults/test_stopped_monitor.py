"""Issue 43 item 5: a stopped (or wedged) monitor is flagged within seconds, and ``down`` still ends it.

The demo stack plus a component flooding numbered lines runs in ``-d`` mode; the flood's monitor is
stopped with SIGSTOP. The flood then blocks as soon as the pipe to its monitor is full; nothing on disk
says why. rlsup sees the monitor's state: a ``monitor_stuck`` flag on the component, saying what
happened and what to do (``kill -CONT PID``), cleared once the monitor runs again. Stopped again, ``rlsup
down`` still ends everything (the component, and the monitor, which gets SIGCONT before it is told to
finish): exit 0, "no process of the run is left", and nothing of the run is alive.
"""

from __future__ import annotations

import os
import signal
import time

from tests.conftest import free_port
from tests.faults import harness
from tests.faults.harness import LIVENESS_S, alive, assert_no_orphans

fault_run, token = harness.fault_run, harness.token


def _stuck(st: dict) -> list[dict]:
    return [f for f in st["components"]["flood"]["flags"] if f["type"] == "monitor_stuck"]


def test_a_stopped_monitor_is_flagged_and_down_still_ends_it(fault_run, token):
    run = fault_run(env={"RLSUP_DEMO_PORT": str(free_port()), "RLSUP_DEMO_STEPS": "100000"})
    run.write_config(harness.demo_with_flood(run.tmp))
    run.up("--skip-checks")
    st = run.wait_status(lambda s: s["components"]["flood"]["state"] == "running"
                         and (s["components"]["trainer"].get("step") or 0) >= 1, what="the demo and the flood running")
    monitor, flood = st["components"]["flood"]["monitor_pid"], st["components"]["flood"]["pid"]

    os.kill(monitor, signal.SIGSTOP)
    t0 = time.monotonic()
    st = run.wait_status(lambda s: bool(_stuck(s)), what="the monitor_stuck flag")
    flag = _stuck(st)[0]
    harness.figure("stopped monitor flagged after", seconds=round(time.monotonic() - t0, 1))
    assert f"pid {monitor}" in flag["message"] and "stopped" in flag["message"], flag
    assert f"kill -CONT {monitor}" in flag["action"] and "rlsup down" in flag["action"], flag
    copy = run.tmp / "flood.copy"
    size = copy.stat().st_size
    time.sleep(2)
    assert copy.stat().st_size - size < (2 << 20), "the flood went on with its monitor stopped?"  # it blocks

    os.kill(monitor, signal.SIGCONT)
    run.wait_status(lambda s: not _stuck(s), what="the flag cleared")
    os.kill(monitor, signal.SIGSTOP)
    run.wait_status(lambda s: bool(_stuck(s)), what="the flag again")

    r = run.down(timeout=LIVENESS_S * 2)
    assert r.returncode == 0 and "no process of the run is left" in r.stdout, (r.stdout, r.stderr)
    assert not alive(flood) and not alive(monitor)
    assert_no_orphans(token, run.run_dir)
