"""Per-component progress: bar with step/total, rate, ETA and a sparkline of the chosen metric.

The sparkline is the metric over the whole run (the full-run history, resampled to its width)
on the run's own min..max scale, so it does not rescale from one refresh to the next and the
trend of the run stays visible; ``m`` opens the charts with axes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text

from rlsup.supervisor.render.bars import bar
from rlsup.tui.format import fmt_dur, fmt_num, fmt_rate, history_points, resample, separated, sparkline
from rlsup.tui.widgets import TextPanel


def spark_of(c: dict[str, Any], metric: str | None, width: int) -> str:
    """The metric's sparkline: the whole run on its own range when the history is there, else
    the recent ``series`` (an older supervisor)."""
    h = (c.get("history") or {}).get(metric or "")
    points = history_points(h)
    if len(points) >= 2:
        cols = resample(points, min(width, len(points)))
        return sparkline(cols, width, h.get("lo"), h.get("hi")) if h else ""
    return sparkline(c.get("series") or [], width)


def weights_line(metrics: dict[str, Any]) -> str:
    """This step's samples by the weights that made them (rlsup's trainer: rlsup.trainer.rollouts.staleness):
    ``weights: off_policy 1 · 12 samples by older weights · 3 across a reload · 0 mixed``; "" for others."""
    if "off_policy_samples" not in metrics:
        return ""
    return (f"weights: off_policy {fmt_num(metrics.get('off_policy'))} · {fmt_num(metrics.get('off_policy_samples'))} "
            f"samples by older weights · {fmt_num(metrics.get('straddled_samples'))} across a reload · "
            f"{fmt_num(metrics.get('mixed_samples'))} mixed")


class ProgressPanel(TextPanel):
    MIN_WIDTH = 20
    COMPONENT_CLASSES = {"progress--bar", "progress--done", "progress--spark", "progress--dim"}
    DEFAULT_CSS = """
    ProgressPanel { height: auto; }
    ProgressPanel > .progress--bar { color: $primary; }
    ProgressPanel > .progress--done { color: $success; }
    ProgressPanel > .progress--spark { color: $accent; }
    ProgressPanel > .progress--dim { color: $text-muted; }
    """

    components: dict[str, dict[str, Any]] = {}
    now, ended = 0.0, False
    timefmt: Callable[[float], str] | None = None

    def set_data(self, components: dict[str, dict[str, Any]], now: float = 0.0, *, ended: bool = False,
                 timefmt: Callable[[float], str] | None = None) -> None:
        """On an ended run, artefacts show when they were written, with their age from now."""
        self.components, self.now = components, now
        self.ended, self.timefmt = ended, timefmt
        self.show()

    def artefacts(self, c: dict[str, Any]) -> str:
        """``checkpoint step 120 (35s ago) · rollouts step 131 (2s ago)``: what is on disk, and how fresh."""
        parts = []
        ck = c.get("checkpoint") or {}
        if ck.get("step") is not None:
            parts.append(f"checkpoint step {ck['step']}" + self._age(ck.get("mtime")))
        for path, w in (c.get("watch") or {}).items():
            label = path.rstrip("/").rsplit("/", 1)[-1] or path
            step = w.get("step")
            parts.append(f"{label} " + ("empty" if step is None else f"step {step}") + self._age(w.get("mtime")))
        return " · ".join(parts)

    def _age(self, mtime: float | None) -> str:
        if not (mtime and self.now):
            return ""
        if self.ended and self.timefmt is not None:  # a run long over: when, not only how long ago
            return f" (written {self.timefmt(mtime)}, {fmt_dur(self.now - mtime)} ago)"
        return f" ({fmt_dur(self.now - mtime)} ago)"

    def build(self, width: int) -> Text:
        out = Text(no_wrap=True, overflow="ellipsis", end="")
        dim = self.get_component_rich_style("progress--dim")
        for name, c in separated(out, self.components.items(), "\n"):
            head = f"{name[:12]:<12} "
            step, total = c.get("step"), c.get("total")
            if step is None:
                out.append(head).append("no progress seen", style=dim)
                continue
            counts = f" {step}/{total}" if total else f" step {step}"
            right = f"{counts} {fmt_rate(c.get('rate')):>8} ETA {fmt_dur(c.get('eta_s')):>6}"
            metrics = c.get("metrics") or {}
            mname = c.get("metric") or next(iter(metrics), None)
            spark_w = min(24, max(0, width // 5))  # fixed per width, so bars line up across rows
            tail = f"  {mname[:8]:>8} {fmt_num(metrics.get(mname)):<7}" if mname else " " * 18
            bar_w = width - len(head) - len(right) - len(tail) - spark_w
            if bar_w < 6:  # narrow: the numbers matter more than the sparkline
                tail, spark_w = "", 0
                bar_w = width - len(head) - len(right)
            pct = 100.0 * step / total if total else None
            out.append(head)
            if bar_w > 0:
                done = total is not None and step >= total
                out.append(bar(pct, bar_w, empty="·"),
                           style=self.get_component_rich_style("progress--done" if done else "progress--bar"))
            out.append(right)
            if tail:
                out.append(tail, style=dim)
                out.append(spark_of(c, mname, spark_w), style=self.get_component_rich_style("progress--spark"))
            for extra in (self.artefacts(c), weights_line(metrics)):
                if extra:
                    out.append("\n" + " " * len(head) + extra, style=dim)
        return out
