"""The one progress-line format every component of the reference stack prints.

Shape (parsed by rlsup's ``rlsup`` progress preset)::

    Step 12/200 | reward 0.412 | loss -0.0213 | grad_norm 0.31

``Step {step}/{total}`` then `` | {name} {number}`` pairs; names match ``[a-z_]+`` and numbers are
plain decimals (never ``nan``/``inf``/exponent notation, so one simple regex reads them all).
"""

from __future__ import annotations

import math
import re
import sys
import time

_NAME = re.compile(r"[a-z_]+\Z")


def _number(name: str, value: float | int) -> str | None:
    if isinstance(value, int):  # a bool too: 1 or 0
        return str(int(value))
    value = float(value)
    if not math.isfinite(value):
        return None
    return f"{value:.{3 if name in ('reward', 'accuracy') else 4}f}"


def format_step(step: int, total: int, metrics: dict[str, float | int]) -> str:
    """Return one progress line; non-finite metrics are left out rather than printed as ``nan``."""
    parts = [f"Step {int(step)}/{int(total)}"]
    for name, value in metrics.items():
        if not _NAME.match(name):
            raise ValueError(f"metric name {name!r} must match [a-z_]+")
        text = _number(name, value)
        if text is not None:
            parts.append(f"{name} {text}")
    return " | ".join(parts)


def log_step(step: int, total: int, metrics: dict[str, float | int]) -> None:
    """Print the progress line for ``step`` to stdout and flush it at once."""
    print(format_step(step, total, metrics), flush=True)


def log(message: str) -> None:
    """Print a free-form, timestamped log line to stdout (flushed)."""
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def warn(message: str) -> None:
    """Print a warning line to stderr (flushed)."""
    print(f"{time.strftime('%H:%M:%S')} WARNING {message}", file=sys.stderr, flush=True)
