"""Top line: run name, host, supervisor uptime, connection state, config path; how and when the
run ended; how old the data is while the link is down."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.widget import Widget

from rlsup.tui.format import clip, fmt_dur

DETAIL_MAX = 48  # characters of a connection error shown in the header (the toast has it whole)
CONNECTION = {
    "connecting": ("◌ connecting", "conn--wait"),
    "attached": ("● attached", "conn--ok"),
    "reconnecting": ("◌ reconnecting", "conn--wait"),
    "ended": ("■ run ended", "conn--bad"),
    "closed": ("✕ disconnected", "conn--bad"),
}


def ended_text(run: dict[str, Any], timefmt: Callable[[float], str]) -> str:
    """``ended at 10:37:08: trainer fatal (root cause: trainer: exit 1 ...)`` for a run that ended."""
    if not run.get("ended_at"):
        return ""
    out = f"ended at {timefmt(run['ended_at'])}: {run.get('end_reason') or 'the supervisor stopped'}"
    root = run.get("root") or {}
    if root.get("component") or root.get("reason"):
        who = f"{root['component']}: " if root.get("component") else ""
        out += f" (root cause: {who}{root.get('reason') or '?'})"
    return out


class RunHeader(Widget):
    COMPONENT_CLASSES = {"conn--ok", "conn--wait", "conn--bad", "header--name", "header--stale"}
    DEFAULT_CSS = """
    RunHeader { height: 1; background: $panel; }
    RunHeader > .header--name { text-style: bold; color: $text; }
    RunHeader > .conn--ok { color: $success; text-style: bold; }
    RunHeader > .conn--wait { color: $warning; text-style: bold; }
    RunHeader > .conn--bad { color: $error; text-style: bold; }
    RunHeader > .header--stale { color: $warning; }
    """

    def __init__(self, target: str, timefmt: Callable[[float], str], **kw: Any) -> None:
        super().__init__(**kw)
        self.target, self.timefmt = target, timefmt
        self.run: dict[str, Any] = {}
        self.server: dict[str, Any] = {}
        self.connection = ("connecting", "")
        self.stale_since: float | None = None  # when the shown data last arrived, while it is stale
        self.now, self._shown = 0.0, ""

    def set_data(self, run: dict[str, Any], server: dict[str, Any], connection: tuple[str, str],
                 stale_since: float | None = None, now: float = 0.0) -> None:
        self.run, self.server, self.connection = run, server, connection
        self.stale_since, self.now = stale_since, now
        text = self.render().plain
        if text != self._shown:  # most clock ticks change nothing shown (uptime is in minutes after an hour)
            self._shown = text
            self.refresh()

    def _stale_text(self) -> str:
        """How old the data shown is, while it is stale ("" while it is live)."""
        if self.stale_since is None:
            return ""
        age = fmt_dur(self.now - self.stale_since) if self.now else ""
        return f"  stale: data from {self.timefmt(self.stale_since)}" + (f" ({age} old)" if age else "")

    def render(self) -> Text:
        run, srv = self.run, self.server
        name = run.get("name") or srv.get("name") or "?"
        host = run.get("host") or srv.get("host") or ""
        status, detail = self.connection
        ended = ended_text(run, self.timefmt)
        if ended and status in ("attached", "ended"):
            label, cls = "■ run ended · read-only", "conn--bad"
        else:
            label, cls = CONNECTION.get(status, (status, "conn--wait"))
        t = Text(no_wrap=True, overflow="ellipsis", end="")
        t.append(" rlsup ", style="bold reverse").append(" ")
        t.append(name, style=self.get_component_rich_style("header--name"))
        if host:
            t.append(f" @ {host}")
        if run.get("uptime_s") is not None and not ended:
            t.append(f"  up {fmt_dur(run['uptime_s'])}")
        t.append("  ").append(label, style=self.get_component_rich_style(cls))
        stale = self._stale_text()
        if detail and status not in ("attached", "ended"):
            # The reason can be long (a socket path, an SSH error): it gives way so that "stale" stays
            # in view (the toast has it whole), and goes where too little room is left for it to say anything.
            room = min(DETAIL_MAX, (self.size.width or 200) - t.cell_len - len(stale) - 3)
            detail = clip(detail, room) if len(detail) <= room or room >= 12 else ""
            if detail:
                t.append(f" ({detail})")
        if stale:
            t.append(stale, style=self.get_component_rich_style("header--stale"))
        if ended:
            t.append(f"  {ended}", style=self.get_component_rich_style("conn--bad"))
        config = run.get("config") or srv.get("config")
        if config:
            t.append(f"  config {config}")
        if self.target:
            t.append(f"  [{self.target}]")
        return t
