"""One component's log: a bounded line buffer drawn with Textual's Line API (follow, wrap or
sideways scrolling, search, copy mode, restart markers drawn as a rule).

Only the visible rows are rendered; lines come in batches, one per flush tick. The view keeps its
own scroll position (``top``, in screen rows) and draws its own scrollbar, so scrolling costs no
layout pass and uses no private Textual API (a ScrollView's virtual size is a layout-triggering
reactive). Appending only records what to repaint (``pending``); the screen's flush calls
:meth:`LogView.paint`. A pane a flood scrolls by more than its height repaints at most every
:data:`FLOOD_PAINT_TICKS` ticks, the panes taking turns: it is unreadable at any rate, and at 20 Hz
three such panes cost ~350 KB/s of terminal output and most of the TUI's CPU.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Callable, Mapping
from itertools import accumulate
from typing import Any

from rich.cells import cell_len, chop_cells, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Grid, Vertical
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from rlsup.tui import actions, clipboard
from rlsup.tui.format import clean_lines
from rlsup.tui.model import Marker
from rlsup.tui.screens import PathScreen

CUT = "…"
HSTEP = 8  # columns per sideways scroll step
WHEEL = 3  # rows per mouse-wheel notch
FLOOD_PAINT_TICKS = 4  # a pane scrolled by a flood repaints at most every this many flush ticks (5 Hz)
PAGE = 2000  # lines per page read from disk


class History:
    """A window over the log file on disk, shown instead of the live lines while the user reads
    older output than the view holds. Indexes in the view are sequence numbers meanwhile (``dropped``: the
    window's first line); the live lines wait aside (and new ones gather, bounded) until the window reaches
    them again."""

    def __init__(self, disk_first: int, disk_end: int, live_seq: int, saved: tuple[object, ...]):
        self.disk_first = disk_first  # seq of the first line on disk (line 1)
        self.disk_end = disk_end  # seq after the last line on disk when last asked
        self.live_seq = live_seq  # seq of the first live line: where the window joins the live view
        self.saved = saved  # the live view's fields, put back when the window is left
        self.incoming: list[str] = []  # live lines that arrived meanwhile (at most max_lines)
        self.incoming_marked = False
        self.incoming_seq: int | None = None
        self.loading = False  # a page is on its way: no second request for the same edge

    def set_aside(self, new: list[str], marked: bool, seq: int | None, max_lines: int) -> None:
        """Keep live lines (the newest ``max_lines``) for when the window reaches the live view again."""
        if self.incoming_seq is None:
            self.incoming_seq = seq
        self.incoming.extend(new)
        self.incoming_marked |= marked
        if (drop := len(self.incoming) - max_lines) > 0:
            del self.incoming[:drop]
            if self.incoming_seq is not None:
                self.incoming_seq += drop


class LogView(Widget, can_focus=False):
    COMPONENT_CLASSES = {"log-view--match", "log-view--current", "log-view--cut", "log-view--marker",
                         "log-view--selection", "log-view--cursor", "log-view--thumb"}
    DEFAULT_CSS = """
    LogView { height: 1fr; }
    LogView > .log-view--match { background: $warning 60%; color: $text; }
    LogView > .log-view--current { background: $accent 40%; }
    LogView > .log-view--cut { color: $text-muted; }
    LogView > .log-view--marker { color: $accent; text-style: bold; }
    LogView > .log-view--selection { background: $primary 35%; }
    LogView > .log-view--cursor { background: $primary 70%; }
    LogView > .log-view--thumb { background: $scrollbar; }
    """

    def __init__(self, max_lines: int = 10_000, **kw: Any) -> None:
        super().__init__(**kw)
        self.max_lines = max_lines
        self.lines: list[str] = []
        self.dropped = 0  # lines pruned from the top so far: absolute index = dropped + local index
        self.marks: set[int] = set()  # absolute indexes of restart markers
        self.follow = True
        self.top = 0  # first visible row (screen rows: with wrap on, a line may take several)
        self.xoff = 0  # first visible column when wrap is off
        self.wrap = False
        self.widest = 0  # the longest line seen (characters), the bound for sideways scrolling
        self.search_query = ""
        self.current: int | None = None  # absolute index of the current search match
        self.select_anchor: int | None = None  # copy mode: where the selection started (absolute index)
        self.cursor: int | None = None  # copy mode: its moving end
        self.writes = 0  # append_lines calls; a test guards that this is per tick, not per line
        self.hist: History | None = None  # reading older lines from disk (see History)
        self.live_first: int | None = None  # seq of the oldest live log line in the view (markers aside)
        self.disk_first: int | None = None  # seq of the first line on disk, once the supervisor said
        # Called whenever the view moved or changed mode (the pane's title), at once: a key's effect on the
        # title shows in the frame right after it.
        self.retitle: Callable[[], None] = lambda: None
        self.pending: str | None = None  # what appended lines need repainted: "full", "bar" or nothing
        self.painted_tick = -FLOOD_PAINT_TICKS  # flush tick of the last paint of appended lines
        self._new = 0  # lines appended since that paint
        self._rows: list[int] = [0]  # wrap: _rows[i] = first row of line i, _rows[-1] = all rows
        self._rows_width = -1  # the text width _rows were computed for (-1: not valid)
        self._styles: dict[str, Style] = {}  # resolved once per style change, not per painted row
        self._view_size: tuple[int, int] | None = None  # (width, height), kept from the layout (_fit): Widget.size
        # is computed from the layout on every access, and rendering a row asks for it several times

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles = {}

    def _style(self, name: str) -> Style:
        st = self._styles.get(name)
        if st is None:
            st = self._styles[name] = self.rich_style if name == "base" else self.get_component_rich_style(name)
        return st

    # geometry -------------------------------------------------------------------------------
    @property
    def width(self) -> int:
        return (self._view_size or self.size)[0]

    @property
    def text_width(self) -> int:
        """Columns for text: the last column is the scrollbar."""
        return max(0, self.width - 1)

    @property
    def height(self) -> int:
        return (self._view_size or self.size)[1]

    def _line_rows(self, line: str, width: int) -> int:
        if width <= 0:
            return 1
        return max(1, -(-len(line) // width) if line.isascii() else len(chop_cells(line, width)))

    def _valid_rows(self) -> list[int]:
        width = self.text_width
        if self._rows_width != width or len(self._rows) != len(self.lines) + 1:
            self._rows = list(accumulate((self._line_rows(line, width) for line in self.lines), initial=0))
            self._rows_width = width
        return self._rows

    @property
    def total_rows(self) -> int:
        return self._valid_rows()[-1] if self.wrap else len(self.lines)

    @property
    def max_top(self) -> int:
        return max(0, self.total_rows - self.height)

    def row_of(self, i: int) -> int:
        """The first screen row of local line ``i``."""
        if not self.wrap:
            return i
        rows = self._valid_rows()
        return rows[min(max(0, i), len(rows) - 1)]

    def locate(self, row: int) -> tuple[int, int]:
        """(local line index, row within that line) of screen row ``row``."""
        if not self.wrap:
            return row, 0
        rows = self._valid_rows()
        i = bisect.bisect_right(rows, row) - 1
        return i, row - rows[i]

    @property
    def below(self) -> int:
        """Lines under the visible window (the "N new lines" count when not following)."""
        if not self.lines:
            return 0
        last, _ = self.locate(min(self.top + self.height, self.total_rows) - 1)
        return max(0, len(self.lines) - 1 - last)

    # data -----------------------------------------------------------------------------------
    def append_lines(self, new: list[str], marked: bool = False, seq: int | None = None) -> None:
        """Add a batch of lines (cleaned of control characters here, once per batch); ``marked``
        when the batch holds :class:`Marker` lines; ``seq``: the sequence number of its first log line."""
        if not new:
            return
        self.writes += 1
        if self.hist is not None:  # reading from disk: live lines wait aside
            self.hist.set_aside(new, marked, seq, self.max_lines)
            return
        if seq is not None and (self.live_first is None or not self.lines):
            self.live_first = seq
        start = self.dropped + len(self.lines)
        first_shown = self.dropped + self.locate(self.top)[0] if self.lines else None
        was_full = self.total_rows >= self.top + self.height
        if marked:
            self.marks.update(start + k for k, line in enumerate(new) if type(line) is Marker)
        new = clean_lines(new)
        if self.wrap and self._rows_width == self.text_width and len(self._rows) == len(self.lines) + 1:
            rows, width = self._rows, self._rows_width  # extended in place from its last total (accumulate yields it first)
            rows += accumulate((self._line_rows(line, width) for line in new), initial=rows.pop())
        self.lines.extend(new)
        self.widest = max(self.widest, max(map(len, new)))
        excess = len(self.lines) - self.max_lines
        if excess > self.max_lines // 10:  # prune in chunks: one list shift per many batches
            self._prune(excess)
        if self.follow:
            self.top = self.max_top
        self._new += len(new)
        # Below a paused view that was already full, new lines move only the scrollbar.
        same_view = (not self.follow and was_full and first_shown is not None
                     and first_shown == self.dropped + self.locate(self.top)[0])
        if self.pending != "full":
            self.pending = "bar" if same_view else "full"

    @property
    def flooding(self) -> bool:
        """Following, and more lines arrived since the last paint than the view shows."""
        return self.follow and self.pending == "full" and self._new >= self.height

    def paint(self, tick: int) -> None:
        """Repaint what appended lines changed (the screen's flush decides when)."""
        if self.pending == "bar":
            self.refresh(Region(max(0, self.width - 1), 0, 1, self.height))
        elif self.pending == "full":
            self.refresh()
        self.pending, self.painted_tick, self._new = None, tick, 0

    def _prune(self, n: int) -> None:
        if self.live_first is not None and self.hist is None:
            self.live_first += n - sum(1 for m in self.marks if m < self.dropped + n)
        rows_gone = self.row_of(n)  # n when wrap is off
        del self.lines[:n]
        if self.wrap and len(self._rows) > n:
            self._rows = [r - rows_gone for r in self._rows[n:]]
        self.dropped += n
        if self.marks:
            self.marks = {m for m in self.marks if m >= self.dropped}
        if self.select_anchor is not None and self.cursor is not None:
            self.select_anchor, self.cursor = max(self.select_anchor, self.dropped), max(self.cursor, self.dropped)
        if not self.follow:  # keep the same text in view while it is still there
            self.top = max(0, self.top - rows_gone)

    def clear(self) -> None:
        if self.hist is not None:
            self.leave_history()
        self.live_first = None
        self._load([], self.dropped + len(self.lines), set())
        self.refresh()

    def _load(self, lines: list[str], dropped: int, marks: set[int], current: int | None = None) -> None:
        """Replace the lines held (no selection, at the top)."""
        self.lines, self.dropped, self.marks, self.current = lines, dropped, marks, current
        self._rows, self._rows_width = [0], -1
        self.select_anchor = self.cursor = None
        self.top = 0

    # reading from disk --------------------------------------------------------------------
    @property
    def window_first(self) -> int | None:
        """Sequence number of the first log line in view (history window or live lines)."""
        return self.dropped if self.hist is not None else self.live_first

    @property
    def older_on_disk(self) -> int:
        """Lines older than the view that only the log file holds (0 when unknown)."""
        first = self.window_first
        if self.disk_first is None or first is None:
            return 0
        return max(0, first - self.disk_first)

    def show_disk(self, page: Mapping[str, Any], *, at: str) -> None:
        """Show a page read from disk (a ``log_read`` reply: its ``lines`` from ``seq`` on) in place of the
        view's lines: enter the history window, or replace it; at its "top" or its "bottom"."""
        seq, disk_first, disk_end = page["seq"], page["disk_first_seq"], page["disk_end_seq"]
        self.disk_first = disk_first
        if self.hist is None:
            live_seq = self.live_first if self.live_first is not None else disk_end
            saved = (self.lines, self.dropped, self.marks, self.current, self.widest)
            self.hist = History(disk_first, disk_end, live_seq, saved)
        h = self.hist
        h.disk_first, h.disk_end, h.loading = disk_first, max(h.disk_end, disk_end), False
        self._load(clean_lines(list(page["lines"])), seq, set())
        self.follow = False
        self.widest = max([self.widest, *map(len, self.lines)]) if self.lines else self.widest
        if at == "bottom":
            self.top = self.max_top
        self._moved()

    def add_disk(self, seq: int, lines: list[str], disk_end: int) -> None:
        """A page read from disk just before or just after the history window, keeping the text in
        view where it is; the far end of the window gives way beyond ``max_lines``."""
        h = self.hist
        if h is None:
            return
        h.loading = False
        h.disk_end = max(h.disk_end, disk_end)
        if not lines:
            return
        new = clean_lines(list(lines))
        self.widest = max(self.widest, max(map(len, new)))
        if seq + len(new) == self.dropped:  # older lines, above
            self.lines[:0] = new
            self.top += self.row_of(len(new))  # (the rows are counted again: the lines changed)
            self.dropped = seq
            del self.lines[self.max_lines:]
        elif seq == self.dropped + len(self.lines):  # newer lines, below
            self.lines.extend(new)
            if (excess := len(self.lines) - self.max_lines) > 0:
                self.top = max(0, self.top - self.row_of(excess))
                del self.lines[:excess]
                self.dropped += excess
        self._rows_width = -1
        self.top = min(self.top, self.max_top)
        self._moved()

    def leave_history(self, follow: bool = False) -> None:
        """Back to the live lines: at their start (``follow`` False, scrolling on down from the
        window) or following the newest."""
        h = self.hist
        if h is None:
            return
        lines, dropped, marks, current, self.widest = h.saved  # type: ignore[assignment]
        self._load(lines, dropped, marks, current)  # type: ignore[arg-type]
        self.hist, self.follow = None, follow
        if h.incoming:
            if len(h.incoming) >= self.max_lines:
                self.lines, self.marks = [], set()  # all superseded by newer lines
                self.dropped += self.max_lines
                self.live_first = None
            self.append_lines(h.incoming, h.incoming_marked, h.incoming_seq)
        self.top = self.max_top if follow else 0
        self._moved()

    def _want_more(self, delta: int) -> None:
        """After a move: ask for the next page from disk when the view nears an edge of what it holds."""
        h = self.hist
        if h is None:  # (disk_first None: not asked yet, the supervisor knows)
            if delta < 0 and self.top == 0 and (self.older_on_disk or (self.disk_first is None and self.live_first)):
                self.post_message(self.NeedLines(self, -1))
            return
        if h.loading:
            return
        if delta < 0 and self.top < self.height and self.dropped > h.disk_first:
            h.loading = True
            self.post_message(self.NeedLines(self, -1))
        elif delta > 0 and self.top + 2 * self.height >= self.total_rows:
            if self.dropped + len(self.lines) < h.live_seq:
                h.loading = True
                self.post_message(self.NeedLines(self, 1))
            elif self.top >= self.max_top:
                self.leave_history()

    class NeedLines(Message):
        """The view moved near an edge of the lines it holds (``direction`` -1 or 1), or Home went to the first line
        held and the log file has older ones (0): the screen reads a page from disk (for 0, the file's first)."""

        def __init__(self, view: LogView, direction: int):
            super().__init__()
            self.view, self.direction = view, direction

    def render_lines(self, crop: Region) -> list[Strip]:
        """The rows in ``crop``, drawn directly, not through Textual's style cache: a log view has no border,
        padding, tint or opacity for it to add, and it copied each row into a new strip first (three fourths of
        a view's paint: 0.55 of 0.7 ms at 66x37). The app's line filters apply as there."""
        self._fit()
        filters, background = self.app.get_line_filters(), self.background_colors[1]
        strips = []
        for y in crop.line_range:
            strip = self.render_line(y)
            for line_filter in filters:
                strip = strip.apply_filter(line_filter, background)
            strips.append(strip)
        x1, x2 = crop.column_span
        return strips if (x1, x2) == (0, self.width) else [strip.crop(x1, x2) for strip in strips]

    def on_resize(self, event: events.Resize) -> None:
        if self._fit():  # (the frame at the new size has taken it already, unless none was painted yet)
            self.refresh()

    def _fit(self) -> bool:
        """Take the size the layout gave (``outer_size``: the view has no border or padding) and keep the
        scroll position within it; True if it changed. Done before the first paint at a new size: Textual's
        resize event comes after that frame, which then showed the rows for the old height (a zoomed view's
        lower part blank, an unzoomed one older lines) and was painted a second time."""
        size = (self.outer_size.width, self.outer_size.height)
        if size == self._view_size or not all(size):
            return False
        self._view_size = size
        self.top = self.max_top if self.follow else min(self.top, self.max_top)
        return True

    # scrolling ------------------------------------------------------------------------------
    def _moved(self) -> None:
        self.refresh()
        self.pending = None  # a user's move repaints everything now
        self._new = 0
        self.retitle()

    def scroll_rows(self, delta: int) -> None:
        """Scroll by ``delta`` rows: up pauses follow, reaching the last row resumes it."""
        top = min(max(0, self.top + delta), self.max_top)
        at_end = self.top >= self.max_top
        if delta < 0:
            self.follow = False
        elif top >= self.max_top and self.hist is None:
            self.follow = True
        self.top = top
        self._moved()
        h = self.hist
        if h is not None and delta > 0 and at_end and self.dropped + len(self.lines) >= h.live_seq:
            self.leave_history()  # scrolled on past the last line read from disk: the live lines follow
        else:
            self._want_more(delta)

    def home(self) -> None:
        self.follow, self.top = False, 0
        self._moved()

    def set_follow(self, on: bool) -> None:
        if on and self.hist is not None:
            self.leave_history(follow=True)
            return
        self.follow = on
        if on and self.top != self.max_top:
            self.top = self.max_top
            self._moved()
        else:  # nothing in view moves: only the title changes
            self.retitle()

    def scroll_sideways(self, delta: int) -> bool:
        """Scroll sideways by ``delta`` columns; False when wrap is on (nothing to scroll)."""
        if self.wrap:
            return False
        self.xoff = min(max(0, self.xoff + delta), max(0, self.widest - self.text_width + 1))
        self._moved()
        return True

    def set_wrap(self, on: bool) -> None:
        """Wrap on or off, keeping the line at the top of the view at the top."""
        first, _ = self.locate(self.top) if self.lines else (0, 0)
        self.wrap, self.xoff = on, 0
        self._rows_width = -1
        self.top = self.max_top if self.follow else min(self.row_of(first), self.max_top)
        self._moved()

    def show_line(self, i: int, *, center: bool = True) -> None:
        """Scroll local line ``i`` into view (centred, or by the least movement)."""
        row = self.row_of(i)
        if center:
            self.top = min(max(0, row - self.height // 2), self.max_top)
        elif row < self.top:
            self.top = row
        elif row >= self.top + self.height:
            self.top = min(row - self.height + 1, self.max_top)
        self.follow = self.follow and self.top >= self.max_top

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.scroll_rows(-WHEEL)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self.scroll_rows(WHEEL)

    def on_click(self, event: events.Click) -> None:
        if event.x == self.width - 1 and self.total_rows > self.height:  # the scrollbar: jump there
            self.follow = False
            self.top = round(event.y / max(1, self.height - 1) * self.max_top)
            self.scroll_rows(0)

    # search ---------------------------------------------------------------------------------
    def search(self, query: str, direction: int = -1, wrap: bool = True) -> int | None:
        """Find ``query`` (case-insensitive) from the current match in ``direction`` (+1 newer,
        -1 older), wrapping; a new query starts from the newest line (in copy mode: from the
        cursor). Returns the absolute index of the match, scrolled into view with follow off
        (and the copy-mode cursor on it), or None."""
        q = query.lower()
        if not q:
            return None
        lines, n = self.lines, len(self.lines)
        # From the current match of the same query, else the copy-mode cursor, else past the newest (oldest) line.
        if q == self.search_query and self.current is not None and 0 <= self.current - self.dropped < n:
            start = self.current - self.dropped
        elif self.cursor is not None:
            start = self.cursor - self.dropped
        else:
            start = n if direction < 0 else -1
        self.search_query = q
        for k in range(1, n + 1):
            i = start + direction * k
            if not wrap and not 0 <= i < n:
                break  # the caller looks beyond the lines held (on disk) before wrapping around
            i %= n
            if q in lines[i].lower():
                self._show_found(i, q)
                return self.current
        if wrap:
            self.current = None
            self._moved()
        return None

    def _show_found(self, i: int, q: str) -> None:
        """Line ``i`` holds a match of ``q``: make it the current one, in view (its column too)."""
        line = self.lines[i]
        self.current = self.dropped + i
        self.follow = False
        if self.cursor is not None:
            self.cursor = self.current
        self.show_line(i)
        if not self.wrap:  # bring the match's column into view too
            col = cell_len(line[: line.lower().find(q)])
            if not (self.xoff <= col < self.xoff + self.text_width - len(q)):
                self.xoff = max(0, col - self.text_width // 3)
        self._moved()

    def show_match(self, query: str, seq: int) -> None:
        """Make line ``seq`` of the history window the current match of ``query``."""
        if self.hist is not None and 0 <= seq - self.dropped < len(self.lines):
            self.search_query = query.lower()
            self._show_found(seq - self.dropped, self.search_query)

    # copy mode ------------------------------------------------------------------------------
    @property
    def selecting(self) -> bool:
        return self.select_anchor is not None

    def start_select(self) -> None:
        """Anchor and cursor on the current match if it is in view, else on the last visible line."""
        if not self.lines:
            return
        first, _ = self.locate(self.top)
        last, _ = self.locate(max(0, min(self.top + self.height, self.total_rows) - 1))
        cur = self.current - self.dropped if self.current is not None else -1
        i = cur if first <= cur <= last else last
        self.select_anchor = self.cursor = self.dropped + i
        self.follow = False
        self._moved()

    def reanchor(self) -> None:
        if self.cursor is not None:
            self.select_anchor = self.cursor
            self._moved()

    def move_cursor(self, delta: int) -> None:
        if self.cursor is None or not self.lines:
            return
        i = min(max(0, self.cursor - self.dropped + delta), len(self.lines) - 1)
        self.cursor = self.dropped + i
        self.show_line(i, center=False)
        self._moved()

    def selection(self) -> list[str]:
        """The selected lines, oldest first (what has left the buffer meanwhile is not there)."""
        if self.select_anchor is None or self.cursor is None:
            return []
        a, b = sorted((self.select_anchor - self.dropped, self.cursor - self.dropped))
        return self.lines[max(0, a): max(0, b + 1)]

    def end_select(self) -> None:
        self.select_anchor = self.cursor = None
        self._moved()

    # rendering ------------------------------------------------------------------------------
    def _thumb(self, y: int, total: int) -> bool:
        """Whether row ``y`` of the scrollbar column is part of the thumb."""
        h = self.height
        if total <= h or h <= 0:
            return False
        size = max(1, round(h * h / total))
        pos = round(self.top / max(1, total - h) * (h - size))
        return pos <= y < pos + size

    def _row(self, text: str, pad: int, base: Style, thumb: bool, width: int) -> Strip:
        """One plain row: the text, padding and the scrollbar cell. Rows are one segment where
        possible (the track is drawn in the text's style): each segment costs a style change in
        the terminal output, and under a flood that output is what a terminal multiplexer must keep up with."""
        if thumb:
            return Strip([Segment(text + " " * pad, base), Segment(" ", self._style("log-view--thumb"))], width)
        return Strip([Segment(text + " " * (pad + 1), base)], width)

    def render_line(self, y: int) -> Strip:
        width = self.width
        base = self._style("base")
        if width <= 1:
            return Strip.blank(width, base)
        tw = width - 1
        total = self.total_rows
        thumb = self._thumb(y, total)
        row = self.top + y
        if row >= total:
            return self._row("", tw, base, thumb, width)
        i, sub = self.locate(row)
        line = self.lines[i]
        absi = self.dropped + i
        anchor, cursor = self.select_anchor, self.cursor
        selected = anchor is not None and cursor is not None and min(anchor, cursor) <= absi <= max(anchor, cursor)
        bar = Segment(" ", self._style("log-view--thumb") if thumb else base)
        if self.marks and absi in self.marks:
            return self._marker(line, tw, bar, selected, absi == self.cursor)
        q = self.search_query
        hit = bool(q) and (q in line.lower() or self.current == absi)
        if not (selected or hit):
            if not self.wrap and not self.xoff:
                cells = len(line) if (asc := line.isascii()) else cell_len(line)
                if cells <= tw:
                    return self._row(line, tw - cells, base, thumb, width)
                return self._row((line[: tw - 1] if asc else set_cell_size(line, tw - 1)) + CUT, 0, base, thumb, width)
            if self.wrap and line.isascii():
                piece = line[sub * tw: (sub + 1) * tw]
                return self._row(piece, tw - len(piece), base, thumb, width)
        return self._render_rich(line, sub, tw, bar, base, selected, absi)

    def _marker(self, line: str, tw: int, bar: Segment, selected: bool, cursor: bool) -> Strip:
        style = self._style("base") + self._style("log-view--marker")
        if selected:
            style += self._style("log-view--cursor" if cursor else "log-view--selection")
        text = set_cell_size(line + "─" * tw, tw)
        return Strip([Segment(text, style), bar], tw + 1)

    def _render_rich(self, line: str, sub: int, tw: int, bar: Segment, base: Style, selected: bool,
                     absi: int) -> Strip:
        """The general case: highlights, selection, wrapped rows or a sideways offset."""
        text = Text(line, style=base, no_wrap=True, end="")
        pad = base
        if selected:
            sel = self._style("log-view--cursor" if absi == self.cursor else "log-view--selection")
            text.stylize(sel)
            pad = base + sel
        if self.current == absi:
            text.stylize(self._style("log-view--current"))
        q = self.search_query
        if q:
            match = self._style("log-view--match")
            low, pos = line.lower(), 0
            while (pos := low.find(q, pos)) >= 0:
                text.stylize(match, pos, pos + len(q))
                pos += len(q)
        strip = Strip(list(text.render(self.app.console)))
        cells = strip.cell_length
        if self.wrap:
            chunks = chop_cells(line, tw)
            start = sum(cell_len(c) for c in chunks[:sub])
            end = start + (cell_len(chunks[sub]) if sub < len(chunks) else 0)
            piece = strip.crop(start, end)
            segs = list(piece) + [Segment(" " * (tw - piece.cell_length), pad), bar]
            return Strip(segs, tw + 1)
        x = self.xoff
        left = x > 0 and cells > 0
        right = cells > x + tw
        cut = base + self._style("log-view--cut")
        piece = strip.crop(x + left, x + tw - right)
        used = left + piece.cell_length + right
        segs = [Segment(CUT, cut)] * left + list(piece) + [Segment(CUT, cut)] * right
        segs += [Segment(" " * max(0, tw - used), pad), bar]
        return Strip(segs, tw + 1)


class PaneTitle(Widget):
    """One row of text that repaints only when it changes (never a layout pass)."""

    DEFAULT_CSS = "PaneTitle { height: 1; }"
    text = ""

    def set_text(self, text: str) -> None:
        if text != self.text:
            self.text = text
            self.refresh()

    def render(self) -> Text:
        return Text(self.text, no_wrap=True, overflow="ellipsis", end="")


class _PaneMessage(Message):
    """A message about one :class:`LogPane` (``pane``)."""

    def __init__(self, pane: LogPane):
        super().__init__()
        self.pane = pane


class LogGrid(Grid):
    """The log panes' grid, painted as blank rows of its background (what shows of it is the gutter between
    panes side by side), not through Textual's style cache: its rows and the panes' (``BLANK``) are painted
    again whenever the layout changes, and a zoom spent 9 ms of its 22 on these containers' blank rows,
    more than on the logs shown (headless, 200x50)."""

    def render_lines(self, crop: Region) -> list[Strip]:
        return [Strip.blank(crop.width, Style(bgcolor=self.visual_style.rich_style.bgcolor))] * crop.height


class LogPane(Vertical, can_focus=True):
    """A title row (name, state, follow / "N new lines", wrap, search, copy mode) over a :class:`LogView`.

    The selected pane holds the focus and binds the ``log`` rows of :mod:`rlsup.tui.actions`; which act
    depends on ``has_keys`` (the screen gave this log the arrows and j/k) and copy mode. What needs the
    screen (the search box, the log file on disk, the focus look) is asked for with a message.
    """

    BINDINGS = actions.bindings(log=True)
    BLANK = True  # its title and view cover it: painted as blank rows, not through Textual's style cache (see LogGrid)
    DEFAULT_CSS = """
    LogPane { height: 1fr; min-height: 3; }
    LogPane > PaneTitle { background: $panel; color: $text-muted; }
    LogPane.selected > PaneTitle { background: $accent 50%; color: $text; text-style: bold; }
    LogPane.selected.focused > PaneTitle { background: $accent; color: $text; text-style: bold; }
    LogPane.selecting > PaneTitle { background: $primary; color: $text; text-style: bold; }
    """

    class Clicked(_PaneMessage):
        """A click on the pane: the screen selects it."""

    class ModeChanged(_PaneMessage):
        """Copy mode began or ended: the keys' context changed."""

    class SearchAsked(_PaneMessage):
        """``/``: open the search box for this log."""

    class FindOnDisk(_PaneMessage):
        """``query`` is not in the lines held in ``direction``: look in the log file on disk."""

        def __init__(self, pane: LogPane, query: str, direction: int):
            super().__init__(pane)
            self.query, self.direction = query, direction

    def __init__(self, component: str, index: int, max_lines: int = 10_000,
                 clock: Callable[[], float] = time.time, **kw: Any) -> None:
        super().__init__(**kw)
        self.component, self.index, self.state = component, index, ""
        self.clock = clock  # names the default file of a saved excerpt
        self.has_keys = False  # the screen gave this log the arrows and j/k (its "log" context)
        self.view = LogView(max_lines=max_lines)
        self.view.retitle = self.update_title
        self.title = PaneTitle()

    def compose(self) -> ComposeResult:
        yield self.title
        yield self.view

    def on_mount(self) -> None:
        self.update_title()

    def on_click(self, event: events.Click) -> None:
        self.post_message(self.Clicked(self))

    # look -----------------------------------------------------------------------------------
    def set_look(self, **classes: bool) -> None:
        """Set the pane's classes (``selected``, ``focused``, ``selecting``: they style its title only),
        restyling the pane and its title alone. Textual restyles a node's whole subtree on a class change,
        the view's seven component styles too (a node made and styled for each): 1-2 ms a change under a
        flood, and a pane switch made six before its frame."""
        before = set(self.classes)
        self.update_classes(classes, update=False)
        if set(self.classes) != before:
            self._restyle()

    def watch_has_focus(self, _has_focus: bool) -> None:
        self._restyle()  # (Textual's: the whole subtree, as above)

    def _restyle(self) -> None:
        if self.is_attached:
            self.app.stylesheet.update_nodes([self, self.title], animate=True)

    # keys -----------------------------------------------------------------------------------
    @property
    def context(self) -> str:
        if self.view.selecting:
            return actions.SELECT
        return actions.LOG if self.has_keys else actions.TABLE

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        where = actions.CONTEXTS.get(action)
        return where is None or self.context in where

    # The view retitles the pane after each move (LogView.retitle).
    def action_scroll(self, delta: int) -> None:
        self.view.scroll_rows(delta)

    def action_page(self, direction: int) -> None:
        v = self.view
        rows = direction * max(1, v.height - 1)
        if v.selecting:
            v.move_cursor(rows)
        else:
            v.scroll_rows(rows)

    def action_log_top(self) -> None:
        v = self.view
        if v.selecting:
            v.move_cursor(-len(v.lines))  # (to the first line held)
        else:
            v.home()  # at once within what the view holds; the file's first page follows
            if v.hist is None or v.dropped > v.hist.disk_first:
                v.post_message(v.NeedLines(v, 0))

    def action_log_end(self) -> None:
        v = self.view
        if v.selecting:
            v.move_cursor(len(v.lines))  # (to the last)
        else:
            v.set_follow(True)

    def action_sideways(self, direction: int) -> None:
        if not self.view.scroll_sideways(direction * HSTEP):
            self.notify("wrap is on: every line is whole (w turns it off)", timeout=3)

    def action_follow(self) -> None:
        self.view.set_follow(not self.view.follow)

    def action_wrap(self) -> None:
        self.view.set_wrap(not self.view.wrap)

    # search ---------------------------------------------------------------------------------
    def action_search(self) -> None:
        self.post_message(self.SearchAsked(self))

    def find(self, query: str, direction: int) -> None:
        """Search the lines held first; past them, the screen looks in the log file on disk."""
        if self.view.search(query, direction, wrap=False) is None:
            self.post_message(self.FindOnDisk(self, query, direction))

    def action_match(self, direction: int) -> None:
        """The next (+1, newer) or previous (-1, older) match of the search."""
        if not self.view.search_query:
            self.notify("no search yet: press / first", severity="warning")
            return
        self.find(self.view.search_query, direction)

    # copy mode ------------------------------------------------------------------------------
    def action_copy_mode(self) -> None:
        if not self.view.lines:
            self.notify("nothing to copy yet", severity="warning")
            return
        self.view.start_select()
        self.post_message(self.ModeChanged(self))

    def action_cursor(self, delta: int) -> None:
        self.view.move_cursor(delta)

    def action_reanchor(self) -> None:
        self.view.reanchor()

    def action_cancel_copy(self) -> None:
        self.view.end_select()
        self.post_message(self.ModeChanged(self))

    def _lines_of(self, n: int) -> str:
        return f"{n} line{'s' if n != 1 else ''} of {self.component}"

    def action_copy(self) -> None:
        lines = self.view.selection()
        text = "\n".join(lines) + "\n"
        self.app.copy_to_clipboard(text)  # OSC 52: reaches the local terminal through SSH
        self.action_cancel_copy()
        self.run_worker(self._tmux_buffer(text, len(lines)), group="clipboard")

    async def _tmux_buffer(self, text: str, n: int) -> None:
        err = await asyncio.to_thread(clipboard.tmux_load_buffer, text)
        what = self._lines_of(n)
        if err:
            self.notify(f"{what} sent with OSC 52; tmux load-buffer failed: {err}", title="copied", severity="warning")
        else:
            self.notify(f"{what} sent to the clipboard (OSC 52)" if err is None
                        else f"{what} on the clipboard and in tmux's paste buffer (prefix ])", title="copied")

    def action_save(self) -> None:
        lines = self.view.selection()

        def answered(path: str | None) -> None:
            if not path:
                return
            try:
                where = clipboard.write_excerpt(path, lines)
            except OSError as e:
                self.notify(f"cannot write {path}: {e.strerror or e}", severity="error", timeout=8)
                return
            self.action_cancel_copy()
            self.notify(f"{self._lines_of(len(lines))} written to {where}", title="saved")

        self.app.push_screen(PathScreen(f"Write {len(lines)} line(s) of {self.component} to:",
                                        clipboard.default_path(self.component, self.clock())), answered)

    def update_title(self) -> None:
        v = self.view
        parts = [f" {self.index + 1} {self.component}", self.state]
        if v.selecting:
            n = len(v.selection())
            parts.append(f"COPY {n} line{'s' if n != 1 else ''}: ↑↓ extend · y copy · s save · esc")
        elif v.hist is not None:
            h = v.hist
            a = v.dropped - h.disk_first + 1
            parts.append(f"FROM DISK: lines {a:,}–{a + len(v.lines) - 1:,} of {h.disk_end - h.disk_first:,}"
                         + (" (loading…)" if h.loading else "")
                         + " · End: live")
        elif v.follow:
            parts.append("follow")
        else:
            below = v.below
            parts.append(f"paused · {below:,} new lines ↓" if below else "paused")
        if v.hist is None and v.older_on_disk:  # no count: under a flood it would change (and repaint) 10 times a second
            parts.append("older lines on disk (Home)")
        if v.wrap:
            parts.append("wrap")
        elif v.xoff:
            parts.append(f"→ col {v.xoff + 1}")
        if v.search_query:
            parts.append(f"/{v.search_query}" + ("" if v.current is not None else " (no match)"))
        self.set_look(selecting=v.selecting)
        self.title.set_text("  ".join(p for p in parts if p))
