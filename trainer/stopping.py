"""rlsup's stop (SIGTERM) in the trainer: it raises SystemExit in the main thread, so ``finally`` blocks run
(Python's default action kills the process without unwinding) -- except inside a :func:`held` block, where it
waits for the block's end. Two things must not be cut in half: a pause/reload/resume exchange with the
inference server (raising inside ``/pause``'s drain skipped the ``/resume`` and left vLLM paused for good) and a
checkpoint asked for on SIGUSR1 with the line that says it was written (the supervisor stops the trainer as soon
as the checkpoint is there, so the line was lost when the SIGTERM came first). rlsup's stop timeout still bounds
a held block (then SIGKILL). A second SIGTERM kills at once."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

from rlsup.trainer import steplog


class _Stop:
    holding: str | None = None  # what a held block says to a SIGTERM, while it runs
    pending: int | None = None  # the signal that arrived meanwhile


_stop = _Stop()


def install_sigterm_exit() -> None:
    """SIGTERM raises SystemExit (exit 143), or waits for the end of the :func:`held` block it arrives in."""
    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM kills
        if _stop.holding is not None:
            _stop.pending = signum
            steplog.warn(f"SIGTERM during {_stop.holding}, then exiting")
            return
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


@contextlib.contextmanager
def held(during: str, first: str) -> Iterator[None]:
    """A SIGTERM inside this block is held until it ends; the caller exits at the next :func:`exit_if_stopped`.
    The trainer's log says "SIGTERM during DURING: FIRST, then exiting". Without :func:`install_sigterm_exit`
    (SIGTERM's default action) nothing is held."""
    outer, _stop.holding = _stop.holding, f"{during}: {first}"
    try:
        yield
    finally:
        _stop.holding = outer


def stopping() -> bool:
    """Whether a SIGTERM was held: the trainer is on its way out."""
    return _stop.pending is not None


def exit_if_stopped() -> None:
    """Exit now for a SIGTERM held in a :func:`held` block (exit 143)."""
    if _stop.pending is not None:
        raise SystemExit(128 + _stop.pending)
