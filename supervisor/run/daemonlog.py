"""The supervisor's own voice: lines for its log (``supervisor.log`` when it runs as a daemon)."""

from __future__ import annotations

import contextlib
import sys


def say(text: str) -> None:
    """Print to stderr; never raise (a full disk or a closed stream must not reach control flow)."""
    with contextlib.suppress(OSError, ValueError):
        print(text, file=sys.stderr, flush=True)
