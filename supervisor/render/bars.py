"""Text bars for gauges (GPU util/memory, host CPU/RAM), nvitop style, and the step count of a
component's progress (:func:`step_text`, shared by ``rlsup status``, the report and the TUI).

Pure functions of value and width, no textual/rich: the TUI renders the strings and maps
:func:`level` to a CSS class (``ok``/``warn``/``crit``/``na``) so colours live in the .tcss theme.
Every bar function returns exactly the width it was asked for (one cell per character; an empty
glyph passed in must be single-cell).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

EIGHTHS = "▏▎▍▌▋▊▉"  # 1/8 .. 7/8 of a cell
WARN_PCT, CRIT_PCT = 70, 90  # a gauge's "warn" and "crit" levels


def _valid(pct: float | None) -> bool:
    return pct is not None and not math.isnan(pct)


def level(pct: float | None) -> str:
    """Severity class of a percentage: "na" (unknown), "ok" (< WARN_PCT), "warn" (< CRIT_PCT), "crit"."""
    if pct is None or not _valid(pct):
        return "na"
    if pct >= CRIT_PCT:
        return "crit"
    if pct >= WARN_PCT:
        return "warn"
    return "ok"


def bar(pct: float | None, width: int, *, empty: str = " ") -> str:
    """A bar of exactly ``width`` cells filled to ``pct`` percent (clamped to 0..100).

    A partly filled cell is one of :data:`EIGHTHS`: a cell has 8 steps. Fill rounds down, so only
    100% is a full bar. Unknown (None/NaN) is all ``empty``.
    """
    if width <= 0:
        return ""
    if pct is None or not _valid(pct):
        return empty * width
    frac = min(max(pct, 0.0), 100.0) / 100.0
    n = int(frac * width * 8 + 1e-9)  # epsilon: 50% of 10 cells is 40 eighths, not 39.999...
    cells, rem = divmod(n, 8)
    out = "█" * cells
    if rem and cells < width:
        out += EIGHTHS[rem - 1]
    return out + empty * (width - len(out))


def fmt_mem(mb: float | None) -> str:
    """Compact size of a MiB figure: "512M", "1.2G", "79.6G", "1.5T"; "N/A" when unknown."""
    if mb is None or math.isnan(mb):
        return "N/A"
    if round(mb) < 1024:
        return f"{mb:.0f}M"
    gb = mb / 1024
    if round(gb, 1) < 1024:
        return f"{gb:.1f}G"
    return f"{gb / 1024:.1f}T"


def _fit(text: str, width: int) -> str:
    if width <= 0:
        return ""
    if len(text) > width:
        return text[: width - 1] + "…" if width > 1 else text[:1]
    return text.ljust(width)


def _line(label: str, pct: float | None, text: str, width: int) -> str:
    head = f"{label} " if label else ""
    tail = f" {text}"
    bar_w = width - len(head) - len(tail)
    if bar_w < 1:  # too narrow for a bar: keep the numbers, they carry the information
        return _fit(f"{head}{text}", width)
    return head + bar(pct, bar_w) + tail


def bar_line(label: str, used: float | None, total: float | None, width: int) -> str:
    """``"MEM ████▌      12.3G/80.0G"`` in exactly ``width`` cells, for MiB figures.

    The bar shows used/total; the text shows both values (:func:`fmt_mem`). Unknown used -> "N/A"
    and an empty bar; unknown total -> just the used value and an empty bar.
    """
    if used is None or (isinstance(used, float) and math.isnan(used)):
        return _line(label, None, "N/A", width)
    if total is None or total <= 0:
        return _line(label, None, fmt_mem(used), width)
    return _line(label, 100.0 * used / total, f"{fmt_mem(used)}/{fmt_mem(total)}", width)


def step_text(c: Mapping[str, Any]) -> str:
    """A component's step, ``"57/200"`` with a total, ``"-"`` before any (the status, the report, the TUI)."""
    if c.get("step") is None:
        return "-"
    return f"{c['step']}/{c['total']}" if c.get("total") else str(c["step"])


def pct_line(label: str, pct: float | None, width: int) -> str:
    """``"UTL ███████▍   74%"`` in exactly ``width`` cells; "N/A" when unknown."""
    if pct is None or not _valid(pct):
        return _line(label, None, " N/A", width)
    return _line(label, pct, f"{pct:3.0f}%", width)
