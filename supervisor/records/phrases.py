"""How rlsup words the things it says often: durations and process exits. One function each, so
the journal, the CLI, the report and the TUI never disagree."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any


def fmt_duration(s: float | None) -> str:
    """``"4.2s"``, ``"3m05s"``, ``"2h07m"``, ``"3d04h"``; ``"?"`` when unknown."""
    if s is None:
        return "?"
    s = max(s, 0.0)
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def fmt_span(s: float) -> str:
    """A configured span in words: ``"1 h"``, ``"10 min"``, ``"45 s"``."""
    if s >= 3600 and s % 3600 == 0:
        return f"{int(s // 3600)} h"
    if s >= 60 and s % 60 == 0:
        return f"{int(s // 60)} min"
    return f"{s:g} s"


def describe_exit(exit_code: int | None, signal: str | None, *, bare_signal: bool = False) -> str:
    """``"killed by SIGKILL"``, ``"exit 1"``, ``"exit ?"`` (a process whose status is unknown);
    ``bare_signal``: ``"SIGKILL"`` (where the words around it already say it was killed)."""
    if signal:
        return signal if bare_signal else f"killed by {signal}"
    return f"exit {exit_code}" if exit_code is not None else "exit ?"


def end_note(run: Mapping[str, Any]) -> str | None:
    """``"ended at 2026-11-22 10:37:08: trainer fatal: ... (exit code 1)"`` for a run that ended
    (the wording of ``rlsup bridge`` on an ended run), None for one that has not."""
    if not run.get("ended_at"):
        return None
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(run["ended_at"])))
    return f"ended at {when}: {run.get('end_reason')} (exit code {run.get('exit_code')})"
