"""The records inside events (``cause``, ``why``, ``resume``, ``diagnosis``) are typed, and the journal keeps
its bytes: each event serialises to the dict an rlsup with plain dicts there wrote, and a journal line reads
back to the typed records and is written again byte for byte."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlsup.supervisor.records import events as ev
from rlsup.supervisor.records import state as state_mod
from rlsup.supervisor.records.diagnosis import Diagnosis
from rlsup.supervisor.rules import lifecycle as lc

EXIT_CAUSE = ev.Cause("exit", "exit 1: boom", seq=12)
ENGINE_DIAG = {"category": "python_exception", "summary": "ValueError: boom", "exception": "ValueError: boom",
               "location": "train.py:3", "step": 7, "evidence": ["ValueError: boom"], "library_location": False,
               "hint": ""}
# As component._spawn_failed writes it: six keys, no library_location or hint.
SPAWN_DIAG = {"category": "unknown", "summary": "command not found: 'nope'", "exception": "FileNotFoundError: x",
              "location": None, "step": None, "evidence": ["command not found: 'nope'"]}
# As the Slurm launcher refines it: the engine's keys, then its own.
NODE_DIAG = {**ENGINE_DIAG, "category": "node_failure", "node": "gpu-3", "slurm": {"state": "NODE_FAIL"}}

# Each event with typed records, and the dict of it as the journal has always held it.
CASES: list[tuple[ev.Event, dict[str, Any]]] = [
    (ev.ComponentStarted("trainer", pid=10, attempt=2, resume=ev.Resume(40, "/ck/step_40"), command=["python"],
                         monitor_pid=9, cause=EXIT_CAUSE, log_seq=100, log_offset=2048, log_ino=77),
     {"kind": "started", "component": "trainer", "pid": 10, "attempt": 2,
      "resume": {"step": 40, "checkpoint": "/ck/step_40"}, "command": ["python"], "checkpoints_rejected": None,
      "monitor_pid": 9, "cause": {"by": "exit", "reason": "exit 1: boom", "seq": 12}, "log_seq": 100,
      "log_offset": 2048, "log_ino": 77, "nodes": None, "step_id": None, "config_hash": None}),
    (ev.ComponentStarted("inference", pid=11, attempt=1,
                         cause=ev.Cause("dependency", "trainer restarts", seq=5, component="trainer")),
     {"kind": "started", "component": "inference", "pid": 11, "attempt": 1, "resume": None, "command": [],
      "checkpoints_rejected": None, "monitor_pid": None,
      "cause": {"by": "dependency", "reason": "trainer restarts", "seq": 5, "component": "trainer"},
      "log_seq": None, "log_offset": None, "log_ino": None, "nodes": None, "step_id": None, "config_hash": None}),
    (ev.ComponentSpawnFailed("t", attempt=1, command=["nope"], error="command not found: 'nope'",
                             diagnosis=Diagnosis.from_dict(SPAWN_DIAG)),
     {"kind": "spawn_failed", "component": "t", "attempt": 1, "command": ["nope"],
      "error": "command not found: 'nope'", "diagnosis": SPAWN_DIAG}),
    (ev.ComponentExited("t", exit_code=1, uptime_s=3.5, step=7, diagnosis=Diagnosis.from_dict(ENGINE_DIAG), attempt=2),
     {"kind": "exited", "component": "t", "exit_code": 1, "signal": None, "uptime_s": 3.5, "step": 7,
      "diagnosis": ENGINE_DIAG, "attempt": 2}),
    (ev.ComponentExited("t", exit_code=1, diagnosis=Diagnosis("python_exception", "ValueError: boom",
                                                              "ValueError: boom", "train.py:3", 7, ("ValueError: boom",))),
     {"kind": "exited", "component": "t", "exit_code": 1, "signal": None, "uptime_s": 0.0, "step": None,
      "diagnosis": ENGINE_DIAG, "attempt": 0}),
    (ev.ComponentExited("t", exit_code=None, signal="SIGKILL", diagnosis=Diagnosis.from_dict(NODE_DIAG)),
     {"kind": "exited", "component": "t", "exit_code": None, "signal": "SIGKILL", "uptime_s": 0.0, "step": None,
      "diagnosis": NODE_DIAG, "attempt": 0}),
    (ev.ComponentExited("t", exit_code=0),
     {"kind": "exited", "component": "t", "exit_code": 0, "signal": None, "uptime_s": 0.0, "step": None,
      "diagnosis": None, "attempt": 0}),
    (ev.RestartScheduled("t", delay_s=2.0, attempt=3, reason="exit 1", cause=EXIT_CAUSE),
     {"kind": "restart_scheduled", "component": "t", "delay_s": 2.0, "attempt": 3, "reason": "exit 1",
      "cause": {"by": "exit", "reason": "exit 1: boom", "seq": 12}}),
    (ev.ComponentFatal("t", reason="repeated_error", why=ev.Cause("pattern", "repeated_error: x", seq=30)),
     {"kind": "fatal", "component": "t", "reason": "repeated_error", "cause": None,
      "why": {"by": "pattern", "reason": "repeated_error: x", "seq": 30}}),
    (ev.ComponentFatal("o", reason="dependency t is fatal", cause="t",
                       why=ev.Cause("dependency", "dependency t is fatal", component="t")),
     {"kind": "fatal", "component": "o", "reason": "dependency t is fatal", "cause": "t",
      "why": {"by": "dependency", "reason": "dependency t is fatal", "seq": None, "component": "t"}}),
    (ev.ComponentStopping("t", by="rlsup", signal="SIGTERM", reason="stalled", cause=ev.Cause("stall", "no step", of="flag")),
     {"kind": "stopping", "component": "t", "by": "rlsup", "signal": "SIGTERM", "reason": "stalled",
      "cause": {"by": "stall", "reason": "no step", "seq": None, "of": "flag"}}),
    (ev.ComponentStopping("t", by="user", signal="SIGTERM"),
     {"kind": "stopping", "component": "t", "by": "user", "signal": "SIGTERM", "reason": None, "cause": None}),
    (ev.CheckpointRequested("t", signal="SIGUSR1", wait_s=60.0, cause=ev.Cause("preemption", "SIGTERM received", seq=3)),
     {"kind": "checkpoint_requested", "component": "t", "signal": "SIGUSR1", "wait_s": 60.0,
      "cause": {"by": "preemption", "reason": "SIGTERM received", "seq": 3}}),
]


def _line(d: dict[str, Any]) -> str:
    return json.dumps(d, default=str, ensure_ascii=False)  # as rundir.journal.Journal.append writes it


@pytest.mark.parametrize(("event", "want"), CASES, ids=[f"{e.kind}-{i}" for i, (e, _) in enumerate(CASES)])
def test_each_event_writes_the_dict_of_before(event: ev.Event, want: dict[str, Any]) -> None:
    d = event.to_dict(ts=1.5, seq=4)
    assert _line(d) == _line({"ts": 1.5, "seq": 4, **want})  # the same keys, in the same order, byte for byte


@pytest.mark.parametrize(("event", "want"), CASES, ids=[f"{e.kind}-{i}" for i, (e, _) in enumerate(CASES)])
def test_a_journal_line_reads_back_typed_and_writes_the_same_bytes(event: ev.Event, want: dict[str, Any]) -> None:
    line = _line({"ts": 1.5, "seq": 4, **want})
    rec = ev.parse(json.loads(line))
    assert rec.event == event and rec.extra == {}
    for name in ("cause", "why", "resume", "diagnosis"):
        if name == "cause" and isinstance(rec.event, ev.ComponentFatal):
            continue  # `fatal.cause` is the name of the dependency that failed (since 0.2)
        part = getattr(rec.event, name, None)
        assert part is None or isinstance(part, ev.Cause | ev.Resume | Diagnosis)
    assert _line(rec.to_dict()) == line
    assert _line(rec.event.to_dict(ts=rec.ts, seq=rec.seq)) == line  # the typed event alone gives it back


def test_the_typed_records_read_from_a_journal() -> None:
    lines = [_line({"ts": 1.0 + i, "seq": i + 1, **want}) for i, (_, want) in enumerate(CASES)]
    recs = [ev.parse(json.loads(x)) for x in lines]
    started = recs[0].event
    assert isinstance(started, ev.ComponentStarted) and started.resume == ev.Resume(40, "/ck/step_40")
    assert started.cause == EXIT_CAUSE
    exited = recs[3].event
    assert isinstance(exited, ev.ComponentExited) and exited.diagnosis is not None
    assert exited.diagnosis.category == "python_exception" and exited.diagnosis.evidence == ("ValueError: boom",)
    node = recs[5].event
    assert isinstance(node, ev.ComponentExited) and node.diagnosis is not None
    assert node.diagnosis.extra == {"node": "gpu-3", "slurm": {"state": "NODE_FAIL"}}
    fatal = recs[9].event
    assert isinstance(fatal, ev.ComponentFatal) and fatal.cause == "t" and fatal.why is not None
    assert fatal.why.component == "t" and fatal.why.seq is None
    assert [_line(r.to_dict()) for r in recs] == lines


def test_state_holds_the_dicts_of_the_journal() -> None:
    s = state_mod.initial({}, ["trainer", "inference", "t"])
    for i, (_, want) in enumerate(CASES[:4]):
        state_mod.apply(s, ev.parse({"ts": 1.0 + i, "seq": i + 1, **want}))
    t = s["components"]["trainer"]
    assert t["resume"] == {"step": 40, "checkpoint": "/ck/step_40"} and t["step"] == 40
    assert t["cause"] == {"by": "exit", "reason": "exit 1: boom", "seq": 12}
    assert s["components"]["t"]["last_exit"]["diagnosis"] == ENGINE_DIAG


@pytest.mark.parametrize("value", [
    {"by": "exit", "reason": "old"},  # no seq: an older writer's shape
    {"reason": "r", "by": "user", "seq": 3},  # another order
    {"by": "user", "reason": "r", "seq": "3", "extra": 1},  # a damaged line
])
def test_a_cause_of_another_shape_is_typed_and_passed_on_as_it_was(value: dict[str, Any]) -> None:
    line = _line({"ts": 1.0, "seq": 2, "kind": "restart_scheduled", "component": "t", "delay_s": 1.0, "attempt": 2,
                  "reason": "r", "cause": value})
    rec = ev.parse(json.loads(line))
    assert isinstance(rec.event, ev.RestartScheduled) and isinstance(rec.event.cause, ev.Cause)
    assert rec.event.cause.by == value["by"] and rec.event.cause.reason == value["reason"]
    assert _line(rec.to_dict()) == line
    assert ev.part_dict(rec, "cause") == value


def test_a_diagnosis_of_an_older_writer_keeps_its_keys() -> None:
    old = {"category": "killed", "summary": "killed by SIGKILL", "evidence": []}
    d = Diagnosis.from_dict(old)
    assert d.to_dict() == old and list(d.to_dict()) == list(old)
    assert Diagnosis("killed", "x").to_dict() == {"category": "killed", "summary": "x", "exception": None,
                                                  "location": None, "step": None, "evidence": [],
                                                  "library_location": False, "hint": ""}


def test_the_driver_fills_the_seq_a_cause_points_at() -> None:
    e = ev.ComponentStopping("t", by="rlsup", signal="SIGTERM", cause=ev.Cause("probe", "not ready", of="flag"))
    filled = lc.fill_event(e, {"flag": 41})
    assert isinstance(filled, ev.ComponentStopping) and filled.cause == ev.Cause("probe", "not ready", seq=41)
    # An `of` whose event was not emitted in the step is dropped all the same, seq left unknown.
    none = lc.fill_event(e, {})
    assert isinstance(none, ev.ComponentStopping) and none.cause is not None
    assert none.cause.to_dict() == {"by": "probe", "reason": "not ready", "seq": None}
    fatal = ev.ComponentFatal("t", reason="r", why=ev.Cause("spawn", "r", of="spawn_failed"))
    assert lc.fill_event(fatal, {"spawn_failed": 3}) == ev.ComponentFatal("t", reason="r", why=ev.Cause("spawn", "r", seq=3))
