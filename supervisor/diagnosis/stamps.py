"""The time a log line carries, including times without a date or year.

Many real logs stamp lines with a partial time: rlsup's own demo and loguru-style loggers print
``02:27:53 message`` (a time of day, local), vLLM prints ``INFO 11-26 02:27:53 [api_server.py:42]``
(month-day, no year). Left undated, such lines could not be placed against the journal: run diagnosis
then counted an orchestrator's refused connections from 02:27:53 as symptoms of a trainer crash at
02:28:14 (seen on the README's crash@57 example).

:class:`LineClock` reads one log's lines in order (oldest first, across its rotations). A full ISO
stamp is absolute. A partial stamp becomes a *naive* time on a running clock: seconds since the first
stamp's day, counting a day each time the time of day goes back by more than 12 hours (a month-day stamp
counts years the same way). :meth:`LineClock.resolver` then places that running clock with one anchor,
the log's last write (its mtime), or the journal's last word when that is earlier (a run dir copied
without its times): the last partial stamp is put at the latest local time with its time of day (and
month-day) not after the anchor (plus a little slack for a clock that runs ahead); every other partial
stamp keeps its distance from it. Partial stamps are read as the local time of the machine that
diagnoses (rlsup diagnoses where the run dir is, which is where the stack wrote it); placed stamps that
fall outside the time the journal says the writer lived are dropped, not trusted.

Pure: no I/O; the local zone comes from :mod:`time`.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

# "2025-04-23 21:31:41", "2024-11-13T03:15:08.672Z", "[2025-04-23 21:31:41 TP0]"
_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?(Z|[+-]\d\d:?\d\d)?")
# vLLM's "INFO 11-26 02:27:53 [file.py:42]" (also after "(EngineCore_DP0 pid=7)"): month-day and time.
_MONTH_DAY = re.compile(r"(?<![\d-])(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,](\d+))?(?![\d:])")
# A time of day that starts the line: "02:27:53 step 21: ...", "[02:27:53] ...", "0: 02:27:53 | INFO |"
# (after an srun -l task label). Only at the start: a time inside a message is what the message is about.
_TIME_OF_DAY = re.compile(r"^\s*(?:\d+: )?\[?(\d\d):(\d\d):(\d\d)(?:[.,](\d+))?\]?(?![\d:])")

DAY = 86400.0
SLACK_S = 300.0  # a writer's clock may run this far ahead of the file's mtime
_LEAP_YEAR = 2000  # month-day stamps are counted on a leap year's calendar (Feb 29 exists), then re-placed

BARE = "time"  # a time of day
DATED = "month-day"  # a month, day and time of day


# Every stamp above has a time of day: one search for it finds where to look (most lines have none).
_HMS = re.compile(r"\d\d:\d\d:\d\d")


def _iso_seconds(m: re.Match[str]) -> float | None:
    y, mo, d, h, mi, s, frac, tz = m.groups()
    try:
        dt = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=timezone.utc)
    except ValueError:
        return None
    ts = dt.timestamp() + (float("0." + frac) if frac else 0.0)
    if tz and tz != "Z":
        ts -= (1 if tz[0] == "+" else -1) * (int(tz[1:3]) * 3600 + int(tz[-2:]) * 60)
    # a log line's time without a zone is read as UTC: its ordering matters, not its zone
    return ts


def _partial(text: str, at: int) -> tuple[str, float] | None:
    """(kind, seconds): a month-day stamp as seconds into the leap year, a time of day as seconds into
    the day; None for a line without one (or with an impossible one). ``at``: where the first time of
    day in ``text`` starts."""
    m = _MONTH_DAY.match(text, max(0, at - 6))
    if m:
        mo, d, h, mi, s, frac = m.groups()
        try:
            dt = datetime(_LEAP_YEAR, int(mo), int(d), int(h), int(mi), int(s), tzinfo=timezone.utc)
        except ValueError:
            return None
        return DATED, (dt - datetime(_LEAP_YEAR, 1, 1, tzinfo=timezone.utc)).total_seconds() + (float("0." + frac) if frac else 0.0)
    m = _TIME_OF_DAY.match(text)
    if m:
        h, mi, s, frac = m.groups()
        if int(h) > 23 or int(mi) > 59 or int(s) > 60:
            return None
        return BARE, int(h) * 3600 + int(mi) * 60 + int(s) + (float("0." + frac) if frac else 0.0)
    return None


class LineClock:
    """One log's stamps, read in order. :meth:`read` gives a line's absolute time, or its naive time on
    the running clock of its kind; :meth:`resolver` turns naive times into absolute ones."""

    def __init__(self) -> None:
        # per kind: [periods counted (days or years), the previous stamp's seconds, the last naive time]
        self._runs: dict[str, list[float]] = {}
        self._first: dict[str, float] = {}  # per kind: the first stamp's naive time

    def read(self, text: str) -> tuple[float | None, tuple[str, float] | None]:
        """(absolute, None) for a full stamp, (None, (kind, naive)) for a partial one, (None, None)."""
        hms = _HMS.search(text)
        if hms is None:
            return None, None
        at = hms.start()
        if at > 12 or not _TIME_OF_DAY.match(text):  # a time of day that starts the line is its stamp
            # "YYYY-MM-DD " before it, else a time of day in the message before a dated stamp (rare)
            iso = (_ISO.match(text, at - 11) if at >= 11 else None) or _ISO.search(text, at)
            if iso and (ts := _iso_seconds(iso)) is not None:
                return ts, None
        p = _partial(text, at)
        if p is None:
            return None, None
        kind, secs = p
        period = DAY if kind == BARE else 366 * DAY
        run = self._runs.get(kind)
        if run is None:
            run = self._runs[kind] = [0.0, secs, 0.0]
            self._first[kind] = secs
        elif secs < run[1] - period / 2:  # the clock went round: midnight (or new year) passed
            run[0] += 1
        run[1] = secs
        run[2] = run[0] * period + secs
        return None, (kind, run[2])

    def resolver(self, anchor: float | None,
                 window: tuple[float, float] | None = None) -> Callable[[str, float], float | None]:
        """A function (kind, naive) -> unix seconds, placed as the module says; None without an anchor, and
        for a kind whose first or last stamp lands outside ``window`` (when the journal says the writer lived):
        stamps that contradict the journal (another zone, a log copied in) are no evidence."""
        placed: dict[str, float] = {}
        if anchor is not None:
            for kind, (_n, _secs, last) in self._runs.items():
                at = _place(kind, last, anchor + SLACK_S)
                if at is None:
                    continue
                off = at - last  # naive -> absolute offset
                first = self._first[kind] + off
                if window is not None and not (window[0] - SLACK_S <= first and at <= window[1] + SLACK_S):
                    continue
                placed[kind] = off

        def resolve(kind: str, naive: float) -> float | None:
            off = placed.get(kind)
            return None if off is None else naive + off

        return resolve


def _place(kind: str, naive: float, limit: float) -> float | None:
    """The latest local time not after ``limit`` whose time of day (and, for DATED, month-day) is that
    of ``naive``."""
    local = datetime.fromtimestamp(limit)
    if kind == BARE:
        tod = naive % DAY
        day = datetime(local.year, local.month, local.day) + timedelta(seconds=tod)
        at = time.mktime(day.timetuple()) + (tod % 1)
        return at if at <= limit else at - DAY
    into = naive % (366 * DAY)
    start = datetime(_LEAP_YEAR, 1, 1)
    when = start + timedelta(seconds=into)
    for year in (local.year, local.year - 1, local.year - 2, local.year - 3, local.year - 4):
        if when.month == 2 and when.day == 29 and not calendar.isleap(year):
            continue
        at = time.mktime(when.replace(year=year).timetuple()) + (into % 1)
        if at <= limit:
            return at
    return None
