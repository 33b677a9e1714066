"""An ended run's log lines are numbered as the live supervisor numbered them, so the journal's
``log_seq`` (where each attempt's output starts) points at the same lines on re-attach."""

from __future__ import annotations

import os

from rlsup.supervisor.records.redact import Redactor
from rlsup.supervisor.rundir.archive import _ring_from_log
from rlsup.supervisor.rundir.logs import Position


def _log(tmp_path, n: int, partial: bool = False):
    p = tmp_path / "trainer.log"
    p.write_bytes(b"".join(b"line %d\n" % i for i in range(n)) + (b"no newline yet" if partial else b""))
    return p


def test_numbered_from_the_last_recorded_position_plus_what_came_after(tmp_path):
    p = _log(tmp_path, 100)
    # The supervisor had read 90 lines of this file, the 1,090th line of the log being next (older
    # lines are in rotated files); 10 more lines came after its last record.
    offset = sum(len(b"line %d\n" % i) for i in range(90))
    ring = _ring_from_log(p, Redactor(), Position(os.stat(p).st_ino, offset, 1090))
    assert ring.next_seq == 1100
    assert ring.first_seq == 1000


def test_an_unterminated_last_line_counts_as_the_ring_counts_it(tmp_path):
    p = _log(tmp_path, 10, partial=True)
    ring = _ring_from_log(p, Redactor(), Position(os.stat(p).st_ino, 0, 500))
    assert ring.next_seq == 511 and ring.tail(1)[1] == ["no newline yet"]


def test_a_position_in_another_file_is_not_used(tmp_path):
    p = _log(tmp_path, 10)
    ring = _ring_from_log(p, Redactor(), Position(os.stat(p).st_ino + 1, 0, 5000))
    assert ring.next_seq == 10
    assert _ring_from_log(p, Redactor()).next_seq == 10
