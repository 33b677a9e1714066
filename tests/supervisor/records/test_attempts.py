"""One attempt model from the journal's records, one exit text, one replay of a run dir."""

from __future__ import annotations

import json
from pathlib import Path

from rlsup.supervisor.diagnosis import AttemptRecord, detect_attempt_patterns
from rlsup.supervisor.records import events as ev
from rlsup.supervisor.records.attempts import from_records
from rlsup.supervisor.records.diagnosis import Diagnosis
from rlsup.supervisor.records.phrases import describe_exit
from rlsup.supervisor.rundir.layout import RunPaths
from rlsup.supervisor.rundir.replay import read_run


def _records() -> list[ev.Record]:
    es = [
        ev.RunStarted(None, name="r", components=["t"]),
        ev.ComponentStarted("t", pid=1, attempt=1, log_offset=0),
        ev.ComponentExited("t", exit_code=1, uptime_s=2.0, diagnosis=Diagnosis.from_dict({
            "category": "python_exception", "exception": "ValueError: bad"})),
        ev.RestartScheduled("t", delay_s=1.0, attempt=2, reason="exit 1"),
        ev.ComponentStarted("t", pid=2, attempt=2, log_offset=10),
        ev.ComponentReady("t", probe="none"),
        ev.ComponentExited("t", exit_code=None, signal="SIGKILL", uptime_s=1.4,
                           diagnosis=Diagnosis.from_dict({"category": "killed"})),
        ev.ComponentStopped("t", by="user"),
        ev.ComponentStarted("t", pid=3, attempt=3),
    ]
    return [ev.parse(e.to_dict(ts=100.0 + i, seq=i + 1)) for i, e in enumerate(es)]


def test_attempts_from_records_each_with_its_own_exit() -> None:
    atts = from_records(_records())["t"]
    assert [a.attempt for a in atts] == [1, 2, 3]
    one, two, three = atts
    assert one.failed and one.judged_failed and one.diagnosis.exception_type == "ValueError"
    assert isinstance(one.outcome and one.outcome.event, ev.RestartScheduled)
    assert two.ready and two.ready_at == 105.0 and two.diagnosis.category == "killed"
    assert two.failed and not two.judged_failed  # stopped on purpose: not counted as a failure
    assert two.exit_text() == "killed by SIGKILL" and two.exit_text(bare_signal=True) == "SIGKILL"
    assert not three.ended and three.exit_text() == "running" and not three.failed
    assert two.started is not None and two.started.log_offset == 10


def test_one_exit_text() -> None:
    assert describe_exit(None, None) == "exit ?" and describe_exit(1, None) == "exit 1"
    assert describe_exit(None, "SIGKILL") == "killed by SIGKILL"
    assert describe_exit(None, "SIGKILL", bare_signal=True) == "SIGKILL"


def test_patterns_judge_the_same_model() -> None:
    from rlsup.supervisor.records.diagnosis import Diagnosis

    d = Diagnosis("unknown", "x")
    hist = [AttemptRecord(attempt=i, started_at=float(i), ended_at=i + 1.0, ready=False, exit_code=None,
                          signal="SIGKILL", step=None, resumed_step=None, diagnosis=d) for i in (1, 2, 3)]
    flags = detect_attempt_patterns(hist, total=None)
    loop = next(f for f in flags if f.type == "crash_loop")
    assert loop.evidence[0] == "attempt 1: up 1.0 s, SIGKILL, unknown"


def test_replay_reads_the_journal_once_into_records_and_state(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path)
    recs = _records() + [ev.parse(ev.RunEnded(None, exit_code=0, reason="done").to_dict(ts=200.0, seq=99))]
    paths.events.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in recs) + '{"torn')
    paths.state.write_text(json.dumps({"components": {"t": {"step": 7, "total": 10, "rate": 2.0}},
                                       "gpus": [{"index": 0}]}))
    rp = read_run(paths)
    assert [r.seq for r in rp.records] == [r.seq for r in recs] and rp.seq == 99
    start, end = rp.last_run
    assert start is not None and end is not None and isinstance(end.event, ev.RunEnded)
    assert rp.journal_state["components"]["t"]["step"] is None  # progress is not journaled
    final = rp.final_state()
    assert final["components"]["t"]["step"] == 7 and final["components"]["t"]["rate"] is None
    assert rp.final_state(keep_rates=True)["components"]["t"]["rate"] == 2.0
    assert final["gpus"] == [{"index": 0}] and final["run"]["exit_code"] == 0
