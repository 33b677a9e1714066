"""What ``rlsup up`` does with a run dir whose run has ended: say so, or keep it aside for a fresh run."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from ..monitor.process import is_monitor_of, records
from ..rundir.archive import how_it_ended
from ..rundir.layout import RunPaths


def ended_run(run_dir: Path) -> str | None:
    """How the run in ``run_dir`` ended, or None if there is none that ended (new, or crashed mid-way)."""
    paths = RunPaths(run_dir)
    return how_it_ended(paths) if paths.events.exists() else None


def keep_aside(run_dir: Path) -> Path | None:
    """Rename ``run_dir`` to ``run_dir.N`` (the first free N >= 1) so a new run can start in it.
    Refused while components of the run still live under their monitors."""
    if not run_dir.exists():
        return None
    paths = RunPaths(run_dir)
    if live := [r for _, r in records(paths.monitors) if is_monitor_of(r, paths.root)]:
        names = ", ".join(f"{r['component']} (pid {r['pid']})" for r in live)
        raise OSError(f"components of that run are still running under their monitors ({names}); "
                      "`rlsup up` without --fresh takes them over, and `rlsup down` then ends them")
    target = next(t for n in itertools.count(1) if not os.path.lexists(t := run_dir.with_name(f"{run_dir.name}.{n}")))
    os.rename(run_dir, target)
    return target
