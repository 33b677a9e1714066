"""Text bars for gauges, nvitop style, and a component's step count: pure functions of value and width (no
textual), each bar exactly as wide as asked; the TUI maps :func:`level` to a CSS class for colours."""

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
    return "crit" if pct >= CRIT_PCT else "warn" if pct >= WARN_PCT else "ok"


def bar(pct: float | None, width: int, *, empty: str = " ") -> str:
    """A bar of exactly ``width`` cells filled to ``pct`` percent (clamped to 0..100), in eighths of a cell
    (:data:`EIGHTHS`), rounded down: only 100% is full. Unknown (None/NaN) is all ``empty``."""
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
    gb = mb / 1024
    return f"{mb:.0f}M" if round(mb) < 1024 else f"{gb:.1f}G" if round(gb, 1) < 1024 else f"{gb / 1024:.1f}T"


def _fit(text: str, width: int) -> str:
    if width <= 0 or len(text) <= width:
        return text.ljust(width) if width > 0 else ""
    return text[: width - 1] + "…" if width > 1 else text[:1]


def _line(label: str, pct: float | None, text: str, width: int) -> str:
    head = f"{label} " if label else ""
    tail = f" {text}"
    bar_w = width - len(head) - len(tail)
    if bar_w < 1:  # too narrow for a bar: keep the numbers, they carry the information
        return _fit(f"{head}{text}", width)
    return head + bar(pct, bar_w) + tail


def bar_line(label: str, used: float | None, total: float | None, width: int) -> str:
    """``"MEM ████▌      12.3G/80.0G"`` in exactly ``width`` cells, for MiB figures (unknown used: "N/A";
    unknown total: the used value alone; either with an empty bar)."""
    if used is None or (isinstance(used, float) and math.isnan(used)):
        return _line(label, None, "N/A", width)
    if total is None or total <= 0:
        return _line(label, None, fmt_mem(used), width)
    return _line(label, 100.0 * used / total, f"{fmt_mem(used)}/{fmt_mem(total)}", width)


def step_text(c: Mapping[str, Any]) -> str:
    """A component's step, ``"57/200"`` with a total, ``"-"`` before any (the status, the report, the TUI)."""
    return "-" if c.get("step") is None else f"{c['step']}/{c['total']}" if c.get("total") else str(c["step"])


def pct_line(label: str, pct: float | None, width: int) -> str:
    """``"UTL ███████▍   74%"`` in exactly ``width`` cells; "N/A" when unknown."""
    if pct is None or not _valid(pct):
        return _line(label, None, " N/A", width)
    return _line(label, pct, f"{pct:3.0f}%", width)
