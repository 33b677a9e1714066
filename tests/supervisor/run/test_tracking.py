"""What holds a run's processes: how long its monitors rest between small reads (decided once a run), and which
ended children the supervisor reaps."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from rlsup.supervisor.monitor import shim
from rlsup.supervisor.run.tracking import Tracking


def test_the_monitors_rest_by_the_runs_component_count_and_the_supervisors_cpus(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert Tracking(tmp_path, 3).monitor_rest_s == shim.REST_S  # an RL stack on 2 cores
    assert Tracking(tmp_path, 200).monitor_rest_s == shim.rest_for(200, 2) > shim.REST_S
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert Tracking(tmp_path, 200).monitor_rest_s == shim.REST_S  # the same run on 16 cores


# In a process of its own: reaping takes children of the process that calls it, and pytest's may have its own.
_REAP = textwrap.dedent("""
    import os, subprocess, threading
    from rlsup.supervisor.run.tracking import reap_held

    def ended(pid):  # exited, not yet reaped
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT) is not None

    mine = subprocess.Popen(["sh", "-c", "exit 0"])  # the main thread's child: an orphan re-parented to us, say
    out, zombie, go = {}, threading.Event(), threading.Event()

    def notify():  # a worker thread's command that fails, as a notify command or py-spy would
        p = subprocess.Popen(["sh", "-c", "exit 3"])
        while not ended(p.pid):
            pass
        out["pid"] = p.pid
        zombie.set()
        go.wait()
        out["rc"] = p.wait()

    t = threading.Thread(target=notify)
    t.start()
    zombie.wait()
    while not ended(mine.pid):
        pass
    reap_held()  # the supervisor's tick
    go.set()
    t.join()
    try:
        os.waitpid(mine.pid, os.WNOHANG)
        print("main thread's child not reaped")
    except ChildProcessError:
        pass
    print("worker's command exited", out["rc"])
""")


def test_reaping_takes_the_main_threads_ended_children_and_leaves_a_worker_threads_to_it():
    """A failing notify command must read as failed: a reap by waitpid(-1) took its status first, and the
    thread that ran it read 0."""
    r = subprocess.run([sys.executable, "-c", _REAP], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["worker's command exited 3"], r.stdout
