"""The component table: one row per component, state coloured through .tcss component classes."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual.widget import Widget

from rlsup.supervisor.state import STATES
from rlsup.tui.format import fmt_dur, fmt_rate


def last_exit_text(le: dict[str, Any] | None) -> str:
    if not le:
        return ""
    how = le["signal"] if le.get("signal") else f"exit {le.get('exit_code')}"
    diag = le.get("diagnosis") or {}
    summ = diag.get("summary") if diag.get("category") not in (None, "none") else ""
    step = f" @step {le['step']}" if le.get("step") is not None else ""
    return f"{how}{step}" + (f": {summ}" if summ else "")


class ComponentTable(Widget):
    COMPONENT_CLASSES = {f"state--{s}" for s in STATES} | {"table--selected", "table--flag"}
    DEFAULT_CSS = """
    ComponentTable { height: auto; }
    ComponentTable > .state--pending { color: $text-muted; }
    ComponentTable > .state--starting { color: $warning; }
    ComponentTable > .state--running { color: $success; text-style: bold; }
    ComponentTable > .state--backoff { color: $warning; text-style: bold; }
    ComponentTable > .state--stopping { color: $warning; }
    ComponentTable > .state--stopped { color: $text-muted; }
    ComponentTable > .state--completed { color: $primary; text-style: bold; }
    ComponentTable > .state--fatal { color: $error; text-style: bold reverse; }
    ComponentTable > .table--selected { background: $accent 30%; }
    ComponentTable > .table--flag { color: $error; }
    """

    def __init__(self, **kw):
        super().__init__(**kw)
        self.components: dict[str, dict[str, Any]] = {}
        self.selected = 0
        self.now = 0.0

    def set_data(self, components: dict[str, dict[str, Any]], selected: int, now: float) -> None:
        self.components, self.selected, self.now = components, selected, now
        self.refresh(layout=True)

    def render(self) -> Table:
        wide = self.size.width >= 150
        # Narrow terminals drop step/rate/ETA here: the progress panel right below shows them.
        full = self.size.width >= 130
        t = Table(expand=True, box=None, padding=(0, 1), show_edge=False, header_style="bold")
        cols: list[tuple[str, dict[str, Any]]] = [
            ("#", {"width": 1}), ("component", {"min_width": 10}), ("state", {"min_width": 9}),
            ("pid", {"min_width": 6}), ("uptime", {}), ("att/rst", {})]
        if full:
            cols += [("step", {}), ("rate", {}), ("ETA", {})]
        for name, kw in cols:
            t.add_column(name, no_wrap=True, **kw)
        t.add_column("last exit", ratio=3 if wide else 2, no_wrap=True, overflow="ellipsis")
        t.add_column("flags", ratio=1, no_wrap=True, overflow="ellipsis")
        sel = self.get_component_rich_style("table--selected")
        flag_style = self.get_component_rich_style("table--flag")
        for i, (name, c) in enumerate(self.components.items()):
            state = c.get("state", "?")
            cls = f"state--{state}"
            state_txt = Text(state, style=self.get_component_rich_style(cls) if cls in self.COMPONENT_CLASSES else "")
            if state == "backoff" and c.get("next_start_at"):
                state_txt.append(f" {max(0.0, c['next_start_at'] - self.now):.0f}s")
            if c.get("waiting_for"):
                state_txt.append(" (waits " + ",".join(c["waiting_for"]) + ")")
            step = "-" if c.get("step") is None else str(c["step"]) + (f"/{c['total']}" if c.get("total") else "")
            flags = c.get("flags") or []
            cells: list[Any] = [str(i + 1) if i < 9 else " ", name, state_txt, str(c.get("pid") or "-"),
                                fmt_dur(c.get("uptime_s")), f"{c.get('attempt', 0)}/{c.get('restarts', 0)}"]
            if full:
                cells += [step, fmt_rate(c.get("rate")), fmt_dur(c.get("eta_s"))]
            cells += [last_exit_text(c.get("last_exit")),
                      Text("⚑ " + ",".join(f["type"] for f in flags), style=flag_style) if flags else ""]
            t.add_row(*cells, style=sel if i == self.selected else None)
        return t
