"""The component table: one row per component; step/rate/ETA, then CPU/RSS/GPU memory drop out as
the terminal narrows. It repaints only when a cell or the selection changed (most samples change
nothing shown), and lays out its own columns: a Rich table's measuring costs more than the frame.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len, set_cell_size
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Size
from textual.message import Message
from textual.widget import Widget

from rlsup.supervisor.records.state import STATES
from rlsup.supervisor.render.bars import step_text
from rlsup.tui.format import failure_cause, fmt_cpu, fmt_dur, fmt_mb, fmt_rate

RESOURCES_MIN_WIDTH = 112
PROGRESS_MIN_WIDTH = 150
RIGHT = frozenset({"CPU", "RSS", "GPU mem"})  # right-aligned columns


def last_exit_text(le: dict[str, Any] | None) -> str:
    """``exit 1 @step 57: ModuleNotFoundError: No module named 'sglang'``: how it ended, then the
    diagnosed cause (not the raw first line of the error)."""
    if not le:
        return ""
    how = le["signal"] if le.get("signal") else f"exit {le.get('exit_code')}"
    cause = failure_cause(le.get("diagnosis"))
    step = f" @step {le['step']}" if le.get("step") is not None else ""
    return f"{how}{step}" + (f": {cause}" if cause else "")


def columns(width: int) -> list[str]:
    cols = ["#", "component", "state", "pid", "uptime", "att/rst"]
    if width >= RESOURCES_MIN_WIDTH:
        cols += ["CPU", "RSS", "GPU mem"]
    if width >= PROGRESS_MIN_WIDTH:
        cols += ["step", "rate", "ETA"]
    return cols + ["last exit", "flags"]


def row_cells(i: int, c: dict[str, Any], now: float) -> dict[str, str]:
    """Every cell of one component's row, as text."""
    state_txt = c.get("state", "?")
    if state_txt == "backoff" and c.get("next_start_at"):
        state_txt += f" {max(0.0, c['next_start_at'] - now):.0f}s"
    if c.get("waiting_for"):
        state_txt += " (waits " + ",".join(c["waiting_for"]) + ")"
    r = c.get("resources") or {}
    flags = c.get("flags") or []
    return {
        "#": str(i + 1) if i < 9 else " ", "state": state_txt, "pid": str(c.get("pid") or "-"),
        "uptime": fmt_dur(c.get("uptime_s")), "att/rst": f"{c.get('attempt', 0)}/{c.get('restarts', 0)}",
        "CPU": fmt_cpu(r.get("cpu_pct")), "RSS": fmt_mb(r.get("rss_mb")), "GPU mem": fmt_mb(r.get("gpu_mb")),
        "step": step_text(c),
        "rate": fmt_rate(c.get("rate")), "ETA": fmt_dur(c.get("eta_s")),
        "last exit": last_exit_text(c.get("last_exit")),
        "flags": ("⚑ " + ",".join(f["type"] for f in flags)) if flags else "",
    }


class ComponentTable(Widget):
    COMPONENT_CLASSES = {f"state--{s}" for s in STATES} | {"table--header", "table--selected", "table--focused",
                                                            "table--flag", "table--stale"}
    DEFAULT_CSS = """
    ComponentTable { height: auto; }
    ComponentTable > .table--header { text-style: bold; }
    ComponentTable > .state--pending { color: $text-muted; }
    ComponentTable > .state--starting { color: $warning; }
    ComponentTable > .state--running { color: $success; text-style: bold; }
    ComponentTable > .state--backoff { color: $warning; text-style: bold; }
    ComponentTable > .state--stopping { color: $warning; }
    ComponentTable > .state--stopped { color: $text-muted; }
    ComponentTable > .state--completed { color: $primary; text-style: bold; }
    ComponentTable > .state--fatal { color: $error; text-style: bold reverse; }
    ComponentTable > .table--selected { background: $accent 30%; }
    ComponentTable > .table--focused { background: $accent 60%; }
    ComponentTable > .table--flag { color: $error; }
    ComponentTable > .table--stale { color: $text-disabled; }
    """

    class Clicked(Message):
        def __init__(self, index: int):
            super().__init__()
            self.index = index

    rows: list[tuple[str, str, dict[str, str]]] = []  # (name, state, cells)
    selected = 0
    focused = True  # arrows move the selection here (not in the log)
    stale = False
    _shown: tuple[Any, ...] | None = None

    def set_data(self, components: dict[str, dict[str, Any]], selected: int, now: float,
                 stale: bool = False) -> None:
        rows_changed = len(components) != len(self.rows)
        self.selected, self.stale = selected, stale
        self.rows = [(name, c.get("state", "?"), {"component": name, **row_cells(i, c, now)})
                     for i, (name, c) in enumerate(components.items())]
        if rows_changed:
            self.refresh(layout=True)  # the height follows the number of rows, nothing else
        elif self._key() != self._shown:  # most samples change nothing shown
            self.refresh()

    def _key(self) -> tuple[Any, ...]:
        """What is shown: the cells, the selection, the focus, the staleness."""
        return tuple((n, s, tuple(c.values())) for n, s, c in self.rows), self.selected, self.focused, self.stale

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.rows) + 1

    def on_click(self, event: events.Click) -> None:
        row = event.y - 1  # under the header row
        if 0 <= row < len(self.rows):
            self.post_message(self.Clicked(row))

    def _widths(self, cols: list[str], width: int) -> dict[str, int]:
        least = {"component": 10, "state": 9, "pid": 6}
        w = {c: max([least.get(c, 0), cell_len(c)] + [cell_len(cells[c]) for _, _, cells in self.rows]) for c in cols}
        fixed = sum(w[c] + 1 for c in cols if c not in ("last exit", "flags")) + 1
        room = max(10, width - fixed - 2)
        w["flags"] = min(w["flags"], max(6, room // 4))
        w["last exit"] = max(5, room - w["flags"])
        return w

    def render(self) -> Text:
        width = self.size.width
        cols = columns(width)
        w = self._widths(cols, width)
        base = Style()
        sel = self.get_component_rich_style("table--focused" if self.focused else "table--selected")
        stale = self.get_component_rich_style("table--stale") if self.stale else None
        flag_style = self.get_component_rich_style("table--flag")
        out = Text(no_wrap=True, overflow="crop", end="")
        header = self.get_component_rich_style("table--header")
        out.append(" " + " ".join(self._fit(c, w[c], c in RIGHT) for c in cols), style=header)
        for i, (_name, state, cells) in enumerate(self.rows):
            row_style = (sel if i == self.selected else base) + (stale or base)
            out.append("\n")
            line = Text(" ", style=row_style, no_wrap=True, end="")
            for k, c in enumerate(cols):
                if k:
                    line.append(" ")
                style = None
                if c == "state" and not self.stale and f"state--{state}" in self.COMPONENT_CLASSES:
                    style = self.get_component_rich_style(f"state--{state}")
                elif c == "flags" and cells[c] and not self.stale:
                    style = flag_style
                line.append(self._fit(cells[c], w[c], c in RIGHT), style=style)
            line.pad_right(max(0, width - line.cell_len))
            out.append_text(line)
        self._shown = self._key()
        return out

    @staticmethod
    def _fit(text: str, width: int, right: bool = False) -> str:
        n = cell_len(text)
        if n > width:
            return set_cell_size(text, max(0, width - 1)) + "…" if width > 0 else ""
        pad = " " * (width - n)
        return pad + text if right else text + pad
