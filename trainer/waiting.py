"""Waiting for what another process publishes (rollouts, weights, a server's reload): one poll loop.

Polls from 20 ms, backing off to 50 ms, so a step that is already there costs nothing and what arrives is
seen within 50 ms (the demo's steps wait on each other three times a step: a 250 ms cap made it 15%
slower), while a long wait costs twenty checks of a file a second; says so at the first miss and every few seconds after, so a stuck
stack shows what it waits for in its log (the trainer's "Waiting for training batch to arrive").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

SAY_EVERY_S = 5.0


def poll(check: Callable[[], T | None], *, patience: float | None = None,
         say: Callable[[], None] | None = None) -> T | None:
    """``check()`` until it returns something other than None, which is returned; None once
    ``patience`` seconds have passed (None: wait for ever). ``say`` runs at the first miss and
    every :data:`SAY_EVERY_S` after."""
    deadline = None if patience is None else time.monotonic() + patience
    delay = 0.02
    said_at: float | None = None
    while True:
        found = check()
        if found is not None:
            return found
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return None
        if say is not None and (said_at is None or now - said_at >= SAY_EVERY_S):
            say()
            said_at = now
        time.sleep(delay)
        delay = min(delay * 1.5, 0.05)
