"""The space rlsup reserves for its own records, on a full 2 MiB tmpfs (issue 26 item 5), unit by unit:
the journal's allocated tail, the state.json slots, the count of what could not be kept."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rlsup.supervisor.monitor.shim import RECORD_SIZE, SPARE_PREFIX, Record
from rlsup.supervisor.rundir.journal import Journal, StateFile, keep_spare_records, read_records
from tests.faults import harness

small_disk = harness.small_disk


def _fill(disk: Path) -> Path:
    fill = disk / "fill"
    fd = os.open(fill, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 16, 4096, 1):
            while True:
                try:
                    os.write(fd, b"x" * size)
                except OSError:
                    break
    finally:
        os.close(fd)
    st = os.statvfs(disk)
    assert st.f_bavail == 0
    return fill


def _event(i: int) -> dict:
    return {"seq": i, "kind": "started", "component": "trainer", "attempt": i, "note": "x" * 200}


def test_the_journal_takes_events_on_a_full_disk_within_its_reserve(small_disk):
    j = Journal(small_disk / "events.jsonl")
    _fill(small_disk)
    for i in range(1, 801):  # ~200 KiB of events, within the 256 KiB reserve
        j.append(_event(i), sync=False)
    assert j.pending == 0 and j.error is None
    assert j.close() == 0 and j.dropped == 0
    assert [r.seq for r in read_records(small_disk / "events.jsonl")] == list(range(1, 801))


def test_without_room_what_is_lost_is_counted(small_disk):
    j = Journal(small_disk / "events.jsonl", reserve=0)
    _fill(small_disk)
    for i in range(1, 201):
        j.append(_event(i), sync=False)
    j.MAX_PENDING = 50  # a disk full for very long: the oldest pending event goes, counted
    j.append(_event(201), sync=False)
    assert j.take_unsaid() == 1 and j.take_unsaid() == 0
    assert list(read_records(small_disk / "events.jsonl")) == []
    assert j.close() == 200 and j.dropped == 201  # the supervisor says so in supervisor.log
    raw = (small_disk / "events.jsonl").read_bytes()
    assert not raw or raw.endswith(b"\n")  # never a torn record


def test_state_json_is_replaced_atomically_on_a_full_disk(small_disk):
    sf = StateFile(small_disk / "state.json")
    sf.write(json.dumps({"n": 1, "pad": "y" * 9000}).encode())
    _fill(small_disk)
    for n in range(2, 6):  # each write goes to the slot readers do not see, then the link switches
        sf.write(json.dumps({"n": n, "pad": "z" * (8000 + n)}).encode())
        assert json.loads((small_disk / "state.json").read_text())["n"] == n
    assert os.stat(small_disk / "state.json").st_nlink == 2  # state.json is one of the slots


def test_a_record_is_created_in_a_spare_slot_on_a_full_disk_and_becomes_one_again(small_disk):
    mon = small_disk / "monitors"
    mon.mkdir()
    assert keep_spare_records(mon, 3) == 3
    _fill(small_disk)
    assert keep_spare_records(mon, 6) == 3  # no room: nothing tried
    rec = Record(str(mon / "trainer.6.json"), {"component": "trainer", "attempt": 6, "status": "running"})
    rec.prepare()
    rec.commit()
    assert json.loads((mon / "trainer.6.json").read_text())["attempt"] == 6
    assert os.path.getsize(mon / "trainer.6.json") == RECORD_SIZE
    assert rec.update(status="exited", exit_code=0)
    assert json.loads((mon / "trainer.6.json").read_text())["exit_code"] == 0
    assert sum(n.startswith(SPARE_PREFIX) for n in os.listdir(mon)) == 2
    rec.remove()
    assert not (mon / "trainer.6.json").exists()
    assert sum(n.startswith(SPARE_PREFIX) for n in os.listdir(mon)) == 3
