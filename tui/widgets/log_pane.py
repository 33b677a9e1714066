"""One component's log: a bounded line buffer drawn with Textual's Line API.

Only the visible rows are rendered; lines are appended in batches (one call per flush tick, never
one per line), long lines are cut at the pane width with a marker, and a search highlights its
matches. Follow mode keeps the newest line in view; scrolling up leaves follow mode and the pane
title counts the lines below the view.
"""

from __future__ import annotations

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Static

from rlsup.tui.format import clean_lines

CUT = "…"


class LogView(ScrollView, can_focus=False):
    COMPONENT_CLASSES = {"log-view--match", "log-view--current", "log-view--cut"}
    DEFAULT_CSS = """
    LogView { overflow-x: hidden; overflow-y: auto; scrollbar-size-vertical: 1; }
    LogView > .log-view--match { background: $warning 60%; color: $text; }
    LogView > .log-view--current { background: $accent 40%; }
    LogView > .log-view--cut { color: $text-muted; }
    """

    def __init__(self, max_lines: int = 10_000, **kw):
        super().__init__(**kw)
        self.max_lines = max_lines
        self.lines: list[str] = []
        self.dropped = 0  # lines pruned from the top so far: absolute index = dropped + local index
        self.follow = True
        self.query = ""
        self.current: int | None = None  # absolute index of the current search match
        self.writes = 0  # append_lines calls; a test guards that this is per tick, not per line
        self._styles: dict[str, Style] = {}  # resolved once per style change, not per painted row

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles = {}

    def _style(self, name: str) -> Style:
        st = self._styles.get(name)
        if st is None:
            st = self._styles[name] = self.rich_style if name == "base" else self.get_component_rich_style(name)
        return st

    # data -----------------------------------------------------------------------------------
    def append_lines(self, new: list[str]) -> None:
        """Add a batch of lines (cleaned of control characters here, once per batch)."""
        if not new:
            return
        self.writes += 1
        self.lines.extend(clean_lines(new))
        excess = len(self.lines) - self.max_lines
        if excess > self.max_lines // 10:  # prune in chunks: one list shift per many batches
            del self.lines[:excess]
            self.dropped += excess
            if not self.follow:  # keep the same text in view while it is still there
                self.scroll_to(y=max(0, self.scroll_y - excess), animate=False, immediate=True)
        self._resize()
        if self.follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.refresh()

    def clear(self) -> None:
        self.dropped += len(self.lines)
        self.lines = []
        self.current = None
        self._resize()
        self.refresh()

    def _resize(self) -> None:
        size = Size(self.scrollable_content_region.width, len(self.lines))
        if size == self.virtual_size:
            return
        if self.is_mounted:
            # Only our own scroll range changed: update it and the scrollbar without the full
            # screen layout pass that assigning the (layout=True) reactive costs on every tick.
            self.set_reactive(ScrollView.virtual_size, size)
            self._scroll_update(size)
        else:
            self.virtual_size = size

    def on_resize(self) -> None:
        self._resize()
        if self.follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    @property
    def below(self) -> int:
        """Lines under the visible window (the "N new lines" count when not following)."""
        return max(0, len(self.lines) - int(self.scroll_y) - self.size.height)

    # follow ---------------------------------------------------------------------------------
    def set_follow(self, on: bool) -> None:
        self.follow = on
        if on:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def _user_scrolled_up(self) -> None:
        self.follow = False

    def _on_mouse_scroll_up(self, event) -> None:
        self._user_scrolled_up()
        super()._on_mouse_scroll_up(event)

    def action_scroll_up(self) -> None:
        self._user_scrolled_up()
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self._user_scrolled_up()
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self._user_scrolled_up()
        super().action_scroll_home()

    def action_scroll_end(self) -> None:
        self.set_follow(True)

    # search ---------------------------------------------------------------------------------
    def search(self, query: str, direction: int = -1) -> int | None:
        """Find ``query`` (case-insensitive) from the current match in ``direction`` (+1 newer,
        -1 older), wrapping; a new query starts from the newest line. Returns the absolute index
        of the match, scrolled into view with follow off, or None."""
        q = query.lower()
        if not q:
            return None
        n = len(self.lines)
        if q != self.query or self.current is None or not (0 <= self.current - self.dropped < n):
            start = n if direction < 0 else -1
        else:
            start = self.current - self.dropped
        self.query = q
        lines = self.lines
        for k in range(1, n + 1):
            i = (start + direction * k) % n
            if q in lines[i].lower():
                self.current = self.dropped + i
                self.follow = False
                self.scroll_to(y=max(0, i - self.size.height // 2), animate=False, immediate=True)
                self.refresh()
                return self.current
        self.current = None
        self.refresh()
        return None

    # rendering ------------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width  # without the scrollbar, so the cut marker shows
        style = self._style("base")
        i = int(self.scroll_y) + y
        if i >= len(self.lines) or width <= 0:
            return Strip.blank(width, style)
        line = self.lines[i]
        current = self.current is not None and self.current - self.dropped == i
        if not self.query or (self.query not in line.lower() and not current):
            if len(line) <= width and line.isascii():
                return Strip([Segment(line, style)], len(line)).extend_cell_length(width, style)
            cells = cell_len(line)
            if cells <= width:
                return Strip([Segment(line, style)], cells).extend_cell_length(width, style)
            cut = self._style("log-view--cut")
            return Strip([Segment(set_cell_size(line, width - 1), style), Segment(CUT, style + cut)], width)
        return self._render_match(line, width, style, current)

    def _render_match(self, line: str, width: int, style: Style, current: bool) -> Strip:
        text = Text(line, style=style, no_wrap=True, end="")
        if current:
            text.stylize(self._style("log-view--current"))
        match = self._style("log-view--match")
        low, q, pos = line.lower(), self.query, 0
        while q and (pos := low.find(q, pos)) >= 0:
            text.stylize(match, pos, pos + len(q))
            pos += len(q)
        text.truncate(width, overflow="ellipsis")
        segments = list(text.render(self.app.console))
        return Strip(segments).extend_cell_length(width, style).crop(0, width)


class LogPane(Vertical):
    """A title row (name, state, follow / "N new lines", search) over a :class:`LogView`."""

    DEFAULT_CSS = """
    LogPane { height: 1fr; min-height: 3; }
    LogPane > .pane-title { height: 1; background: $panel; color: $text-muted; }
    LogPane.selected > .pane-title { background: $accent 50%; color: $text; text-style: bold; }
    """

    def __init__(self, component: str, index: int, max_lines: int = 10_000, **kw):
        super().__init__(**kw)
        self.component = component
        self.index = index
        self.state = ""
        self.view = LogView(max_lines=max_lines)
        self.title = Static("", classes="pane-title", markup=False)
        self._title_text = ""

    def compose(self) -> ComposeResult:
        yield self.title
        yield self.view

    def on_mount(self) -> None:
        self.update_title()

    def update_title(self) -> None:
        v = self.view
        parts = [f" {self.index + 1} {self.component}", self.state]
        if v.follow:
            parts.append("follow")
        else:
            below = v.below
            parts.append(f"paused · {below:,} new lines ↓" if below else "paused")
        if v.query:
            parts.append(f"/{v.query}" + ("" if v.current is not None else " (no match)"))
        text = "  ".join(p for p in parts if p)
        if text != self._title_text:
            self._title_text = text
            self.title.update(text)
