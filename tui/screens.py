"""Screens over the main one: y/n confirmation, key help (from the key table), event timeline,
flag evidence, a component's failure detail, full-run charts, GPU processes, a path prompt."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text
from textual import events, on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, Static

from rlsup.supervisor.records.events import (
    ComponentCompleted,
    ComponentExited,
    ComponentFatal,
    ComponentReady,
    ComponentSpawnFailed,
    ComponentStopping,
    FlagRaised,
    Record,
    UnknownEvent,
    describe,
    fmt_duration,
)
from rlsup.supervisor.render.advice import NEXT_STEPS
from rlsup.supervisor.render.bars import fmt_mem, step_text
from rlsup.tui.actions import help_rows
from rlsup.tui.format import failure_cause, separated
from rlsup.tui.widgets.chart import MetricChart

if TYPE_CHECKING:
    from rlsup.tui.app import RlsupApp


def describe_any(rec: Record) -> str:
    """:func:`describe`, and for a kind this client does not know, its fields as ``key=value``."""
    text = describe(rec)
    kind = rec.kind or "?"
    if text != kind:
        return text
    extra = [f"{k}={v}" for k, v in rec.to_dict().items() if k not in ("ts", "seq", "kind", "component")]
    return f"{kind}" + (": " + ", ".join(extra) if extra else "")


class ConfirmScreen(ModalScreen[bool]):
    """Asks a yes/no question; ``y`` (or enter) answers yes, ``n`` or escape answers no."""

    BINDINGS = [Binding("y,enter", "dismiss(True)", "yes"), Binding("n,escape", "dismiss(False)", "no")]

    def __init__(self, question: str):
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, classes="question", markup=False)
            yield Static("[b]y[/b] yes    [b]n[/b] no", classes="hint")


def confirm(app: App[Any], question: str, then: Callable[[], None]) -> None:
    """Ask ``question`` with a :class:`ConfirmScreen`; ``then()`` on yes."""
    app.push_screen(ConfirmScreen(question), lambda yes: then() if yes else None)


class PathScreen(ModalScreen["str | None"]):
    """Asks for a file path (prefilled); enter answers it, escape cancels."""

    BINDINGS = [Binding("escape", "dismiss", "cancel")]
    AUTO_FOCUS = "#path"  # typing goes to the path from the first key

    def __init__(self, question: str, default: str):
        super().__init__()
        self.question, self.default = question, default

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Static(self.question, classes="question", markup=False)
            yield Input(self.default, id="path")
            yield Static("[b]enter[/b] write    [b]escape[/b] cancel", classes="hint")

    @on(Input.Submitted, "#path")
    def _submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)


class Closable(ModalScreen[None]):
    """A full-size dialog of text (``body``), a hint line over it; escape or q closes it."""

    BINDINGS = [Binding("escape,q", "dismiss", "close")]

    def __init__(self, hint: str, body: RenderableType, scroll_id: str | None = None):
        super().__init__()
        self.hint, self.shown, self.scroll_id = hint, body, scroll_id

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog full"):
            yield Static(self.hint, classes="hint")
            with VerticalScroll(id=self.scroll_id):
                yield Static(self.shown)


class RenderedOnce:
    """``inner`` rendered once per width. Textual renders a Static to learn its height, then again to paint it,
    and again at a width less a scrollbar's once it overflows: four renders of the help's key table (10-20 ms
    each) held the first frame of its first opening."""

    def __init__(self, inner: RenderableType) -> None:
        self.inner = inner
        self._lines: dict[int, list[list[Segment]]] = {}

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = self._lines.get(options.max_width)
        if lines is None:
            if len(self._lines) > 3:  # (a terminal resized again and again)
                self._lines.clear()
            lines = self._lines[options.max_width] = console.render_lines(self.inner, options.update(height=None),
                                                                           pad=False)
        new_line = Segment.line()
        for line in lines:
            yield from line
            yield new_line

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.inner)


class HelpScreen(Closable):
    """The key table. Its scroll keeps a scrollbar's gutter whether the table overflows or not: one width to
    render it at."""

    BINDINGS = [*Closable.BINDINGS, Binding("question_mark", "dismiss", "close")]

    def __init__(self) -> None:
        t = Table(box=None, show_header=True, header_style="bold", padding=(0, 2), expand=True)
        t.add_column("key", style="bold", no_wrap=True)
        t.add_column("what it does", ratio=1)
        t.add_column("where", style="dim", no_wrap=True)
        for keys, what, where in help_rows():
            t.add_row(keys, what, where)
        super().__init__("[b]keys[/b]  (escape closes; ctrl+p: every action by name)  ·  where: table = the "
                         "component table has the arrows (default), log = the selected log has them (enter or "
                         "z), copy mode = c", RenderedOnce(t), "help")

    def on_screen_resume(self) -> None:
        self.query_one(VerticalScroll).scroll_home(animate=False)  # (kept between openings: from the top each time)


class TimelineScreen(Closable):
    """Every lifecycle event the client has seen, oldest first, scrolled to the newest."""

    def __init__(self, events: Iterable[Record], timefmt: Callable[[float], str]):
        self.events = events = list(events)
        text = Text(no_wrap=False, end="")
        for e in separated(text, events, "\n"):
            text.append(f"{timefmt(e.ts or 0)} ", style="dim")
            text.append(f"{(e.component or 'rlsup'):<13}", style="bold")
            text.append(describe_any(e), style=_event_style(e))
        if not events:
            text.append("no events yet")
        super().__init__(f"[b]event timeline[/b]  ({len(events)} events; escape closes)", text, "timeline")

    def on_mount(self) -> None:
        self.query_one("#timeline", VerticalScroll).scroll_end(animate=False)


def _event_style(rec: Record) -> str:
    e = rec.event
    # A signal named (an exit by one, a stop that sends one, an unknown kind with a ``signal`` field) is red.
    signalled = (bool(e.signal) if isinstance(e, (ComponentExited, ComponentStopping))
                 else isinstance(e, UnknownEvent) and bool(e.data.get("signal")))
    if isinstance(e, (ComponentFatal, FlagRaised, ComponentSpawnFailed)) or signalled or (
            isinstance(e, ComponentExited) and e.exit_code not in (0, None)):
        return "bold red"
    return "green" if isinstance(e, (ComponentReady, ComponentCompleted)) else ""


class FlagsScreen(Closable):
    """Each active flag with its message, what rlsup did or suggests, and its evidence lines."""

    def __init__(self, flags: list[tuple[str, dict[str, Any]]], timefmt: Callable[[float], str]):
        self.flags = flags
        text = Text(end="")
        for comp, f in separated(text, flags, "\n\n"):
            text.append(f"{comp} ", style="bold").append(str(f.get("type")), style="bold red")
            if f.get("ts"):
                text.append(f"  {timefmt(f['ts'])}", style="dim")
            text.append(f"\n  {f.get('message') or ''}")
            if f.get("action"):
                text.append(f"\n  action: {f['action']}", style="italic")
            for ev in f.get("evidence") or []:
                text.append(f"\n    │ {ev}", style="dim")
        if not flags:
            text.append("no active flags")
        super().__init__("[b]flags and evidence[/b]  (escape closes)", text)


class StacksScreen(Closable):
    """Where the selected component's processes are (``rlsup stack NAME``): the short form, each process, the
    full dump's path."""

    def __init__(self, name: str, r: dict[str, Any]):
        text = Text(end="")
        text.append(f"{name} attempt {r.get('attempt')}", style="bold")
        text.append(f"  {len(r.get('processes') or [])} process(es)\n", style="dim")
        for line in r.get("lines") or []:
            text.append(f"\n  {line}", style="dim" if line.startswith("stacks:") else "")
        for p in r.get("processes") or []:
            who = f"rank {p['rank']}" if p.get("rank") is not None else f"pid {p.get('pid')}"
            what = p.get("error") or f"{p.get('threads')} thread(s)"
            text.append(f"\n    │ {who} ({p.get('name')}, pid {p.get('pid')}): {what}", style="dim")
        super().__init__("[b]Python stacks[/b] (py-spy; the full dump is in the file named)  (escape closes)", text)


