"""One attempt's output read back by the range its `started` event recorded, across log rotations."""

from __future__ import annotations

import os

from rlsup.supervisor.rundir.attemptlog import Mark, find, lines_of, ranges, read_bytes


def _started(attempt: int, seq: int, ino: int | None, offset: int) -> dict:
    return {"kind": "started", "component": "t", "attempt": attempt, "seq": seq, "log_seq": seq,
            "log_ino": ino, "log_offset": offset}


def test_an_attempt_reads_only_its_own_bytes_across_a_rotation(tmp_path):
    log = tmp_path / "t.log"
    log.write_bytes(b"a1 one\na1 two\n")
    ino1 = os.stat(log).st_ino
    start2 = Mark(ino1, log.stat().st_size)
    with open(log, "ab") as f:
        f.write(b"a2 one\n")
    os.rename(log, tmp_path / "t.log.1")  # the monitor rotates: attempt 2 goes on in a new file
    log.write_bytes(b"a2 two\n")
    ino2 = os.stat(log).st_ino
    start3 = Mark(ino2, log.stat().st_size)
    with open(log, "ab") as f:
        f.write(b"a3 only\n")
    events = [_started(1, 1, None, 0), _started(2, 5, start2.ino, start2.offset),
              _started(3, 9, start3.ino, start3.offset)]
    rs = ranges(events, "t")
    assert [r.attempt for r in rs] == [1, 2, 3]
    got = {r.attempt: lines_of(read_bytes(log, r.start, r.end)[0]) for r in rs}
    assert got == {1: ["a1 one", "a1 two"], 2: ["a2 one", "a2 two"], 3: ["a3 only"]}
    assert find(events, "t", 2).start == start2 and find(events, "t", 7) is None


def test_an_attempt_that_wrote_nothing_reads_nothing(tmp_path):
    log = tmp_path / "t.log"
    log.write_bytes(b"a1 ValueError: bad batch\n")
    ino = os.stat(log).st_ino
    end = log.stat().st_size
    events = [_started(1, 1, None, 0), _started(2, 3, ino, end), _started(3, 3, ino, end)]
    r2 = find(events, "t", 2)
    assert read_bytes(log, r2.start, r2.end) == (b"", False)


def test_the_last_bytes_of_a_long_attempt_start_at_a_line(tmp_path):
    log = tmp_path / "t.log"
    log.write_bytes(b"".join(b"line %05d\n" % i for i in range(1000)))
    data, partial = read_bytes(log, Mark(os.stat(log).st_ino, 0), None, max_bytes=105)
    assert partial and lines_of(data)[0].startswith("line 00") and lines_of(data)[-1] == "line 00999"
    assert len(lines_of(data)) == 9  # 105 bytes: 9 whole lines of 11 bytes, the cut one dropped


def test_diagnose_run_dir_reads_only_the_last_attempts_output_when_no_exit_was_journaled(tmp_path):
    # A supervisor that died before journaling the exit of attempt 2: `rlsup diagnose RUN_DIR` falls back
    # to the log; the ValueError of attempt 1 is not attempt 2's failure.
    import json

    from rlsup.supervisor.diagnosis import diagnose_run

    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "t.log"
    log.write_bytes(b"Traceback (most recent call last):\n  File \"/x/t.py\", line 7, in <module>\n"
                    b"    raise ValueError('bad batch shape')\nValueError: bad batch shape\n")
    st = os.stat(log)
    with open(log, "ab") as f:
        f.write(b"loading model shards 1/4\n")
    events = [{"ts": 1.0, "seq": 1, "kind": "run_started", "component": None, "name": "r", "components": ["t"]},
              {"ts": 2.0, "seq": 2, "kind": "started", "component": "t", "attempt": 1, "pid": 1, "log_seq": 0,
               "log_offset": 0, "log_ino": None},
              {"ts": 3.0, "seq": 3, "kind": "started", "component": "t", "attempt": 2, "pid": 2, "log_seq": 4,
               "log_offset": st.st_size, "log_ino": st.st_ino}]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    rd = diagnose_run(tmp_path)
    assert not [f for f in rd.failures if f.category == "python_exception"], [f.to_dict() for f in rd.failures]
