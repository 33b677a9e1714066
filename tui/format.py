"""Pure text helpers for the TUI: durations, rates, sizes, sparklines, braille charts, failure
causes, control-character guards.

No textual or rich here, so these are trivially testable and cheap to call on every refresh.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeGuard, TypeVar

from rlsup.supervisor.records.events import fmt_duration
from rlsup.supervisor.render.bars import fmt_mem

T = TypeVar("T")
SPARK = "▁▂▃▄▅▆▇█"
# C0 controls except \t, plus DEL and the C1 range: never let a child's bytes drive the terminal.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_SUSPECT = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # as _CONTROL, plus tab, minus the joining newline


def fmt_dur(s: float | None) -> str:
    """``"42s"``, ``"3m05s"``, ``"2h07m"``, ``"3d04h"``; ``"-"`` when unknown."""
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "-"
    s = max(0.0, float(s))
    return f"{s:.0f}s" if s < 60 else fmt_duration(s)  # whole seconds: table cells stay narrow


def local_hms(ts: float) -> str:
    """A wall-clock time of this machine's day: ``"14:03:27"``."""
    return time.strftime("%H:%M:%S", time.localtime(ts))


def fmt_rate(rate: float | None) -> str:
    """Steps per second, switching to seconds per step when slow: ``"2.31/s"``, ``"14.0s/it"``."""
    if rate is None or rate <= 0 or math.isnan(rate):
        return "-"
    if rate >= 1:
        return f"{rate:.2f}/s"
    return f"{1 / rate:.1f}s/it"


def fmt_num(v: float | None) -> str:
    """A metric value in at most ~7 cells."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, int) or (abs(v) >= 1000 and float(v).is_integer()):
        return f"{int(v)}"
    return f"{v:.4g}"


def fmt_cpu(pct: float | None) -> str:
    """A process tree's CPU use in % of one core: ``"3%"``, ``"187%"``, ``"0.4%"``; ``"-"`` when unknown."""
    if pct is None or math.isnan(pct):
        return "-"
    return f"{pct:.1f}%" if pct < 10 else f"{pct:.0f}%"


def fmt_mb(mb: float | None) -> str:
    """A size in MiB for a table cell: ``"512M"``, ``"1.2G"``; ``"-"`` when unknown."""
    return "-" if mb is None or math.isnan(mb) else fmt_mem(mb)


def clip(s: str, n: int) -> str:
    """``s`` in at most ``n`` characters: cut, with an ellipsis last, where it is longer."""
    return s if len(s) <= n else s[: max(0, n - 1)] + "…"


def separated(out: Any, items: Iterable[T], sep: str) -> Iterator[T]:
    """``items``, appending ``sep`` to ``out`` (a :class:`rich.text.Text`) between two of them."""
    for i, item in enumerate(items):
        if i:
            out.append(sep)
        yield item


def _finite(v: float | None) -> TypeGuard[float]:
    return v is not None and not math.isnan(v) and not math.isinf(v)


def sparkline(values: Sequence[float | None], width: int, lo: float | None = None,
              hi: float | None = None) -> str:
    """The last ``width`` values as block glyphs scaled between ``lo`` and ``hi`` (default: their own
    min and max), exactly ``min(width, len(values))`` cells; unknown values are blanks, a flat series mid-height."""
    if width <= 0:
        return ""
    vals = list(values)[-width:]
    finite = [v for v in vals if _finite(v)]
    if not finite:
        return " " * len(vals)
    lo = min(finite) if lo is None else min(lo, *finite)
    hi = max(finite) if hi is None else max(hi, *finite)
    span, top = hi - lo, len(SPARK) - 1
    return "".join(" " if not _finite(v) else SPARK[len(SPARK) // 2] if span == 0
                   else SPARK[min(top, int((v - lo) / span * top + 0.5))] for v in vals)


def clean_lines(lines: list[str]) -> list[str]:
    """Make a batch of log lines safe to paint: tabs expanded, control characters shown as ``\ufffd``.
    Clean text, the common case for every line sent, is recognised by one C-level ``isprintable``
    over the whole batch and returned as is."""
    if not lines:
        return lines
    if "".join(lines).isprintable():
        return lines
    joined = "\n".join(lines)
    if _SUSPECT.search(joined) is None and joined.count("\n") == len(lines) - 1:
        return lines  # unprintable to Python but harmless to a terminal (a soft hyphen, a zero-width space)
    return [_CONTROL.sub("\ufffd", line.expandtabs(4)) for line in lines]


# ---------------------------------------------------------------------------------- charts

Point = tuple[float, float]


def history_points(h: dict[str, Any] | None) -> list[Point]:
    """``(step, value)`` pairs of one metric's full-run history (``[[step, mean, count], ...]``)."""
    return [(p[0], p[1]) for p in (h or {}).get("points") or [] if len(p) >= 2 and _finite(p[1])]


def resample(points: Sequence[Point], n: int) -> list[float | None]:
    """``n`` columns over the points' range, each the mean of the points that fall in it, None where
    none does. Points must be sorted by x."""
    if n <= 0 or not points:
        return []
    x0 = points[0][0]
    span = points[-1][0] - x0
    sums = [0.0] * n
    counts = [0] * n
    for x, y in points:
        col = 0 if span <= 0 else min(n - 1, max(0, int((x - x0) / span * n)))
        sums[col] += y
        counts[col] += 1
    return [sums[i] / counts[i] if counts[i] else None for i in range(n)]


_BRAILLE_BITS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))  # [row][column] within a cell


