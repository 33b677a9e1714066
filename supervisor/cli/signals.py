"""What a signal to the supervisor means: a person stopping the run, or the platform taking the machine.

``rlsup down`` and the TUI's stop never signal the supervisor: they ask over the control socket. A signal
comes from outside, and rlsup reads it as (docs/contract.md, "Preemption"):

- **SIGTERM**: the platform is taking the machine (a spot VM's shutdown, a pod's eviction, ``docker stop``,
  Slurm's end of a job): a *preemption*. Each component with ``preempt:`` is asked to checkpoint first, and the
  run ends ``preempted``: ``rlsup up`` continues it without asking.
- **SIGINT** at a terminal (rlsup in the foreground process group of its controlling terminal): a person's
  Ctrl-C, a *stop*. A SIGINT without one (a container runtime whose stop signal is SIGINT) is a preemption.
- **SIGHUP** (``--headless`` at a terminal): the terminal went away, a stop. The daemon ignores it.
- **SIGUSR1**: a notice that the machine will be taken (Slurm's ``--signal=B:USR1@N`` before a job's time
  limit and, with ``preempt_send_user_signal``, at its preemption): a preemption. A repeated notice changes
  nothing.

A second SIGTERM, SIGINT or SIGHUP while the run stops kills what is left at once.
"""

from __future__ import annotations

import os
import signal as signal_mod
from typing import Literal

Meaning = Literal["stop", "preempt", "notice"]
HANDLED = (signal_mod.SIGINT, signal_mod.SIGTERM, signal_mod.SIGHUP, signal_mod.SIGUSR1)


def meaning(signum: int, *, at_terminal: bool) -> Meaning:
    """What ``signum`` asks of the run: a person's ``stop``, a ``preempt``ion, or a ``notice`` of one."""
    if signum == signal_mod.SIGUSR1:
        return "notice"
    if signum == signal_mod.SIGHUP or (signum == signal_mod.SIGINT and at_terminal):
        return "stop"
    return "preempt"


def at_terminal() -> bool:
    """Whether this process runs in the foreground of a terminal (on stdin): where a SIGINT is someone's Ctrl-C."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def preemption_reason(name: str) -> str:
    return f"{name} received: the platform is taking the machine (preemption)"
