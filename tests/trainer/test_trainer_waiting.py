"""The one poll loop the trainer and the orchestrator wait with (rlsup.trainer.waiting)."""

from __future__ import annotations

import threading
import time

from rlsup.trainer import waiting


def test_poll_returns_what_appears_and_says_it_waits_once_at_the_first_miss() -> None:
    box: list[int] = []
    said: list[float] = []
    timer = threading.Timer(0.3, box.append, (0,))  # 0 is a value found, not a miss
    timer.start()
    try:
        assert waiting.poll(lambda: box[0] if box else None, say=lambda: said.append(time.monotonic())) == 0
    finally:
        timer.cancel()
    assert len(said) == 1  # the first miss; the next only after SAY_EVERY_S


def test_poll_gives_up_after_its_patience_and_checks_at_least_once() -> None:
    calls: list[int] = []
    t0 = time.monotonic()
    assert waiting.poll(lambda: calls.append(1), patience=0.3) is None
    # its patience waited out, then no more: with its back-off (20 ms, x1.5, at most 50 ms) 0.3 s holds 9
    # checks, and a loaded machine only makes fewer (a sleep never ends early)
    assert time.monotonic() - t0 >= 0.3 and 3 <= len(calls) <= 9
    calls.clear()
    assert waiting.poll(lambda: calls.append(1), patience=0.0) is None and calls == [1]
    assert waiting.poll(lambda: "here", patience=0.0) == "here"
