"""What no file tells the supervisor: the run dir refusing writes, and monitors that cannot report.

The monitors report through their records and the logs, in the run dir. When its file system turns
read-only (ext4's ``errors=remount-ro``, a network volume's hiccup) or fails (EIO), nothing is written
there: no record says a command exited, no log line arrives. So the run looks at the kernel instead,
on a sweep every :func:`sweep_every` seconds: the file system's flags and its own writes say whether
the run dir takes writes (:func:`disk_trouble`), a command that ended without a record is read from
the kernel (:meth:`~rlsup.supervisor.run.component.Component.check_health`), and a monitor
that is stopped or wedged is found by its state.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

HEALTH_S = 2.0  # the sweep's period for up to SWEEP_PER_S live attempts
SWEEP_PER_S = 500  # /proc reads per second the sweep may cost (a run of 10,000 components: every 20 s)
WEDGED_S = 10.0  # a monitor in uninterruptible sleep this long (a hung disk or NFS server) is wedged
TROUBLE = (errno.EROFS, errno.EIO)  # a full disk (ENOSPC) has its own path: the records' spare slots


def sweep_every(live: int) -> float:
    """Seconds between sweeps with ``live`` attempts running (two /proc reads each)."""
    return max(HEALTH_S, 2 * live / SWEEP_PER_S)


def stuck_reason(state: str, d_for: float) -> str | None:
    """Why a monitor in /proc state ``state`` (in uninterruptible sleep for ``d_for`` seconds) reads
    nothing; None when it can."""
    if state == "D" and d_for >= WEDGED_S:
        return f"has been in uninterruptible sleep for {d_for:.0f} s (a hung disk or network file system?)"
    return {"T": "is stopped (SIGSTOP)", "t": "is stopped by a debugger"}.get(state)


def disk_trouble(root: Path, errors: Iterable[OSError | None]) -> str | None:
    """Why the run dir takes no writes (None: it does): its file system is mounted read-only, or the
    supervisor's own last writes there (journal, state) failed as a read-only or failing disk does."""
    try:
        if os.statvfs(root).f_flag & os.ST_RDONLY:
            return f"the file system of {root} is read-only (EROFS)"
    except OSError as e:
        if e.errno in TROUBLE:
            return _say(root, e)
    for err in errors:
        if err is not None and err.errno in TROUBLE:
            return _say(root, err)
    return None


def _say(root: Path, e: OSError) -> str:
    name = errno.errorcode.get(e.errno or 0, "OSError")
    what = "is read-only" if e.errno == errno.EROFS else "fails"
    return f"the file system of {root} {what} ({name}: {e.strerror or e})"


FLAG_ACTION = ("still supervising from memory: exits are read from the kernel, events wait in memory and are "
               "written once the run dir takes writes again, each monitor keeps its component's newest output "
               "(4 MiB) and counts the rest as lost. Remount the file system read-write (or fix the volume), or "
               "end the run with `rlsup down`")
