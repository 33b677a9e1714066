"""Whether a process would hear a signal (a preemption's checkpoint request): a handler or SIG_IGN, read from its
/proc status, against the signal's default action."""

from __future__ import annotations

import signal
import subprocess
import sys

from rlsup.supervisor.monitor.process import handles_signal

# SIGHUP set back to its default: under `nohup` (CI's `setsid nohup .ci/run`) the child inherits it ignored
_CHILD = ("import signal, sys, time; signal.signal(signal.SIGUSR1, lambda *a: None); "
          "signal.signal(signal.SIGUSR2, signal.SIG_IGN); signal.signal(signal.SIGHUP, signal.SIG_DFL); "
          "print('ready', flush=True); time.sleep(60)")


def test_a_handler_or_ignoring_is_seen_and_a_default_action_is_not():
    p = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        assert handles_signal(p.pid, signal.SIGUSR1) is True
        assert handles_signal(p.pid, signal.SIGUSR2) is True
        assert handles_signal(p.pid, signal.SIGHUP) is False  # the default: it would end the process
    finally:
        p.kill()
        p.wait()
    assert handles_signal(p.pid, signal.SIGUSR1) is None  # gone
