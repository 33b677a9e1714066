"""What a signal to the supervisor means (docs/contract.md, "Preemption"): SIGTERM the platform taking the
machine (a preemption: checkpoints first, the run ends ``preempted``); SIGINT a person's Ctrl-C at a terminal
(a stop), a preemption without one; SIGHUP a stop (the daemon ignores it); SIGUSR1 a notice that the machine
will be taken (Slurm's ``--signal=B:USR1@N``). A second SIGTERM, SIGINT or SIGHUP kills what is left at once.
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
