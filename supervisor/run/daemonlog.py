"""The supervisor's own voice: lines for its log (``supervisor.log`` when it runs as a daemon)."""

from __future__ import annotations

import sys


def say(text: str) -> None:
    """Print to stderr; never raise (a full disk or a closed stream must not reach control flow)."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
