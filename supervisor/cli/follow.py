"""Text followers of a live run: ``rlsup events -f``, ``rlsup logs -f``, ``rlsup down`` and the
plain-terminal attach. Each is a :class:`~rlsup.supervisor.client.session.SessionListener` that prints."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from ..records.events import Record, RunEnded, RunStarted, as_record, human, is_lifecycle
from .common import write


class Printer:
    """Prints lifecycle events (one line each, or with ``as_json`` the journal's JSON) and optionally log lines
    as they arrive; tracks the run's end."""

    def __init__(self, *, out: TextIO | None = None, events: bool = True, logs: set[str] | None = None,
                 log_file_hint: dict[str, str] | None = None, as_json: bool = False):
        self.out = out if out is not None else sys.stdout  # looked up now: main may have wrapped it
        self.events = events
        self.as_json = as_json
        self.logs = logs or set()
        self.width = 12
        self.log_file_hint = log_file_hint or {}
        # The run's end as it came (a dict: `down` reads its `left`), None while it goes on.
        self.ended: dict[str, Any] | None = None
        self.status = ""

    on_broken: Any = None  # called once when the reader of our output went away (`... | head`)

    def _w(self, text: str) -> None:
        if not write(self.out, text) and self.on_broken is not None:
            self.on_broken()
            self.on_broken = None

    def on_connection(self, status: str, detail: str) -> None:
        prev, self.status = self.status, status
        if status == "reconnecting" and prev != "reconnecting":
            self._w(f"rlsup: connection lost ({detail or 'link down'}); reconnecting...\n")
        elif status == "attached" and prev == "reconnecting":
            self._w("rlsup: reconnected\n")

    def on_snapshot(self, snapshot: dict[str, Any], resumed: bool) -> None:
        names = list(snapshot.get("state", {}).get("components", {}))
        self.width = max([12, *(len(n) for n in names)])

    def on_event(self, event: Record | Mapping[str, Any]) -> None:
        """A record from a :class:`~rlsup.supervisor.client.session.Session`; a raw subscription's dict is parsed."""
        rec = as_record(event)
        if isinstance(rec.event, RunEnded):
            self.ended = rec.to_dict()
        elif isinstance(rec.event, RunStarted):  # the run goes on (resumed, or its requeued job started again)
            self.ended = None
        if self.events and is_lifecycle(rec.kind):
            self._w((json.dumps(rec.to_dict()) if self.as_json else human(rec, width=self.width)) + "\n")

    def on_logs(self, component: str, seq: int, lines: list[str]) -> None:
        if component in self.logs:
            self._w("".join(line + "\n" for line in lines))

    def on_gap(self, component: str, from_seq: int, to_seq: int) -> None:
        if component in self.logs:
            where = self.log_file_hint.get(component, "the log file")
            self._w(f"[rlsup: {to_seq - from_seq} lines of {component} not shown here; they are in {where}]\n")
