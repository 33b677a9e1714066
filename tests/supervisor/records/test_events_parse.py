"""The parser at the edges: every event class survives to_dict -> JSON -> parse; nothing raises."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rlsup.supervisor.records import events as ev

_json_scalar = st.none() | st.booleans() | st.integers(-10**9, 10**9) | st.text(max_size=8) | st.floats(
    allow_nan=False, allow_infinity=False)
_json = st.recursive(_json_scalar, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
_BASE: dict[str, st.SearchStrategy[Any]] = {
    "int": st.integers(-10**9, 10**9), "bool": st.booleans(), "float": st.floats(allow_nan=False, allow_infinity=False),
    "str": st.text(max_size=12), "list[str]": st.lists(st.text(max_size=6), max_size=3),
    "list[int]": st.lists(st.integers(0, 10**6), max_size=3),
    "list[dict[str, Any]]": st.lists(st.dictionaries(st.text(max_size=6), _json, max_size=3), max_size=3),
    "dict[str, Any]": st.dictionaries(st.text(max_size=6), _json, max_size=3),
}
_opt_int, _opt_text = st.none() | st.integers(0, 10**9), st.none() | st.text(max_size=8)
_BASE.update({  # the typed records inside events, as the supervisor makes them
    # `of` is written only while `seq` is unknown (the driver fills it in as it emits the event)
    "Cause": st.builds(ev.Cause, st.sampled_from(["run", "user", "exit", "stall", "dependency"]),
                       st.text(max_size=12), st.none(), _opt_text, _opt_text)
    | st.builds(ev.Cause, st.sampled_from(["user", "exit"]), st.text(max_size=12), st.integers(0, 10**9), _opt_text),
    "Resume": st.builds(ev.Resume, _opt_int, _opt_text),
    "Diagnosis": st.builds(ev.Diagnosis, st.text(min_size=1, max_size=8), st.text(max_size=12), _opt_text, _opt_text,
                           _opt_int, st.lists(st.text(max_size=6), max_size=3).map(tuple), st.booleans(),
                           st.text(max_size=8)),
})


def _strategy(annotation: str) -> st.SearchStrategy[Any]:
    parts = [p.strip() for p in annotation.split(" | ")]
    base = _BASE[next(p for p in parts if p != "None")]
    return st.none() | base if "None" in parts else base


def _event(cls: type[ev.Event]) -> st.SearchStrategy[ev.Event]:
    kw: dict[str, st.SearchStrategy[Any]] = {"component": st.none() | st.text(max_size=8)}
    for f in fields(cls):
        if f.name == "component":
            continue
        if f.name == "data":  # a gauge's data: its own fields, never the envelope's
            kw["data"] = st.dictionaries(st.text(max_size=6).filter(lambda k: k not in ev._ENVELOPE), _json,
                                         max_size=3)
        else:
            kw[f.name] = _strategy(str(f.type))
    return st.builds(cls, **kw)


_any_event = st.one_of([_event(cls) for cls in ev.EVENT_CLASSES])


@settings(max_examples=200, deadline=None)
@given(_any_event, st.floats(0, 2e9, allow_nan=False), st.integers(0, 10**9))
def test_round_trip_every_class(e: ev.Event, ts: float, seq: int) -> None:
    d = e.to_dict(ts=ts, seq=seq)
    want = ev.Record(round(ts, 6), seq, e)
    assert ev.parse(d) == want
    assert ev.parse(json.loads(json.dumps(d))) == want  # as the journal and the socket carry it
    assert ev.parse(d).to_dict() == d


def test_every_class_is_parsed_by_its_kind() -> None:
    for cls in ev.EVENT_CLASSES:
        assert type(ev.parse({"kind": cls.kind}).event) is cls


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["ts", "seq", "kind", "component", "pid", "attempt", "reason", "data",
                                        "exit_code", "components", "x"]) | st.text(max_size=5),
                       _json | st.sampled_from(sorted(ev.BY_KIND)), max_size=8))
def test_parse_never_raises(d: dict[str, Any]) -> None:
    rec = ev.parse(d)
    ev.describe(rec)
    ev.human(rec)
    for k, v in d.items():  # nothing is lost: what has no typed home is kept in extra
        if k not in ev._ENVELOPE:
            assert rec.to_dict().get(k) == v


def test_unknown_kind_and_fields_are_kept() -> None:
    d = {"ts": 1.5, "seq": 7, "kind": "teleported", "component": "a", "to": "mars"}
    rec = ev.parse(d)
    assert isinstance(rec.event, ev.UnknownEvent) and rec.kind == "teleported"
    assert rec.to_dict() == d and ev.describe(rec) == "teleported"
    d2 = {"ts": 2.0, "seq": 8, "kind": "exited", "component": "a", "exit_code": 1, "resources": {"rss_mb": 3}}
    rec2 = ev.parse(d2)
    assert isinstance(rec2.event, ev.ComponentExited) and rec2.event.exit_code == 1
    assert rec2.extra == {"resources": {"rss_mb": 3}} and rec2.to_dict()["resources"] == {"rss_mb": 3}


def test_old_journal_lines_read_with_defaults() -> None:
    rec = ev.parse({"ts": 3, "seq": 1, "kind": "started", "component": "t", "pid": 5, "attempt": 1})
    assert rec.event == ev.ComponentStarted("t", pid=5, attempt=1) and rec.ts == 3.0
    bad = ev.parse({"kind": "exited", "component": "t", "exit_code": "1", "seq": "x"})
    assert isinstance(bad.event, ev.ComponentExited) and bad.event.exit_code is None and bad.seq == 0
    assert bad.extra == {"exit_code": "1"}


def test_describe_on_records_and_dicts_agree() -> None:
    e = ev.ComponentExited("t", exit_code=None, signal="SIGKILL", uptime_s=1.4, step=3,
                           diagnosis=ev.Diagnosis.from_dict({"category": "host_oom", "summary": "oom"}), attempt=2)
    d = e.to_dict(ts=1.0, seq=2)
    assert ev.describe(d) == ev.describe(ev.parse(d)) == "killed by SIGKILL after 1.4s at step 3: oom"


@settings(max_examples=300, deadline=None)
@given(_any_event, st.floats(0, 2e9, allow_nan=False), st.integers(0, 10**9), st.data())
def test_a_line_of_an_older_or_newer_writer_is_passed_on_as_it_was(e: ev.Event, ts: float, seq: int,
                                                                   data: st.DataObject) -> None:
    """An older rlsup wrote fewer fields, a newer one more: ``parse(d).to_dict() == d`` all the same,
    so a reader that passes records on (``rlsup events -f --json``, the archive) adds and loses nothing."""
    d = e.to_dict(ts=round(ts, 6), seq=seq)
    droppable = sorted(k for k in d if k != "kind")
    for k in data.draw(st.lists(st.sampled_from(droppable), unique=True) if droppable else st.just([])):
        del d[k]
    d.update(data.draw(st.dictionaries(st.text(min_size=1, max_size=6).map(lambda k: "new_" + k), _json, max_size=2)))
    d = json.loads(json.dumps(d))
    assert ev.parse(d).to_dict() == d
