"""The socket's edge: a session parses each event once on receipt and hands its listener a typed
record; the text followers print the same words from it as they did from the dict."""

from __future__ import annotations

import io
from typing import Any

from rlsup.supervisor.cli.follow import Printer
from rlsup.supervisor.client.session import Session
from rlsup.supervisor.records.events import ComponentExited, Record, RunEnded, UnknownEvent, human, parse


class _Listener:
    def __init__(self) -> None:
        self.events: list[Record] = []

    def on_connection(self, status: str, detail: str) -> None: ...

    def on_snapshot(self, snapshot: dict[str, Any], resumed: bool) -> None: ...

    def on_event(self, event: Record) -> None:
        self.events.append(event)

    def on_logs(self, component: str, seq: int, lines: list[str]) -> None: ...

    def on_gap(self, component: str, from_seq: int, to_seq: int) -> None: ...


async def _never() -> Any:
    raise AssertionError("not connected in these tests")


EXITED = {"ts": 10.5, "seq": 7, "kind": "exited", "component": "trainer", "exit_code": 1, "signal": None,
          "uptime_s": 3.0, "step": 5, "diagnosis": None, "attempt": 2}


def test_the_session_hands_records_parsed_once_and_drops_what_it_delivered_before() -> None:
    L = _Listener()
    s = Session(_never, L)
    s._push({"type": "event", "event": EXITED})
    s._push({"type": "event", "event": {"ts": 11.0, "seq": 0, "kind": "progress", "component": "trainer", "step": 6}})
    s._push({"type": "event", "event": {**EXITED, "seq": 6}})  # already seen (a replay after a reconnect)
    s._push({"type": "event", "event": {"ts": 12.0, "seq": 8, "kind": "gpu_reset", "component": "trainer", "x": 1}})
    s._push({"type": "event", "event": {"ts": 13.0, "seq": 9, "kind": "run_ended", "component": None,
                                        "exit_code": 1, "reason": "trainer failed"}})
    assert [r.kind for r in L.events] == ["exited", "progress", "gpu_reset", "run_ended"]
    ex = L.events[0].event
    assert isinstance(ex, ComponentExited) and (ex.exit_code, ex.attempt) == (1, 2)
    assert L.events[0].to_dict() == EXITED  # the dict that came, back
    assert isinstance(L.events[2].event, UnknownEvent)  # a newer supervisor's kind: kept, not dropped
    assert isinstance(L.events[3].event, RunEnded) and s.run_ended and s.seq == 9


def test_a_run_started_after_a_replayed_end_means_the_run_goes_on() -> None:
    """A resumed run's journal replays the earlier run's end, then the later start: the session must not
    take the next dropped link for the run's end (issue 38: the TUI said `run ended` for good)."""
    s = Session(_never, _Listener())
    end = {"ts": 13.0, "seq": 9, "kind": "run_ended", "component": None, "exit_code": 0, "reason": "stopped"}
    for e in (end, {"ts": 20.0, "seq": 10, "kind": "run_started", "component": None, "how": "resumed"}):
        s._event(e)
    assert not s.run_ended
    s._event({**end, "seq": 11})
    assert s.run_ended


def test_the_printer_prints_a_record_as_it_printed_the_dict() -> None:
    out = io.StringIO()
    p = Printer(out=out)
    p.on_event(parse(EXITED))
    p.on_event(EXITED)  # a raw subscription (rlsup down) still hands dicts
    ended = {"ts": 13.0, "seq": 9, "kind": "run_ended", "component": None, "exit_code": 1, "reason": "r",
             "left": ["pid 5 (python)"]}
    p.on_event(parse(ended))
    assert out.getvalue() == (human(EXITED) + "\n") * 2 + human(ended) + "\n"
    assert p.ended is not None and p.ended["left"] == ["pid 5 (python)"]  # `down` reads what was left
