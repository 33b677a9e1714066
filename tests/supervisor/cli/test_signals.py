"""What a signal to the supervisor means (cli/signals.py): a person's stop, or the platform taking the machine."""

from __future__ import annotations

import signal

from rlsup.supervisor.cli.signals import meaning


def test_sigterm_is_the_platform_and_ctrl_c_at_a_terminal_a_person():
    assert meaning(signal.SIGTERM, at_terminal=True) == "preempt"
    assert meaning(signal.SIGTERM, at_terminal=False) == "preempt"
    assert meaning(signal.SIGINT, at_terminal=True) == "stop"
    assert meaning(signal.SIGINT, at_terminal=False) == "preempt"  # a container runtime's stop signal
    assert meaning(signal.SIGHUP, at_terminal=False) == "stop"
    assert meaning(signal.SIGUSR1, at_terminal=False) == "notice"  # Slurm's --signal=B:USR1@N
