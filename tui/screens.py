"""Modal screens: y/n confirmation, key help (from the key table), event timeline, flag evidence."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from rlsup.supervisor.events import describe
from rlsup.tui.actions import help_rows


class ConfirmScreen(ModalScreen[bool]):
    """Asks a yes/no question; ``y`` (or enter) answers yes, ``n`` or escape answers no."""

    BINDINGS = [Binding("y,enter", "answer(True)", "yes"), Binding("n,escape", "answer(False)", "no")]

    def __init__(self, question: str):
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, classes="question", markup=False)
            yield Static("[b]y[/b] yes    [b]n[/b] no", classes="hint")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class _Closable(ModalScreen[None]):
    BINDINGS = [Binding("escape,q", "close", "close")]

    def action_close(self) -> None:
        self.dismiss(None)


class HelpScreen(_Closable):
    BINDINGS = [*_Closable.BINDINGS, Binding("question_mark", "close", "close")]

    def compose(self) -> ComposeResult:
        t = Table(box=None, show_header=False, padding=(0, 2))
        t.add_column(style="bold")
        t.add_column()
        for keys, what in help_rows():
            t.add_row(keys, what)
        with Vertical(classes="dialog wide"):
            yield Static("[b]keys[/b]  (escape closes)", classes="hint")
            yield Static(t)


class TimelineScreen(_Closable):
    """Every lifecycle event the client has seen, oldest first, scrolled to the newest."""

    def __init__(self, events: Iterable[dict[str, Any]], timefmt: Callable[[float], str]):
        super().__init__()
        self.events = list(events)
        self.timefmt = timefmt

    def compose(self) -> ComposeResult:
        text = Text(no_wrap=False, end="")
        for i, e in enumerate(self.events):
            if i:
                text.append("\n")
            kind = e.get("kind")
            style = ("bold red" if kind in ("fatal", "flag") or (kind == "exited" and e.get("exit_code") not in (0, None))
                     or e.get("signal") else "green" if kind in ("ready", "completed") else "")
            text.append(f"{self.timefmt(e.get('ts') or 0)} ", style="dim")
            text.append(f"{(e.get('component') or 'rlsup'):<13}", style="bold")
            text.append(describe(e), style=style)
        if not self.events:
            text.append("no events yet")
        with Vertical(classes="dialog full"):
            yield Static(f"[b]event timeline[/b]  ({len(self.events)} events; escape closes)", classes="hint")
            with VerticalScroll(id="timeline"):
                yield Static(text)

    def on_mount(self) -> None:
        self.query_one("#timeline", VerticalScroll).scroll_end(animate=False)


class FlagsScreen(_Closable):
    """Each active flag with its message, what rlsup did or suggests, and its evidence lines."""

    def __init__(self, flags: list[tuple[str, dict[str, Any]]], timefmt: Callable[[float], str]):
        super().__init__()
        self.flags = flags
        self.timefmt = timefmt

    def compose(self) -> ComposeResult:
        text = Text(end="")
        for i, (comp, f) in enumerate(self.flags):
            if i:
                text.append("\n\n")
            text.append(f"{comp} ", style="bold")
            text.append(str(f.get("type")), style="bold red")
            if f.get("ts"):
                text.append(f"  {self.timefmt(f['ts'])}", style="dim")
            text.append(f"\n  {f.get('message') or ''}")
            if f.get("action"):
                text.append(f"\n  action: {f['action']}", style="italic")
            for ev in f.get("evidence") or []:
                text.append(f"\n    │ {ev}", style="dim")
        if not self.flags:
            text.append("no active flags")
        with Vertical(classes="dialog full"):
            yield Static("[b]flags and evidence[/b]  (escape closes)", classes="hint")
            with VerticalScroll():
                yield Static(text)
