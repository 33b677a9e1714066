"""Log lines stamped with a time of day (rlsup's demo, loguru) or a month-day (vLLM), placed in time by the
log's last write and checked against the journal (supervisor/diagnosis/stamps.py)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from rlsup.supervisor.diagnosis.stamps import BARE, DATED, LineClock


def local(*args: int) -> float:
    return time.mktime(datetime(*args).timetuple())  # type: ignore[arg-type]


def utc(*args: int) -> float:
    return datetime(*args, tzinfo=timezone.utc).timestamp()  # type: ignore[arg-type,misc]


def place(lines: list[str], anchor: float | None, window: tuple[float, float] | None = None) -> list[float | None]:
    clock = LineClock()
    read = [clock.read(x) for x in lines]
    resolve = clock.resolver(anchor, window)
    return [ts if ts is not None else (resolve(*p) if p is not None else None) for ts, p in read]


def test_times_of_day_are_placed_by_the_last_write_across_midnight() -> None:
    anchor = local(2026, 11, 26, 0, 0, 10)
    got = place(["23:59:58 step 20: waiting", "traceback line without a time", "00:00:03 step 21: refused"], anchor)
    assert got == [anchor - 12, None, anchor - 7]


def test_a_time_inside_a_message_is_not_the_lines_time() -> None:
    assert place(["step 5 finished at 12:00:00", "ETA 00:05:00 left"], local(2026, 1, 1, 13)) == [None, None]


def test_srun_labels_brackets_and_fractions() -> None:
    anchor = local(2026, 5, 1, 10, 0, 0)
    got = place(["0: 09:59:00 | INFO | loading", "[09:59:30.250] ready", "1: 09:59:59,5 done"], anchor)
    assert got == [anchor - 60, anchor - 29.75, anchor - 0.5]


def test_vllm_month_day_stamps_across_new_year() -> None:
    anchor = local(2027, 1, 1, 0, 0, 5)
    got = place(["INFO 12-31 23:59:59 [api_server.py:1] serving",
                 "(EngineCore_DP0 pid=7) ERROR 01-01 00:00:01 [core.py:2] EngineCore failed"], anchor)
    assert got == [anchor - 6, anchor - 4]


def test_a_full_date_is_absolute_and_wins_over_a_partial_one() -> None:
    clock = LineClock()
    ts, partial = clock.read("[2025-04-23 21:31:41 TP0] Scheduler hit an exception")
    assert ts == utc(2025, 4, 23, 21, 31, 41) and partial is None
    assert clock.read("12:00:00 x") == (None, (BARE, 12 * 3600))
    assert clock.read("INFO 02-29 00:00:00 [a.py:1] x")[1][0] == DATED  # type: ignore[index]


def test_impossible_stamps_and_no_anchor_place_nothing() -> None:
    assert place(["25:00:00 x", "INFO 13-40 00:00:00 [a.py:1] y"], local(2026, 1, 1)) == [None, None]
    assert place(["10:00:00 x"], None) == [None]


def test_stamps_that_contradict_the_journal_are_not_used() -> None:
    """A log whose stamps fall outside the time the journal says its writer lived (another zone, a copy
    of some other run's log) places nothing, rather than something wrong."""
    anchor = local(2026, 11, 26, 12, 0, 0)
    lines = ["11:00:00 start", "11:59:00 refused"]
    assert place(lines, anchor, (anchor - 7200, anchor)) == [anchor - 3600, anchor - 60]
    assert place(lines, anchor, (anchor - 600, anchor)) == [None, None]  # it ran for 10 min, not 1 h
    assert place(["INFO 03-11 19:53:36 [a.py:1] refused"], local(2025, 6, 16), (local(2025, 6, 15),
                                                                                local(2025, 6, 16))) == [None]


def test_the_stamp_is_the_lines_own_not_a_time_in_its_message() -> None:
    anchor = local(2026, 1, 1, 12, 0, 1)
    assert place(["deadline 12:00:00 passed [2025-04-23 21:31:41] Scheduler hit an exception",
                  "12:00:00 resumed from a checkpoint written 2025-12-31 08:00:00"], anchor) == [
        utc(2025, 4, 23, 21, 31, 41), anchor - 1]
