"""`rlsup diagnose FILE... [--json]`: the exit diagnosis engine on saved logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from ..records.diagnosis import Diagnosis
from ..rundir.logs import last_lines
from .engine import diagnose
from .normalize import clean_line


def read_tail(path: str | Path, tail_lines: int = 2000) -> list[str]:
    """The last ``tail_lines`` lines of a file, cleaned. Raises OSError when unreadable."""
    return [clean_line(x) for x in last_lines(path, tail_lines)]


def diagnose_file(path: str | Path) -> Diagnosis:
    """Diagnose a saved log offline (only the log is known: no exit code, no host evidence)."""
    return diagnose(read_tail(path))


def format_human(path: str, d: Diagnosis) -> str:
    # (run.py imported only once a human form is wanted, as in diagnose_command)
    from .run import exception_and_location

    out = [f"{path}: {d.category}", f"  {d.summary}", *exception_and_location(d, d.summary)]
    if d.step is not None:
        out.append(f"  step:      {d.step}")
    if d.hint:
        out.append(f"  next:      {d.hint}")
    if d.evidence:
        out.append("  evidence:")
        out.extend(f"    | {e[:300]}" for e in d.evidence)
    return "\n".join(out)


def diagnose_command(paths: list[str], as_json: bool, out: TextIO, err: TextIO | None = None) -> int:
    """Body of ``rlsup diagnose``. Each path is a log file (its exit diagnosis) or a run directory
    (a directory holding ``events.jsonl``: the run's root cause across components, see
    :mod:`.run`). Returns 0, or 2 when a path could not be read (``PATH: reason`` on ``err``,
    default ``out``); readable ones are still diagnosed."""
    from .run import diagnose_run, format_run, is_run_dir

    err = err if err is not None else out
    results: dict[str, dict] = {}
    human: list[str] = []
    rc = 0
    for p in paths:
        if is_run_dir(p):
            rd = diagnose_run(Path(p))
            results[p] = rd.to_dict()
            human.append(format_run(rd))
            continue
        try:
            d = diagnose_file(p)
        except OSError as exc:
            print(f"{p}: {exc.strerror or exc}", file=err)
            rc = 2
            continue
        results[p] = d.to_dict()
        human.append(format_human(p, d))
    if not as_json:
        out.write("\n\n".join(human) + ("\n" if human else ""))
        return rc
    doc = next(iter(results.values()), None) if len(paths) == 1 else results  # one path: its result alone
    if doc is not None:
        json.dump(doc, out, indent=2)
        out.write("\n")
    return rc
