"""One metric against step over the whole run: a braille line chart with its axis ranges.

Drawn with Textual's own means (a widget rendering text; the braille canvas is
:func:`rlsup.tui.format.braille_chart`): the history is downsampled to the widget's width, y runs
from the run's minimum to its maximum with both shown on the axis, x from the first step to the last.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widget import Widget

from rlsup.tui.format import braille_chart, fmt_num, history_points

AXIS_W = 9  # y labels


class MetricChart(Widget):
    COMPONENT_CLASSES = {"chart--line", "chart--axis", "chart--title", "chart--note"}
    DEFAULT_CSS = """
    MetricChart { height: 10; padding: 0 1; margin-bottom: 1; }
    MetricChart > .chart--line { color: $accent; }
    MetricChart > .chart--axis { color: $text-muted; }
    MetricChart > .chart--title { text-style: bold; }
    MetricChart > .chart--note { color: $text-muted; }
    """

    def __init__(self, metric: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.metric = metric
        self.history: dict[str, Any] | None = None
        self.series: list[float] | None = None
        self.value: float | None = None

    def set_data(self, history: dict[str, Any] | None, series: list[float] | None, value: float | None) -> None:
        self.history, self.series, self.value = history, series, value
        self.refresh()

    def render(self) -> Text:
        width = self.size.width - 2  # padding
        height = self.size.height
        out = Text(no_wrap=True, overflow="crop", end="")
        pts = history_points(self.history)
        by_step = bool(pts)  # x is the step (else the recent series by index)
        if not by_step:
            pts = [(float(i), float(y)) for i, y in enumerate(y for y in self.series or [] if y is not None)]
        title = self.get_component_rich_style("chart--title")
        axis = self.get_component_rich_style("chart--axis")
        note = self.get_component_rich_style("chart--note")
        out.append(self.metric, style=title)
        if self.value is not None:
            out.append(f"  now {fmt_num(self.value)}")
        if not pts:
            out.append("  no values yet", style=note)
            return out
        h = self.history or {}
        ys = [y for _, y in pts]
        lo = min(ys) if not by_step or h.get("lo") is None else min(h["lo"], *ys)
        hi = max(ys) if not by_step or h.get("hi") is None else max(h["hi"], *ys)
        x0, x1 = pts[0][0], pts[-1][0]
        every = h.get("every") or 1
        if by_step:
            span = f"  steps {int(x0)}–{int(x1)}, {len(pts)} points" + (f" of {every} steps" if every > 1 else "")
        else:
            span = f"  the last {len(pts)} values (this supervisor keeps no full-run history)"
        out.append(f"  min {fmt_num(lo)}  max {fmt_num(hi)}", style=note).append(span, style=note)
        plot_w = max(1, width - AXIS_W - 1)
        plot_h = max(1, height - 3)
        rows = braille_chart(pts, plot_w, plot_h, lo, hi)
        line = self.get_component_rich_style("chart--line")
        ylabels = {plot_h // 2: fmt_num((hi + lo) / 2)} if plot_h >= 5 else {}
        ylabels |= {plot_h - 1: fmt_num(lo), 0: fmt_num(hi)}  # the top row's wins on a one-row chart
        for r, row in enumerate(rows):
            out.append(f"\n{ylabels.get(r, ''):>{AXIS_W - 1}} ┤", style=axis).append(row, style=line)
        out.append("\n" + " " * (AXIS_W - 1) + " └" + "─" * plot_w, style=axis)
        left, right = f"{int(x0)}", f"{int(x1)}" + (" step" if by_step else "")
        mid = f"{int((x0 + x1) / 2)}" if plot_w > len(left) + len(right) + 12 else ""
        gap = plot_w - len(left) - len(right) - len(mid)
        labels = left + " " * (gap // 2) + mid + " " * (gap - gap // 2) + right if gap > 0 else left
        out.append("\n" + " " * (AXIS_W + 1) + labels, style=axis)
        return out