def braille_chart(points: Sequence[Point], width: int, height: int, lo: float, hi: float) -> list[str]:
    """A line chart of ``points`` (sorted by x) in ``height`` rows of ``width`` braille cells, y scaled
    to ``[lo, hi]``. Each dot column is drawn from the lowest to the highest value in it (spikes survive
    the downsampling); columns are joined and gaps interpolated, so the line is continuous."""
    if width <= 0 or height <= 0:
        return []
    if not points:
        return [chr(0x2800) * width for _ in range(height)]
    x0 = points[0][0]
    columns = _dot_columns(points, width * 2, height * 4, x0, points[-1][0] - x0, lo, hi)
    grid = [[0] * width for _ in range(height)]

    def vline(c: int, a: int, b: int) -> None:
        for r in range(min(a, b), max(a, b) + 1):
            grid[r // 4][c // 2] |= _BRAILLE_BITS[r % 4][c % 2]

    prev: tuple[int, int] | None = None  # the previous column with data, and the row its line leaves at
    for c, col in enumerate(columns):
        if col is None:
            continue
        low, high, first, last = col
        if prev is not None:
            pc, start = prev
            pr = start
            for k in range(pc + 1, c):  # interpolate across empty columns
                r = round(start + (first - start) * (k - pc) / (c - pc))
                vline(k, pr, r)
                pr = r
            vline(c, pr, first)
        vline(c, high, low)
        prev = (c, last)
    return ["".join(chr(0x2800 + b) for b in row) for row in grid]


def _dot_columns(points: Sequence[Point], cols: int, rows: int, x0: float, xspan: float, lo: float,
                 hi: float) -> list[list[int] | None]:
    """Each dot column's points as rows (row 0 is the top): ``[low, high, first, last]``, the lowest
    value's row (the largest number), the highest's, where the line comes in and where it leaves;
    None where no point falls."""
    yspan = hi - lo
    out: list[list[int] | None] = [None] * cols
    for x, y in points:
        c = 0 if xspan <= 0 else min(cols - 1, max(0, int((x - x0) / xspan * cols)))
        d = rows // 2 if yspan <= 0 else min(rows - 1, max(0, round((hi - y) / yspan * (rows - 1))))
        col = out[c]
        if col is None:
            out[c] = [d, d, d, d]
        else:
            col[0], col[1], col[3] = max(col[0], d), min(col[1], d), d
    return out


# ---------------------------------------------------------------------------------- failures

_EMBEDDED_EXC = re.compile(r"\(([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b:[^()]*)\)")
_PROG_PREFIX = re.compile(r"^(?:/\S+|python\S*): ")


def failure_cause(diag: dict[str, Any] | None) -> str:
    """The cause of a failure in one short phrase for a table cell: the diagnosis summary, with
    an exception embedded in a tool's wrapper message brought forward (``Error while finding
    module specification for 'sglang.launch_server' (ModuleNotFoundError: No module named
    'sglang')`` reads ``ModuleNotFoundError: No module named 'sglang'``)."""
    if not diag or diag.get("category") in (None, "none"):
        return ""
    summary = str(diag.get("summary") or diag.get("exception") or diag.get("category") or "")
    if m := _EMBEDDED_EXC.search(summary):
        return m.group(1).strip()
    return _PROG_PREFIX.sub("", summary, count=1)
