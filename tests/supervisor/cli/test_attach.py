"""`rlsup attach` / the `rlsup up` view: what it does beside showing the run."""

from __future__ import annotations

import subprocess
import sys

from rlsup.supervisor.cli.attach import _forward_term
from rlsup.supervisor.rundir.layout import RunPaths

HOLD = """
import fcntl, json, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, json.dumps({"pid": os.getpid()}).encode())
print("held", flush=True)
time.sleep(60)
"""


def _holder(lock) -> subprocess.Popen:
    """A process that holds the run dir's lock as a supervisor does, its pid written in it."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def test_a_sigterm_goes_to_the_supervisor_that_holds_the_run_when_it_comes(tmp_path, capsys):
    """`rlsup up` as a container's command passes the platform's SIGTERM on to the supervisor. The view outlives
    a supervisor (taken over after a kill -9, or ended and then resumed from another shell): the SIGTERM goes to
    the one that holds the run when it comes, not to the pid the view saw when it opened."""
    paths = RunPaths(tmp_path)
    first = _holder(paths.lock)
    forward = _forward_term(tmp_path)
    first.kill()
    first.wait(10)
    forward()  # nobody holds the run: nothing is signalled (the old pid may be another process's by now)
    assert "no supervisor holds the run" in capsys.readouterr().err
    second = _holder(paths.lock)
    try:
        forward()
        assert second.wait(10) == -15
        assert f"SIGTERM passed on to the supervisor (pid {second.pid})" in capsys.readouterr().err
    finally:
        second.kill()
        second.wait(10)
