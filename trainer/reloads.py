"""The reload record: which weights the inference server serves, and when it is being reloaded.

``OUT/weights/reloads.json`` is written by the trainer's weight sync (:class:`Recorder`) around every reload,
atomically: ``{"seq", "step", "state", "to_step", "paused", "unpaused", "owner", "beat"}``. ``seq`` grows by one at
every write; ``state`` is ``serving`` between reloads, ``pausing`` (written before vLLM's ``/pause`` is sent),
``reloading`` (before the reload itself, with ``paused`` saying whether the server was paused for it; also while
the trainer waits for a server that went away, ``paused`` then: a restarted server changes weights between
requests, never within one) and back to ``serving`` once the server runs again (``step``: what it serves now).
``unpaused`` counts the reloads the server carried out without a pause: a completion generated across one of them
may mix two sets of weights (one the server died during mixed nothing: its running requests failed). ``beat`` is
refreshed every :data:`BEAT_S` seconds while a reload is under way, so a reader can tell a reload in progress
from one whose trainer died (SIGKILL) and left the server paused.

The orchestrator reads the record before it sends a completion request and after the reply (:func:`label`):
the same ``seq`` in ``serving`` both times means exactly one set of weights made the completion. This brackets
requests where the engine's reply does not name the weights (vLLM's ``/v1/completions``); where it does
(SGLang's ``metadata.weight_versions``, rlsup's ``weights_step``) the engine's word is taken instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from rlsup.trainer import atomic

NAME = "reloads.json"
BEAT_S = 2.0  # how often a reload under way says so
SERVING, PAUSING, RELOADING = "serving", "pausing", "reloading"


@dataclass(frozen=True)
class Record:
    seq: int = 0
    step: int | None = None  # what the server serves (None: nothing this run loaded yet)
    state: str = SERVING
    to_step: int | None = None  # the step being reloaded
    paused: bool = False  # the reload under way runs on a paused server
    unpaused: int = 0  # reloads so far that ran without a pause
    owner: str = ""  # host:pid of the trainer doing the reload
    beat: float = 0.0  # wall time of its last heartbeat


def read(weights_dir: Path) -> Record:
    """The record as last written (a fresh one when there is none or it cannot be read)."""
    try:
        data = json.loads((Path(weights_dir) / NAME).read_text())
        return Record(**{k: data[k] for k in Record.__dataclass_fields__ if k in data})
    except (OSError, ValueError, TypeError):
        return Record()


@dataclass(frozen=True)
class Label:
    """Which weights made one completion. ``step``: the oldest weights step it may come from (0: the weights
    the server started with, before this run loaded any); ``straddled``: it overlapped a reload; ``mixed``:
    it overlapped a reload that ran without a pause, so its tokens may come from two sets of weights."""

    step: int
    straddled: bool = False
    mixed: bool = False


def label(before: Record, after: Record) -> Label:
    """The weights of a completion sent when the record read ``before`` and answered when it read ``after``.
    A paused reload (vLLM's ``/pause`` with ``mode=wait``) lets running requests finish first and holds new
    ones until ``/resume``: a completion across it is made by one set of weights, the old or the new one; an
    unpaused reload swaps weights under running requests."""
    step = before.step or 0
    straddled = before.seq != after.seq or before.state != SERVING
    mixed = after.unpaused > before.unpaused or any(r.state == RELOADING and not r.paused for r in (before, after))
    return Label(step, straddled, straddled and mixed)


def from_versions(spans: object) -> Label | None:
    """A label from the engine's own account: SGLang's ``metadata.weight_versions`` (``[{"version", "start",
    "end"}]`` over the output tokens) or a single ``weight_version``; versions are the steps the sync tagged.
    None where a version is not one of ours (``default``: a server started on its own weights)."""
    versions = [s.get("version") for s in spans] if isinstance(spans, list) else [spans]
    steps = [int(v) for v in versions if isinstance(v, str) and v.isdigit()]
    if not steps or len(steps) != len(versions):
        return None
    return Label(min(steps), len(set(steps)) > 1, len(set(steps)) > 1)


class Recorder:
    """The weight sync's side: :meth:`begin` before anything is sent to the server, :meth:`reloading` before
    the reload itself and while the server is away (paused then: a restarted server changes weights between
    requests; :meth:`reloaded_unpaused` after one without a pause), :meth:`end` once the server runs again. A
    heartbeat thread refreshes ``beat`` in between; :meth:`end` (or the process's death) stops it."""

    def __init__(self, weights_dir: Path) -> None:
        self.path = Path(weights_dir) / NAME
        self.rec = read(weights_dir)
        self._beating: threading.Event | None = None
        self._lock = threading.Lock()

    def begin(self, to_step: int) -> None:
        self._write(state=PAUSING, to_step=to_step, paused=False, owner=f"{socket.gethostname()}:{os.getpid()}")
        stop = self._beating = threading.Event()
        threading.Thread(target=self._beat, args=(stop,), name="reload-heartbeat", daemon=True).start()

    def reloading(self, paused: bool) -> None:
        self._write(state=RELOADING, paused=paused)

    def reloaded_unpaused(self) -> None:
        """The server answered a reload it carried out without a pause."""
        self._write(unpaused=self.rec.unpaused + 1)

    def end(self, step: int | None) -> None:
        """The server runs again, serving ``step`` (None: what it served before)."""
        if self._beating is not None:
            self._beating.set()
            self._beating = None
        if self.rec.state != SERVING or step is not None:
            self._write(state=SERVING, step=self.rec.step if step is None else step, to_step=None, paused=False)

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(BEAT_S):
            self._write()

    def _write(self, **changes: object) -> None:
        with self._lock:
            self.rec = replace(self.rec, seq=self.rec.seq + 1, beat=round(time.time(), 3), **changes)  # type: ignore[arg-type]
            # the record is advice to readers: a full disk must not fail a reload
            with contextlib.suppress(OSError):
                atomic.write_text(self.path, json.dumps(asdict(self.rec)))
