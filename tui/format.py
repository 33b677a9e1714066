"""Pure text helpers for the TUI: durations, rates, sparklines, control-character guards.

No textual or rich here, so these are trivially testable and cheap to call on every refresh.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from rlsup.supervisor.events import fmt_duration

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


def sparkline(values: Sequence[float | None], width: int) -> str:
    """The last ``width`` values as block glyphs scaled between their min and max.

    Unknown values (None/NaN) are blanks; a flat series is a row of mid-height blocks.
    Always exactly ``min(width, len(values))`` cells.
    """
    if width <= 0:
        return ""
    vals = list(values)[-width:]
    finite = [v for v in vals if v is not None and not math.isnan(v)]
    if not finite:
        return " " * len(vals)
    lo, hi = min(finite), max(finite)
    span = hi - lo
    out = []
    for v in vals:
        if v is None or math.isnan(v):
            out.append(" ")
        elif span == 0:
            out.append(SPARK[len(SPARK) // 2])
        else:
            out.append(SPARK[min(len(SPARK) - 1, int((v - lo) / span * (len(SPARK) - 1) + 0.5))])
    return "".join(out)


def clean_lines(lines: list[str]) -> list[str]:
    """Make a batch of log lines safe to paint: tabs expanded, control characters shown as ``\ufffd``.

    Works on the whole batch at once (one join, one regex search) because this runs for every
    line the supervisor sends; clean text, the common case, is returned as is.
    """
    if not lines:
        return lines
    joined = "\n".join(lines)
    if _SUSPECT.search(joined) is None and joined.count("\n") == len(lines) - 1:
        return lines
    return [_CONTROL.sub("\ufffd", line.expandtabs(4)) for line in lines]
