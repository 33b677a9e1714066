"""Fault 7 of issue 16: scale. ``down`` with hundreds of ``sleep`` components, and hundreds of
``/bin/true`` components starting and ending; the times are reported (``pytest -s`` prints them),
not asserted: the tests check that everything starts, is journaled and ends, and nothing is left.

Sizes: 300 sleepers and 300 ``true`` components by default, to keep the fault matrix within a few
minutes on 2 shared cores (``RLSUP_FAULT_SLEEPERS=1000``, ``RLSUP_FAULT_TRUES=10000`` for the
issue's sizes).
"""

from __future__ import annotations

import os
import time

import psutil

from tests.faults import harness
from tests.faults.harness import LIVENESS_S, assert_no_orphans, figure, journal

# The fault matrix's fixtures (not in a conftest.py here: it would shadow tests/conftest.py for
# the `from conftest import ...` of other test modules).
fault_run, token = harness.fault_run, harness.token

SLEEPERS = int(os.environ.get("RLSUP_FAULT_SLEEPERS", "300"))
TRUES = int(os.environ.get("RLSUP_FAULT_TRUES", "300"))


def _config(name: str, n: int, command: str, extra: str = "") -> str:
    return f"name: {name}\ncomponents:\n" + "".join(
        f"  c{i:05d}:\n    command: {command}\n{extra}" for i in range(n))


def _rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def test_down_with_many_sleepers(fault_run, token):
    run = fault_run(env={"RLSUP_CGROUPS": os.environ.get("RLSUP_CGROUPS", "auto")})
    run.write_config(_config("sleepers", SLEEPERS, '["sleep", "100000"]',
                             "    stop: {signal: SIGTERM, timeout: 10}\n"))
    t0 = time.monotonic()
    run.up("--skip-checks", timeout=120)
    up_s = time.monotonic() - t0
    run.wait_status(lambda s: sum(c["state"] == "running" for c in s["components"].values()) == SLEEPERS,
                    timeout=300, what="every sleeper running")
    all_up_s = time.monotonic() - t0
    sup = run.pid
    rss = _rss_mb(sup)
    t1 = time.monotonic()
    st = run.status()
    status_s = time.monotonic() - t1
    assert len(st["components"]) == SLEEPERS
    t1 = time.monotonic()
    down = run.down(timeout=300)
    down_s = time.monotonic() - t1
    assert down.returncode == 0, (down.stdout[-2000:], down.stderr[-2000:])
    assert "no process of the run is left" in down.stdout
    assert_no_orphans(token, run.run_dir)
    events = journal(run.run_dir)
    assert sum(e["kind"] == "stopped" for e in events) == SLEEPERS
    figure("scale_sleepers", components=SLEEPERS, tracking=events[0]["tracking"][:20], up_d_s=round(up_s, 1),
           all_running_s=round(all_up_s, 1), status_s=round(status_s, 2), down_s=round(down_s, 1),
           supervisor_rss_mb=round(rss))


def test_many_true_components_start_and_end(fault_run, token):
    run = fault_run()
    run.write_config(_config("trues", TRUES, '["true"]', "    restart: {policy: never}\n"))
    t0 = time.monotonic()
    proc = run.headless()
    out, _ = proc.communicate(timeout=max(LIVENESS_S, TRUES * 0.2))
    took = time.monotonic() - t0
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert "Too many open files" not in out
    events = journal(run.run_dir)
    assert sum(e["kind"] == "completed" for e in events) == TRUES
    assert not [e for e in events if e["kind"] in ("spawn_failed", "fatal")]
    assert_no_orphans(token, run.run_dir)
    figure("scale_true", components=TRUES, run_s=round(took, 1), per_component_ms=round(took / TRUES * 1000, 1))
