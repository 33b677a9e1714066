"""The rlsup TUI: a view of one run and a command sender, never the owner of any process.

The app is the session's listener. Session callbacks run on Textual's loop and only fold events
into :class:`~rlsup.tui.model.RunModel` and buffer log lines; one timer on the main screen
(``tick_hz``, 20 by default) flushes every pane once per tick and repaints the state widgets when
something changed. Commands go through ``session.command``; refusals show as notifications.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.events import Resize
from textual.screen import Screen
from textual.widgets import Footer, Input

from rlsup.supervisor.state import ACTIVE
from rlsup.tui import actions
from rlsup.tui.model import RunModel
from rlsup.tui.screens import ConfirmScreen, FlagsScreen, HelpScreen, TimelineScreen
from rlsup.tui.widgets.component_table import ComponentTable
from rlsup.tui.widgets.flags import FlagsStrip
from rlsup.tui.widgets.gpu_panel import GpuPanel
from rlsup.tui.widgets.header import RunHeader
from rlsup.tui.widgets.log_pane import LogPane
from rlsup.tui.widgets.progress import ProgressPanel

PANE_MIN_WIDTH = 66  # columns per log pane before panes go side by side


class SessionLike(Protocol):
    """What the app needs from :class:`rlsup.supervisor.client.Session` (tests pass a fake)."""

    server: dict[str, Any]

    async def run(self) -> None: ...

    async def command(self, command: str, component: str | None = None, **args: Any) -> dict[str, Any]: ...

    def close(self) -> None: ...


SessionFactory = Callable[[Any], SessionLike]


def local_hms(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


class SearchInput(Input):
    BINDINGS = [Binding("escape", "cancel", "close search", show=False)]

    def action_cancel(self) -> None:
        self.value = ""
        self.display = False
        self.screen.focus_next_pane()  # type: ignore[attr-defined]


class MainScreen(Screen):
    BINDINGS = actions.bindings()
    AUTO_FOCUS = ""  # keys go to the screen's table of actions; only the search box takes focus

    def __init__(self, rlapp: RlsupApp):
        super().__init__()
        self.rlapp = rlapp
        self.model = rlapp.model
        self.panes: dict[str, LogPane] = {}
        self.selected = 0
        self.zoomed = False
        self.flushes = 0

    # layout ---------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield RunHeader(self.rlapp.target, id="header")
        with Vertical(id="top"):
            yield ComponentTable(id="table")
            with Horizontal(id="gauges"):
                yield ProgressPanel(id="progress")
                yield GpuPanel(id="gpu")
            yield FlagsStrip(id="flags")
        yield Grid(id="logs")
        search = SearchInput(placeholder="search the selected log: enter finds the newest match, escape closes",
                             id="search")
        search.display = False
        yield search
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(1 / self.rlapp.tick_hz, self.flush)
        self.set_interval(1.0, self._tick_clock)
        self.flush()

    def _tick_clock(self) -> None:
        self.model.dirty = True  # uptimes move even when no event arrives

    def on_resize(self, event: Resize) -> None:
        self._layout()

    def _layout(self) -> None:
        w, h = self.size
        names = list(self.panes)
        logs = self.query_one("#logs", Grid)
        top = self.query_one("#top", Vertical)
        top.display = not self.zoomed
        if self.zoomed:
            for i, name in enumerate(names):
                self.panes[name].display = i == self.selected
            cols, rows = 1, 1
        else:
            for p in self.panes.values():
                p.display = True
            n = max(1, len(names))
            cols = max(1, min(n, w // PANE_MIN_WIDTH))
            rows = math.ceil(n / cols)
        logs.styles.grid_size_columns = cols
        logs.styles.grid_size_rows = rows
        gauges = self.query_one("#gauges", Horizontal)
        wide = w >= 150
        gauges.set_class(not wide, "stacked")
        self.set_class(h < 40, "compact")

    # data flow ------------------------------------------------------------------------------
    def flush(self) -> None:
        """Once per tick: every pane gets its pending lines in one batch; state widgets repaint
        only when something changed."""
        self.flushes += 1
        names = self.model.names()
        pending, resets = self.model.feed.take()
        missing = [n for n in [*names, *pending] if n not in self.panes]
        if missing:
            self._add_panes(list(dict.fromkeys(missing)))
        for name, lines in pending.items():
            view = self.panes[name].view
            if name in resets:
                view.clear()
            view.append_lines(lines)
        if self.model.dirty:
            self.model.dirty = False
            self.refresh_state()
        for p in self.panes.values():
            p.update_title()

    def _add_panes(self, names: list[str]) -> None:
        new = []
        for name in names:
            pane = LogPane(name, len(self.panes), max_lines=self.rlapp.max_lines, id=f"pane-{len(self.panes)}")
            self.panes[name] = pane
            new.append(pane)
        self.query_one("#logs", Grid).mount(*new)
        self._select(self.selected)
        self._layout()

    def refresh_state(self) -> None:
        now = self.rlapp.clock()
        v = self.model.view(now)
        comps = v["components"] if v else {}
        server = getattr(self.rlapp.session, "server", None) or {}
        self.query_one(RunHeader).set_data(v["run"] if v else {}, server,
                                           (self.model.connection, self.model.connection_detail))
        self.query_one(ComponentTable).set_data(comps, self.selected, now)
        self.query_one(ProgressPanel).set_data(comps, now)
        self.query_one(GpuPanel).set_data(v or {})
        self.query_one(FlagsStrip).set_data(self.model.flags())
        for name, pane in self.panes.items():
            pane.state = comps.get(name, {}).get("state", "")

    # selection ------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self.panes)

    def selected_name(self) -> str | None:
        names = self.names
        return names[self.selected] if 0 <= self.selected < len(names) else None

    def selected_pane(self) -> LogPane | None:
        name = self.selected_name()
        return self.panes.get(name) if name else None

    def _select(self, i: int) -> None:
        if not self.panes:
            return
        self.selected = i % len(self.panes)
        for j, p in enumerate(self.panes.values()):
            p.set_class(j == self.selected, "selected")
        self.query_one(ComponentTable).selected = self.selected
        self.query_one(ComponentTable).refresh()
        if self.zoomed:
            self._layout()

    def focus_next_pane(self) -> None:
        self.set_focus(None)

    def action_next_component(self) -> None:
        self._select(self.selected + 1)

    def action_prev_component(self) -> None:
        self._select(self.selected - 1)

    def action_select(self, i: int) -> None:
        if i < len(self.panes):
            self._select(i)

    # commands -------------------------------------------------------------------------------
    def _component(self) -> tuple[str, dict[str, Any]] | None:
        name = self.selected_name()
        if name is None:
            self.notify("no component to act on yet", severity="warning")
            return None
        state = self.model.state or {}
        return name, state.get("components", {}).get(name, {})

    def send(self, command: str, component: str | None, on_ok: Callable[[], None] | None = None,
             **args: Any) -> None:
        self.run_worker(self._send(command, component, on_ok, **args), group="commands")

    async def _send(self, command: str, component: str | None, on_ok: Callable[[], None] | None,
                    **args: Any) -> None:
        what = f"{command} {component}" if component else command
        try:
            reply = await self.rlapp.session.command(command, component, **args)
        except Exception as e:  # the session answers refusals itself; this is a broken link
            reply = {"ok": False, "error": str(e) or type(e).__name__}
        if reply.get("ok"):
            self.notify(reply.get("message") or f"{what}: done", title=what)
            if on_ok:
                on_ok()
        else:
            self.notify(reply.get("error") or "refused", title=f"{what} failed", severity="error", timeout=8)

    def _confirm(self, question: str, then: Callable[[], Any]) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                then()

        self.app.push_screen(ConfirmScreen(question), answered)

    def action_restart(self) -> None:
        if (nc := self._component()) is None:
            return
        name, c = nc
        self._confirm(f"Restart {name}? (it is {c.get('state', '?')}, pid {c.get('pid') or '-'})",
                      lambda: self.send("restart", name))

    def action_resume(self) -> None:
        if (nc := self._component()) is None:
            return
        name, c = nc
        ck = c.get("checkpoint") or {}
        where = f"its latest checkpoint (step {ck['step']})" if ck.get("step") is not None else "its latest checkpoint"
        self._confirm(f"Restart {name} from {where}?", lambda: self.send("resume", name))

    def action_stop_start(self) -> None:
        if (nc := self._component()) is None:
            return
        name, c = nc
        if c.get("state") in ACTIVE:
            self._confirm(f"Stop {name}? (it is {c.get('state')})", lambda: self.send("stop", name))
        else:
            self.send("start", name)

    def action_stop_all(self) -> None:
        def stopped() -> None:
            self.rlapp.exit_message = "stopping every component; the supervisor ends the run when they are down"
            self.rlapp.session.close()
            self.rlapp.exit(0)

        self._confirm("Stop EVERY component and end the run?", lambda: self.send("stop_all", None, stopped))

    def action_detach(self) -> None:
        hint = self.rlapp.attach_hint
        run = (self.model.state or {}).get("run") or {}
        if run.get("ended_at") or self.model.connection == "ended":
            why = run.get("end_reason") or "the supervisor has ended"
            self.rlapp.exit_message = (f"the run has ended ({why}); its logs and journal stay in "
                                       f"{run.get('run_dir') or 'the run dir'}; `rlsup report --run-dir {run.get('run_dir') or 'DIR'}` "
                                       "writes it up")
        else:
            self.rlapp.exit_message = "training continues; re-attach with: " + (hint or "rlsup attach")
        self.rlapp.session.close()
        self.rlapp.exit(0)

    # views ----------------------------------------------------------------------------------
    def action_follow(self) -> None:
        if pane := self.selected_pane():
            pane.view.set_follow(not pane.view.follow)
            pane.update_title()

    def action_zoom(self) -> None:
        self.zoomed = not self.zoomed
        self._layout()

    def action_search(self) -> None:
        if self.selected_pane() is None:
            return
        box = self.query_one("#search", SearchInput)
        box.display = True
        box.focus()

    @on(Input.Submitted, "#search")
    def _search_submitted(self, event: Input.Submitted) -> None:
        box = self.query_one("#search", SearchInput)
        box.display = False
        self.set_focus(None)
        pane = self.selected_pane()
        if pane is None or not event.value:
            return
        self._find(pane, event.value, -1)

    def _find(self, pane: LogPane, query: str, direction: int) -> None:
        if pane.view.search(query, direction) is None:
            self.notify(f"not found in {pane.component}: {query}", severity="warning")
        pane.update_title()

    def action_next_match(self) -> None:
        self._repeat(+1)

    def action_prev_match(self) -> None:
        self._repeat(-1)

    def _repeat(self, direction: int) -> None:
        pane = self.selected_pane()
        if pane is None:
            return
        if not pane.view.query:
            self.notify("no search yet: press / first", severity="warning")
            return
        self._find(pane, pane.view.query, direction)

    def action_events(self) -> None:
        self.app.push_screen(TimelineScreen(self.model.timeline, self.rlapp.timefmt))

    def action_flags(self) -> None:
        sel = self.selected_name()
        flags = sorted(self.model.flags(), key=lambda nf: nf[0] != sel)
        self.app.push_screen(FlagsScreen(flags, self.rlapp.timefmt))

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())


class RlsupApp(App[int]):
    """The TUI over one :class:`Session` (or a fake with the same surface).

    ``session_factory(listener)`` builds the session; ``clock`` and ``timefmt`` are injectable so
    tests render the same screen every time.
    """

    CSS_PATH = "app.tcss"
    TITLE = "rlsup"
    ENABLE_COMMAND_PALETTE = False

    def __init__(self, session_factory: SessionFactory, *, target: str = "", attach_hint: str = "",
                 clock: Callable[[], float] = time.time, timefmt: Callable[[float], str] = local_hms,
                 tick_hz: float = 20.0, max_lines: int = 10_000):
        super().__init__()
        self.target = target
        self.attach_hint = attach_hint
        self.clock = clock
        self.timefmt = timefmt
        self.tick_hz = tick_hz
        self.max_lines = max_lines
        self.exit_message = ""
        self.model = RunModel(max_lines)
        self._last_connection = ""
        self.listener = Listener(self)
        self.session = session_factory(self.listener)

    def get_default_screen(self) -> Screen:
        self.main = MainScreen(self)
        return self.main

    def on_mount(self) -> None:
        self.run_worker(self._run_session(), name="session", exit_on_error=False)

    async def _run_session(self) -> None:
        try:
            await self.session.run()
        except Exception as e:  # never take the screen down with it: say so in the header
            self.model.on_connection("closed", f"session failed: {e}")

    def connection_changed(self, status: str, detail: str) -> None:
        if status != self._last_connection:
            if status == "ended":
                self.notify(detail or "the run has ended", title="run ended", timeout=10)
            elif status == "reconnecting" and self._last_connection == "attached":
                self.notify(detail or "connection lost", title="reconnecting", severity="warning")
            self._last_connection = status


class Listener:
    """The :class:`~rlsup.supervisor.client.SessionListener` the app hands its session.

    A separate object because ``App.on_event`` is Textual's own dispatch method. Each callback is
    cheap: it folds into the model or buffers lines; the screen's flush timer does the painting.
    """

    def __init__(self, app: RlsupApp):
        self.app = app
        self.model = app.model

    def on_connection(self, status: str, detail: str) -> None:
        self.model.on_connection(status, detail)
        self.app.connection_changed(status, detail)

    def on_snapshot(self, snapshot: dict[str, Any], resumed: bool) -> None:
        self.model.on_snapshot(snapshot, resumed)

    def on_event(self, event: dict[str, Any]) -> None:
        self.model.on_event(event)

    def on_logs(self, component: str, seq: int, lines: list[str]) -> None:
        self.model.on_logs(component, seq, lines)

    def on_gap(self, component: str, from_seq: int, to_seq: int) -> None:
        self.model.on_gap(component, from_seq, to_seq)


def run_tui(connect: Callable[[], Awaitable[Any]], *, target: str, attach_hint: str) -> int:
    """Open the TUI on a run; ``connect`` is a :data:`rlsup.supervisor.client.Connector`.

    Returns 0 on ``q`` (detach: training continues) and after ``Q`` + confirm (stop all); the
    reason is printed once the terminal is restored.
    """
    from rlsup.supervisor.client import Session

    app = RlsupApp(lambda listener: Session(connect, listener), target=target, attach_hint=attach_hint)
    result = app.run()
    # Any way out but Q (q, ctrl+q, a crash) leaves training running: say how to come back.
    print(app.exit_message or f"training continues; re-attach with: {attach_hint}")
    if app.return_code:
        return app.return_code
    return result if isinstance(result, int) else 0
