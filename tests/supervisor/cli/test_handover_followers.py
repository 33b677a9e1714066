"""A follower (`rlsup events -f`, `rlsup attach --plain`) started while `rlsup restart-supervisor` hands the run
over: the old supervisor has exited, the new one does not hold the run dir yet. It waits for the successor
instead of saying the live run has no supervisor and stopping (seen at a load average of 8: the test of
reconnecting clients started its followers late, inside the first hand-over). A hand-over long past is a
stranded run: said at once, as before."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from rlsup.supervisor.rundir.layout import RunLock, RunPaths
from tests.conftest import PY, cli_env, wait_for

NO_SUPERVISOR = ("no supervisor owns this run", "this run has ")


def _run_dir(tmp_path, exited_ago: float) -> RunPaths:
    paths = RunPaths(tmp_path / "run")
    paths.create()
    now = time.time()
    events = [
        {"seq": 1, "ts": now - exited_ago - 5, "kind": "run_started", "component": None, "name": "r", "pid": 1,
         "run_dir": str(paths.root), "components": ["c"]},
        {"seq": 2, "ts": now - exited_ago, "kind": "supervisor_exited", "component": None,
         "reason": "handed over by user (rlsup restart-supervisor)", "monitors": [2]},
    ]
    paths.events.write_text("".join(json.dumps(e) + "\n" for e in events))
    return paths


def _follower(paths: RunPaths, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([PY, "-m", "rlsup.supervisor.cli", *args, "--run-dir", str(paths.root)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cli_env(),
                            stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args", [("events", "-f"), ("attach", "--plain")])
def test_a_follower_started_during_a_handover_waits_for_the_successor(tmp_path, args):
    paths = _run_dir(tmp_path, exited_ago=1.0)
    proc = _follower(paths, *args)
    lock = RunLock(paths)
    try:
        time.sleep(2.0)  # the successor takes a moment (its Python start, the take-over)
        assert proc.poll() is None, proc.communicate()[0]
        lock.acquire({"pid": 0})
        time.sleep(1.0)  # it found the successor and dials it (no socket here: it keeps redialling)
        assert proc.poll() is None, proc.communicate()[0]
    finally:
        proc.kill()
        out = proc.communicate()[0]
        lock.release()
    assert not any(s in out for s in NO_SUPERVISOR), out


@pytest.mark.parametrize("args", [("events", "-f"), ("attach", "--plain")])
def test_a_handover_long_past_is_a_run_without_a_supervisor(tmp_path, args):
    paths = _run_dir(tmp_path, exited_ago=600.0)
    proc = _follower(paths, *args)
    try:
        wait_for(lambda: proc.poll() is not None, 60, what="the follower to end")
    finally:
        proc.kill()
    out = proc.communicate()[0]
    assert any(s in out for s in NO_SUPERVISOR), out
