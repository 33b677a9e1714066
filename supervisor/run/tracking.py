"""What holds the run's processes: their monitors (and the zygote that starts them), the supervisor as their
subreaper, the run's cgroup (None: the subreaper alone), the open-file limit they get, how long their monitors
rest between reads, and when the run began, so that its last net (:mod:`~rlsup.supervisor.monitor.lastnet`)
ends whatever is left."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..monitor import lastnet, shim
from ..monitor.process import Cgroups, Monitors, raise_fd_limit


class Tracking:
    def __init__(self, root: Path, components: int) -> None:
        self.root = root
        # how long a monitor rests between small reads: many chatty monitors on few cores rest longer (their
        # wakeups would take the CPUs); the run's component count and this process's CPUs, once a run
        self.monitor_rest_s = shim.rest_for(components, len(os.sched_getaffinity(0)))
        self.monitors = Monitors(root)
        self.cgroups: Cgroups | None = None
        self.nofile: int | None = None  # the open-file limit components get (the supervisor raises its own)
        self.began = 0.0  # when the run began, in seconds since boot (the clock of /proc/PID/stat's start time)

    def take_hold(self) -> None:
        """The run begins: orphans of its processes come to the supervisor, which may open as many files as it
        can."""
        self.began = time.clock_gettime(time.CLOCK_BOOTTIME)
        shim.set_subreaper()
        self.nofile = raise_fd_limit()

    async def begin(self, loop: asyncio.AbstractEventLoop) -> str:
        """The run's cgroup, made (or none); how its processes are tracked, in words (``run_started.tracking``)."""
        self.cgroups = await loop.run_in_executor(None, Cgroups.for_run, self.root)
        return self.cgroups.describe()

    def last_net(self, unended: Iterable[Any]) -> list[str]:
        """Nothing of this run may outlive it; returns what could not be ended."""
        return lastnet.last_net(self.root, list(unended), cgroups=self.cgroups, zygote=self.monitors.zygote_pid,
                                began=self.began)


_WNOTHREAD = 0x20000000  # <linux/wait.h>: wait for the calling thread's own children only


def reap_held(pid: int | None = None) -> None:
    """Reap what has ended of the processes the run holds: ``pid`` (a monitor whose pidfd fired: it may be the
    child of the worker thread that started it) and each exited child of the calling thread, the loop's, where
    the kernel puts the zygote, the monitors and every orphan re-parented to the supervisor (the subreaper).
    Never a plain ``waitpid(-1)``: a subprocess a worker thread started (a notify command, py-spy, squeue,
    scancel) is waited for by that thread, which would find its exit status gone and read a failure as 0."""
    if pid is not None:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    while True:
        try:
            got, _ = os.waitpid(-1, os.WNOHANG | _WNOTHREAD)
        except ChildProcessError:
            return
        if got == 0:
            return
