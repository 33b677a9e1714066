"""Top line: run name, host, supervisor uptime, connection state, config path."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widget import Widget

from rlsup.tui.format import fmt_dur

CONNECTION = {
    "connecting": ("◌ connecting", "conn--wait"),
    "attached": ("● attached", "conn--ok"),
    "reconnecting": ("◌ reconnecting", "conn--wait"),
    "ended": ("■ run ended", "conn--bad"),
    "closed": ("✕ disconnected", "conn--bad"),
}


class RunHeader(Widget):
    COMPONENT_CLASSES = {"conn--ok", "conn--wait", "conn--bad", "header--name"}
    DEFAULT_CSS = """
    RunHeader { height: 1; background: $panel; }
    RunHeader > .header--name { text-style: bold; color: $text; }
    RunHeader > .conn--ok { color: $success; text-style: bold; }
    RunHeader > .conn--wait { color: $warning; text-style: bold; }
    RunHeader > .conn--bad { color: $error; text-style: bold; }
    """

    def __init__(self, target: str = "", **kw):
        super().__init__(**kw)
        self.target = target
        self.run: dict[str, Any] = {}
        self.server: dict[str, Any] = {}
        self.connection = ("connecting", "")

    def set_data(self, run: dict[str, Any], server: dict[str, Any], connection: tuple[str, str]) -> None:
        self.run, self.server, self.connection = run, server, connection
        self.refresh()

    def render(self) -> Text:
        run, srv = self.run, self.server
        name = run.get("name") or srv.get("name") or "?"
        host = run.get("host") or srv.get("host") or ""
        status, detail = self.connection
        label, cls = CONNECTION.get(status, (status, "conn--wait"))
        t = Text(no_wrap=True, overflow="ellipsis", end="")
        t.append(" rlsup ", style="bold reverse")
        t.append(" ")
        t.append(name, style=self.get_component_rich_style("header--name"))
        if host:
            t.append(f" @ {host}")
        if run.get("uptime_s") is not None:
            t.append(f"  up {fmt_dur(run['uptime_s'])}")
        t.append("  ")
        t.append(label, style=self.get_component_rich_style(cls))
        if detail and status != "attached":
            t.append(f" ({detail})")
        config = run.get("config") or srv.get("config")
        if config:
            t.append(f"  config {config}")
        if self.target:
            t.append(f"  [{self.target}]")
        if run.get("ended_at") and run.get("end_reason"):
            t.append(f"  ended: {run['end_reason']}", style=self.get_component_rich_style("conn--bad"))
        return t