def next_steps(name: str, diag: dict[str, Any], flags: list[dict[str, Any]]) -> list[str]:
    """What to do next: the diagnosis's own hint first, then the advice for its category and flags."""
    out = []
    if diag.get("hint"):
        out.append(str(diag["hint"]))
    loc = diag.get("location")
    fields = {"name": name, "at": f" at {loc}" if loc else "", "loc": loc or "?"}
    for key in [diag.get("category"), *(f.get("type") for f in flags)]:
        advice = NEXT_STEPS.get(key or "")
        if advice and (text := advice.format(**fields)) not in out:
            out.append(text)
    return out


def _section(out: Text, title: str, rows: list[tuple[str, str]]) -> None:
    """A titled section of ``(text, style)`` rows; nothing at all without rows."""
    if rows:
        out.append(f"\n\n{title}", style="bold")
        for text, style in rows:
            out.append(text, style=style)


class FailureScreen(Closable):
    """Why the selected component failed: the diagnosis (category, cause, exception, user
    location, step), its evidence, what rlsup did about it, and what to do next."""

    def __init__(self, name: str, component: dict[str, Any], events: list[Record],
                 run: dict[str, Any], timefmt: Callable[[float], str]):
        self.component_name, self.component, self.events, self.run = name, component, events, run
        self.timefmt = timefmt
        super().__init__(f"[b]{name}: why it failed[/b]  (escape closes)", self.body())

    def body(self) -> Text:
        c, name = self.component, self.component_name
        le, final = self._exit_explained()
        diag = le.get("diagnosis") or {}
        flags = c.get("flags") or []
        out = Text(end="")
        self._head(out)
        if not le:
            out.append(f"\n\n{name} has not exited in this run: no failure to explain.", style="dim")
        else:
            self._last_exit(out, le, final, diag)
        steps = next_steps(name, diag, flags) if (le or flags) else []
        _section(out, "what to do next", [(f"\n  • {s}", "") for s in steps])
        _section(out, "evidence (from the log)", [(f"\n  │ {line}", "dim") for line in diag.get("evidence") or []])
        self._what_rlsup_did(out, flags)
        return out

    def _exit_explained(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """(the exit to explain, the clean last exit after it or None). A clean last exit after a
        failure: the failure is what this screen explains."""
        le = self.component.get("last_exit") or {}
        if le and not le.get("signal") and le.get("exit_code") == 0:
            for r in reversed(self.events):  # its latest failed exit (a non-zero code or a signal)
                e = r.event
                if r.component == self.component_name and isinstance(e, ComponentExited) and (
                        e.signal or e.exit_code not in (0, None)):
                    return {**e.payload(), "ts": r.ts}, le
        return le, None

    def _head(self, out: Text) -> None:
        """The component's state and attempts; the run's end and its root cause, once it ended."""
        c, name, fmt = self.component, self.component_name, self.timefmt
        out.append(f"{name}", style="bold")
        out.append(f"  {c.get('state', '?')}", style="bold red" if c.get("state") == "fatal" else "bold")
        out.append(f"  attempt {c.get('attempt', 0)}, {c.get('restarts', 0)} restarts")
        if c.get("reason"):
            out.append(f"  ({c['reason']})", style="italic")
        root = self.run.get("root") or {}
        if self.run.get("ended_at"):
            out.append(f"\nthe run ended at {fmt(self.run['ended_at'])}: {self.run.get('end_reason') or '?'}",
                       style="bold")
            if root.get("component"):
                mark = "  ← this component" if root.get("component") == name else ""
                out.append(f"\nroot cause of the run: {root['component']}: {root.get('reason') or '?'}{mark}")

    def _last_exit(self, out: Text, le: dict[str, Any], final: dict[str, Any] | None, diag: dict[str, Any]) -> None:
        """How the explained attempt ended (after a clean last exit: that it recovered), then its diagnosis."""
        fmt = self.timefmt
        how = f"killed by {le['signal']}" if le.get("signal") else f"exit code {le.get('exit_code')}"
        when = f" at {fmt(le['ts'])}" if le.get("ts") else ""
        after = f" after {fmt_duration(le['uptime_s'])}" if le.get("uptime_s") is not None else ""
        out.append("\n\nlast exit  ", style="bold")
        if final is not None:
            fwhen = f" at {fmt(final['ts'])}" if final.get("ts") else ""
            out.append(f"exit code 0{fwhen}: it recovered; the failure before it:").append("\nfailure    ", style="bold")
        att = f" (attempt {le['attempt']})" if final is not None and le.get("attempt") else ""
        out.append(f"{how}{when}{after}{att}")
        rows = [("category", diag.get("category")), ("cause", failure_cause(diag)),
                ("summary", diag.get("summary") if diag.get("summary") != failure_cause(diag) else None),
                ("exception", diag.get("exception")), ("location", diag.get("location")),
                ("step", le.get("step") if le.get("step") is not None else diag.get("step"))]
        for label, value in rows:
            if value not in (None, ""):
                out.append(f"\n{label:<10} ", style="bold")
                out.append(str(value), style="bold red" if label == "cause" else "")

    def _what_rlsup_did(self, out: Text, flags: list[dict[str, Any]]) -> None:
        """The component's last events (gauges and flags aside) and its flags with what was done."""
        fmt, name = self.timefmt, self.component_name
        mine = [r for r in self.events
                if r.component == name and not r.event.gauge and not isinstance(r.event, FlagRaised)][-12:]
        if not (mine or flags):
            return
        out.append("\n\nwhat rlsup did", style="bold")
        for e in mine:
            out.append(f"\n  {fmt(e.ts or 0)}  ", style="dim").append(describe_any(e), style=_event_style(e))
        for f in flags:
            out.append(f"\n  flag {f.get('type')}: {f.get('message') or ''}", style="red")
            if f.get("action"):
                out.append(f" -> {f['action']}", style="italic")


class GpuScreen(Closable):
    """Every GPU with every process on it and the component it belongs to."""

    def __init__(self, state: dict[str, Any]):
        out = Text(end="")
        gpus = state.get("gpus") or []
        for g in separated(out, gpus, "\n\n"):
            used, total = g.get("mem_used_mb"), g.get("mem_total_mb")
            util = g.get("util_pct")
            out.append(f"GPU {g.get('index', '?')} {g.get('name') or ''}", style="bold")
            out.append(f"  {fmt_mem(used)}/{fmt_mem(total)} used, "
                       f"{'N/A' if util is None else f'{util:.0f}%'} busy")
            procs = sorted(g.get("processes") or [], key=lambda p: -(p.get("used_mb") or 0))
            for p in procs:
                who = p.get("component") or "outside the run"
                out.append(f"\n  {p.get('pid'):>8}  {who:<20} {fmt_mem(p.get('used_mb')):>7}",
                           style="" if p.get("component") else "yellow")
            if not procs:
                out.append("\n  no processes", style="dim")
        if not gpus:
            out.append(f"no GPUs: {state.get('gpu_reason') or 'none sampled yet'}")
        super().__init__("[b]processes on each GPU[/b]  (escape closes)", out)


class ChartsScreen(Screen[None]):
    """Each progress metric of one component against step, for the whole run (read from the app's
    model once a second; tab / shift+tab switch the component)."""

    BINDINGS = [Binding("escape,q,m", "dismiss", "back"), Binding("tab", "next(1)", "next component"),
                Binding("shift+tab", "next(-1)", "previous")]

    def __init__(self, rlapp: RlsupApp, name: str):
        super().__init__()
        self.rlapp, self.component = rlapp, name
        self._shown: tuple[Any, ...] | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="charts-title", classes="hint")
        yield VerticalScroll(id="charts")
        yield Footer()

    def on_mount(self) -> None:
        self.update_charts()
        self.set_interval(1.0, self.update_charts)

    def on_resize(self, event: events.Resize) -> None:
        self._size_charts()

    def action_next(self, step: int) -> None:
        names = self.rlapp.model.names()
        if names:
            i = names.index(self.component) if self.component in names else 0
            self.component = names[(i + step) % len(names)]
            self.update_charts()

    def update_charts(self) -> None:
        c = ((self.rlapp.model.state or {}).get("components") or {}).get(self.component) or {}
        history = c.get("history") or {}
        metrics = list(dict.fromkeys([*history, *(c.get("metrics") or {})]))
        key = (self.component, c.get("step"), tuple((m, len((history.get(m) or {}).get("points") or []),
                                                     str(((history.get(m) or {}).get("points") or [[None]])[-1]))
                                                    for m in metrics))
        if key == self._shown:
            return
        self._shown = key
        where = f"step {step_text(c)}" if c.get("step") is not None else "no step seen yet"
        self.query_one("#charts-title", Static).update(
            f"[b]charts · {self.component}[/b]  {where}  ·  {len(metrics)} metric(s) over the whole run  "
            "(tab: next component · escape: back)")
        box = self.query_one("#charts", VerticalScroll)
        charts = list(box.query(MetricChart))
        if [ch.metric for ch in charts] != metrics or not box.children:
            box.remove_children()
            charts = [MetricChart(m) for m in metrics]
            if charts:
                box.mount(*charts)
            else:
                box.mount(Static("no metrics seen for this component yet (they come from its progress lines)",
                                 classes="hint"))
        for ch in charts:
            ch.set_data(history.get(ch.metric), c.get("series") if ch.metric == c.get("metric") else None,
                        (c.get("metrics") or {}).get(ch.metric))
        self._size_charts()

    def _size_charts(self) -> None:
        charts = list(self.query(MetricChart))
        if not charts:
            return
        avail = max(1, self.size.height - 2)  # title and footer
        h = max(8, min(24, avail // len(charts) - 1))  # each chart has a blank row under it
        for ch in charts:
            ch.styles.height = h
