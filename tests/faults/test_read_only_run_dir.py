"""Issue 43 item 1: the run dir's file system turns read-only (or fails with EIO) mid-run.

The demo stack plus a component flooding numbered lines runs in ``-d`` mode with its run dir on a
loop-mounted ext4 (``errors=remount-ro``). Mid-run the file system is made read-only the way ext4 does it
on an error (``mount -o remount,abort``: the kernel's emergency read-only, open files and all; a plain
``remount,ro`` is refused while files are open for writing) or made to fail every operation with EIO
(ext4's shutdown ioctl, what a lost disk does). Then:

- ``rlsup status`` answers, with a run-level ``disk_unwritable`` flag that says what happened and what to
  do; it is true: every component it calls running or starting has a live process (the trainer and the
  orchestrator die of the disk; their exits are read from the kernel, as the monitors cannot record them);
- the flooding component is not blocked: its own copy (on another disk) grows by far more than the pipe
  to its monitor holds;
- ``restart`` of the inference server goes through (nothing stays in ``stopping``), ``stop`` of the flood
  ends it;
- ``rlsup down`` (read-only) or SIGTERM to the daemon (EIO) ends the run, and nothing of it is left: no
  component, monitor, zygote or supervisor.

Skipped, saying why, where a loop device cannot be mounted (not root, no mkfs.ext4, no loop devices):
.ci/run runs as root with e2fsprogs and util-linux installed.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from rlsup.supervisor.monitor.shim import PIPE_SIZE
from tests.conftest import free_port
from tests.faults import harness
from tests.faults.harness import LIVENESS_S, alive, assert_no_orphans

fault_run, token, loop_ext4 = harness.fault_run, harness.token, harness.loop_ext4
EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2


def _read_only(mnt: Path) -> None:
    r = subprocess.run(["mount", "-o", "remount,abort", str(mnt)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with pytest.raises(OSError) as e:
        (mnt / "probe").write_text("x")
    assert e.value.errno == errno.EROFS


def _failing(mnt: Path) -> None:
    fd = os.open(mnt, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
    finally:
        os.close(fd)
    with pytest.raises(OSError) as e:
        (mnt / "probe").write_text("x")
    assert e.value.errno == errno.EIO


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _true(st: dict) -> bool:
    """Every component status calls running or starting has a live process."""
    return all(alive(c["pid"]) for c in st["components"].values()
               if c["state"] in ("running", "starting") and c.get("pid"))


@pytest.mark.parametrize("fault", ["read-only", "EIO"])
def test_a_run_dir_that_turns_unwritable_is_survived_and_ended(fault_run, token, loop_ext4, fault):
    run = fault_run(run_dir=loop_ext4 / "run", env={"RLSUP_DEMO_PORT": str(free_port()),
                                                     "RLSUP_DEMO_STEPS": "100000"})
    run.write_config(harness.demo_with_flood(run.tmp))
    run.up("--skip-checks")  # preflight would refuse: 0.2 GB free
    run.wait_status(lambda s: (s["components"]["trainer"].get("step") or 0) >= 2
                    and s["components"]["flood"]["state"] == "running", what="the demo training, the flood running")
    pid = run.pid

    (_read_only if fault == "read-only" else _failing)(loop_ext4)
    copy = run.tmp / "flood.copy"
    at_fault = _size(copy)
    word = "read-only" if fault == "read-only" else "EIO"
    st = run.wait_status(lambda s: any(f["type"] == "disk_unwritable" and word in f["message"]
                                       for f in s["run"].get("flags") or []), what="the disk_unwritable flag")
    flag = next(f for f in st["run"]["flags"] if f["type"] == "disk_unwritable")
    assert "rlsup down" in flag["action"] and "Remount" in flag["action"], flag

    # The orchestrator (and the trainer, unless it waits for rollouts) die of the disk: status says so (their
    # exits read from the kernel).
    run.wait_status(lambda s: all(s["components"][n]["state"] not in ("running", "starting")
                                  or alive(s["components"][n]["pid"]) for n in ("trainer", "orchestrator"))
                    and any((s["components"][n]["restarts"] or 0) >= 1 for n in ("trainer", "orchestrator")),
                    what="the exit of the trainer or the orchestrator")
    assert _true(run.status())
    # The flood is not held up by its monitor: it writes on (to its own copy, elsewhere).
    deadline = time.monotonic() + LIVENESS_S
    while _size(copy) - at_fault < 4 * PIPE_SIZE:
        assert time.monotonic() < deadline, f"the flood was blocked: {_size(copy) - at_fault} bytes since the fault"
        time.sleep(0.2)

    r = run.cli("restart", "inference")
    assert r.returncode == 0, r.stderr
    run.wait_status(lambda s: s["components"]["inference"]["state"] != "stopping"
                    and (s["components"]["inference"]["restarts"] or 0) >= 1, what="inference restarted")
    flood_pid = run.status()["components"]["flood"]["pid"]
    r = run.cli("stop", "flood")
    assert r.returncode == 0, r.stderr
    run.wait_status(lambda s: s["components"]["flood"]["state"] == "stopped", what="flood stopped")
    assert not alive(flood_pid)
    assert _true(run.status())

    if fault == "read-only":
        r = run.down(timeout=LIVENESS_S * 2)
        assert r.returncode == 0 and "no process of the run is left" in r.stdout, (r.stdout, r.stderr)
    else:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + LIVENESS_S * 2
        while alive(pid):
            assert time.monotonic() < deadline, "the supervisor did not obey SIGTERM"
            time.sleep(0.2)
    assert_no_orphans(token, run.run_dir)
    if fault == "read-only":  # (a failing disk reads nothing back)
        journal = [json.loads(x) for x in (run.run_dir / "events.jsonl").read_text().splitlines()]
        assert journal and all(isinstance(e.get("seq"), int) for e in journal)  # whole lines, up to the fault
