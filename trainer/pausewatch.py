"""The orchestrator's watch over an inference server left paused.

vLLM stays paused after ``/pause`` until someone sends ``/resume``; a completion sent meanwhile is held (0.32.0)
or refused (503, 0.33.0). The trainer's weight sync always resumes it, a SIGTERM included -- but a trainer
killed outright in the middle of a reload (SIGKILL once rlsup's stop timeout ran out, the OOM killer) cannot.
While the orchestrator's requests wait, :class:`PauseWatch` asks the server whether it is paused (``GET
/is_paused``: vLLM 0.12.0+; a server without the route is not watched) and reads the reload record
(:mod:`rlsup.trainer.reloads`). A pause that no reload under way explains (no heartbeat for
:data:`PATIENCE_S` s by this process's own clock) is flagged, ``rlsup-flag: engine_paused: ...``, seconds after
the requests began to wait; where the reload had not begun (the trainer died in the pause's drain) the watch
resumes the server itself: nothing was loaded, its weights are whole.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

from rlsup.trainer import reloads, steplog
from rlsup.trainer.sync import flag, request

WAIT_S = 5.0  # requests outstanding this long before the server is asked whether it is paused
EVERY_S = 2.0  # then asked this often
PATIENCE_S = 5 * reloads.BEAT_S  # no heartbeat for this long: the reload's trainer is gone


def verdict(rec: reloads.Record, still_s: float, url: str) -> tuple[str, bool] | None:
    """For a server found paused, with the record ``rec`` whose heartbeat has not moved for ``still_s`` s:
    (the flag's message, whether to resume it), or None while a reload is under way."""
    if rec.state == reloads.SERVING:
        return (f"the inference server at {url} is paused and no weight reload is under way (paused by hand or "
                f"by another client): completions wait until it is resumed (curl -X POST {url}/resume)", False)
    if still_s < PATIENCE_S:
        return None
    who = f"the trainer ({rec.owner}) that paused it stopped {still_s:.0f}s ago"
    if rec.state == reloads.PAUSING:
        return (f"the inference server at {url} was left paused for a reload of weights step {rec.to_step} that "
                f"never began: {who}, in the pause's drain; resumed it (nothing was loaded)", True)
    return (f"the inference server at {url} was left paused in the middle of a reload of weights step "
            f"{rec.to_step}: {who}; its weights may be half-loaded: restart it (`rlsup restart <inference "
            "component>`) so it loads the newest good weights", False)


class PauseWatch:
    """Used as ``with watch:`` around one step's completions (see the module docstring)."""

    def __init__(self, base: str, weights_dir: Path, out: Any = None) -> None:
        self.base, self.weights_dir = base, Path(weights_dir)
        self.supported = True  # the server answers /is_paused
        self.flagged: set[tuple[str, int | None]] = set()
        self._beat: tuple[float, float] = (-1.0, 0.0)  # (the record's beat, when this process saw it change)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._out = out or sys.stdout

    def __enter__(self) -> PauseWatch:
        if self.supported:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="pause-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        if self._stop.wait(WAIT_S):
            return
        while self.supported and not self._stop.is_set():
            self.check()
            self._stop.wait(EVERY_S)

    def check(self) -> None:
        """Ask once; flag (and resume, where safe) a server left paused."""
        r = request("GET", f"{self.base}/is_paused", timeout=5.0)
        if r.status == 404:
            self.supported = False
            return
        if not (r.ok and isinstance(r.data, dict) and r.data.get("is_paused") is True):
            return
        rec = reloads.read(self.weights_dir)
        now = time.monotonic()
        if rec.beat != self._beat[0]:
            self._beat = (rec.beat, now)
        found = verdict(rec, now - self._beat[1], self.base)
        if found is None:
            return
        message, resume = found
        key = (rec.state, rec.to_step)
        if key not in self.flagged:
            self.flagged.add(key)
            flag(self._out, "engine_paused", message)
        if resume:
            done = request("POST", f"{self.base}/resume", timeout=60.0)
            steplog.warn(f"resumed the inference server left paused: {'done' if done.ok else done.error or done.status}")
