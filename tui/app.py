"""The rlsup TUI: a view of one run and a command sender, never the owner of any process.

Session callbacks only fold events into :class:`~rlsup.tui.model.RunModel`, buffer log lines and
wake the one flush timer (:data:`TICK_HZ`), which pauses itself when nothing is pending, so an idle
TUI does no periodic work beyond a once-a-second clock. Keys come from :mod:`rlsup.tui.actions`;
``check_action`` enables the row of the key table for the current context (table, log, copy mode).
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from textual import events, on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Input

from rlsup.supervisor.client.fleet import answer
from rlsup.supervisor.client.session import GoesOn, Session
from rlsup.supervisor.records.progress import current_rate
from rlsup.supervisor.records.state import ACTIVE
from rlsup.tui import actions, freeze_heap, sized_by_the_terminal
from rlsup.tui.format import fmt_dur, fmt_rate, local_hms
from rlsup.tui.model import AREAS, GAUGE_AREAS, RunModel
from rlsup.tui.palette import KeyTableCommands
from rlsup.tui.screens import (
    ChartsScreen,
    FailureScreen,
    FlagsScreen,
    GpuScreen,
    HelpScreen,
    StacksScreen,
    TimelineScreen,
    confirm,
)
from rlsup.tui.widgets.component_table import ComponentTable
from rlsup.tui.widgets.flags import FlagsStrip
from rlsup.tui.widgets.footer import FitFooter
from rlsup.tui.widgets.gpu_panel import GpuPanel
from rlsup.tui.widgets.header import RunHeader, ended_text
from rlsup.tui.widgets.log_pane import FLOOD_PAINT_TICKS, PAGE, LogGrid, LogPane, LogView
from rlsup.tui.widgets.progress import ProgressPanel

COMMAND_KEYS = {k: key for key in actions.KEYS if key.command for k in key.keys.split(",")}
PANE_MIN_WIDTH = 66  # columns per log pane before panes go side by side
KEY_QUIET_S = 0.1  # after a key press, flooded panes wait this long before their next repaint
GAUGE_MIN_S = 2.0  # GPU/host gauges and resource columns repaint at most this often (nvitop's interval)
TICK_HZ = 20.0  # flushes of the panes and state widgets per second while anything is pending


def _component_clock(c: dict[str, Any], now: float) -> list[object]:
    """The times one component's row and panels show that move with the clock alone: its uptime,
    the backoff countdown, a decaying rate, how long a stall has lasted, the age of its checkpoint
    and watched files."""
    parts: list[object] = []
    if c.get("state") in ("starting", "running", "stopping") and c.get("started_at"):
        parts.append(fmt_dur(now - c["started_at"]))
    if c.get("state") == "backoff" and c.get("next_start_at"):
        parts.append(round(max(0.0, c["next_start_at"] - now)))
    if c.get("rate") is not None:  # a decaying rate moves with no event (a steady one does not)
        rate, eta = current_rate(c.get("rate"), c.get("eta_s"), c.get("last_step_at"), c.get("step"),
                                 c.get("total"), now)
        if rate != c.get("rate"):
            parts.append((fmt_rate(rate), fmt_dur(eta)))
    if c.get("last_step_at") and any(f.get("type") == "stall" for f in c.get("flags") or []):
        parts.append(fmt_dur(now - c["last_step_at"]))  # how long the stall has lasted
    mtimes = [(c.get("checkpoint") or {}).get("mtime"), *(w.get("mtime") for w in (c.get("watch") or {}).values())]
    parts.extend(fmt_dur(now - mtime) for mtime in mtimes if mtime)
    return parts


def _on_selected(act: Callable[[MainScreen, str, dict[str, Any]], None]) -> Callable[[MainScreen], None]:
    """An action on the selected component, given its name and state (with none yet: saying so)."""
    def run(screen: MainScreen) -> None:
        if (name := screen.selected_name()) is None:
            screen.notify("no component to act on yet", severity="warning")
        else:
            act(screen, name, ((screen.model.state or {}).get("components") or {}).get(name, {}))

    return run


class SearchInput(Input):
    BINDINGS = [Binding("escape", "cancel", "close search", show=False)]

    def action_cancel(self) -> None:
        self.value, self.display = "", False
        if isinstance(self.screen, MainScreen):
            self.screen._focus_selected()  # the log keys go back to the selected log


class MainScreen(Screen):
    BINDINGS = actions.bindings()
    AUTO_FOCUS = ""  # the selected log pane takes the focus (its keys first), and the search box

    def __init__(self, rlapp: RlsupApp):
        super().__init__()
        self.rlapp, self.model = rlapp, rlapp.model
        self.panes: dict[str, LogPane] = {}
        self.selected, self.zoomed = 0, False
        self.log_focus = False  # arrows and j/k scroll the selected log instead of moving the selection
        self.flushes = 0
        self._flush_timer: Timer | None = None
        self._shown_stale: bool | None = None
        self._clock_sig: tuple[object, ...] = ()
        self._refreshed_at = 0.0  # monotonic time of the last state refresh an event brought
        self._last_key_t = 0.0  # monotonic time of the last key press (not `_key_at`: Textual calls `_key_<name>` on the "at" key)
        self._gauges_at = 0.0  # monotonic time the gauges were last repainted
        self._gauge_timer: Timer | None = None
        self._clock_refresh = False

    # layout ---------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield RunHeader(self.rlapp.target, self.rlapp.timefmt, id="header")
        with Vertical(id="top"):
            yield ComponentTable(id="table")
            with Horizontal(id="gauges"):
                yield ProgressPanel(id="progress")
                yield GpuPanel(id="gpu")
            yield FlagsStrip(id="flags")
        yield LogGrid(id="logs")
        yield SearchInput(placeholder="search the selected log: enter finds the newest match, escape closes",
                          id="search")
        yield FitFooter()

    def on_mount(self) -> None:
        self._flush_timer = self.set_interval(1 / TICK_HZ, self.flush)
        self.set_interval(1.0, self._tick_clock)
        self.flush()

    def wake(self) -> None:
        """New lines or state arrived: make sure the flush timer runs (it pauses when idle)."""
        if self._flush_timer is not None:
            self._flush_timer.resume()

    def _tick_clock(self) -> None:
        """Once a second: repaint what shows a time (uptimes, countdowns, ages) only when its
        text changed (after an hour, uptimes move once a minute), so an idle screen stays idle.
        Every state refresh an event brings does the same check (the GPU sample brings one every
        GAUGE_MIN_S), so while events come the tick does nothing and they share one frame."""
        if time.monotonic() - self._refreshed_at < GAUGE_MIN_S + 0.5:
            return  # events (at least the gauges' turn) come often enough to carry the clock
        sig = self._clock_signature(self.rlapp.clock())
        if sig != self._clock_sig:
            self.model.dirty |= {"run", "table", "progress"}
            self._clock_refresh = True
            self.wake()

    def _clock_signature(self, now: float) -> tuple[object, ...]:
        st = self.model.state
        if st is None:
            return ()
        parts: list[object] = []
        run = st.get("run") or {}
        if run.get("started_at") and not run.get("ended_at"):
            parts.append(fmt_dur(now - run["started_at"]))
        for c in (st.get("components") or {}).values():
            parts.extend(_component_clock(c, now))
        if self.model.stale and self.model.data_at:
            parts.append(fmt_dur(now - self.model.data_at))
        return tuple(parts)

    def on_resize(self, event: events.Resize) -> None:
        self._layout()

    def _layout(self) -> None:
        w, h = self.size
        self.query_one("#top", Vertical).display = not self.zoomed
        for i, p in enumerate(self.panes.values()):
            p.display = not self.zoomed or i == self.selected
        n = 1 if self.zoomed else max(1, len(self.panes))
        cols = max(1, min(n, w // PANE_MIN_WIDTH))
        logs = self.query_one("#logs", Grid)
        logs.styles.grid_size_columns = cols
        logs.styles.grid_size_rows = math.ceil(n / cols)
        self.query_one("#gauges", Horizontal).set_class(w < 150, "stacked")
        self.set_class(h < 40, "compact")
        self._show_focus()

    # data flow ------------------------------------------------------------------------------
    def flush(self) -> None:
        """Once per tick: every pane gets its pending lines in one batch and is repainted (a
        pane scrolled by a flood at most every FLOOD_PAINT_TICKS ticks, taking turns with the
        others); state widgets repaint only where their data changed. With nothing to do the
        timer pauses until woken."""
        self.flushes += 1
        tick = self.flushes
        if self.model.state is None:
            return  # no snapshot yet: lines wait, so the panes come in the order of the table
        pending, resets, marked = self.model.feed.take()
        dirty = self.model.dirty
        if pending or resets:
            if missing := list(dict.fromkeys(n for n in [*self.model.names(), *pending] if n not in self.panes)):
                self._add_panes(missing)
            firsts = self.model.feed.taken_first
            for name, lines in pending.items():
                pane = self.panes[name]
                if name in resets:
                    pane.view.clear()
                pane.view.append_lines(lines, name in marked, firsts.get(name))
                pane.update_title()
        if dirty and dirty <= GAUGE_AREAS and time.monotonic() - self._gauges_at < GAUGE_MIN_S:
            # Only a GPU/host sample changed: it waits for the gauges' next turn (an idle
            # screen then repaints every GAUGE_MIN_S, not every second); anything else brings it.
            if self._gauge_timer is None:
                self._gauge_timer = self.set_timer(self._gauges_at + GAUGE_MIN_S - time.monotonic(),
                                                   self._gauges_due)
            dirty = set()
        elif dirty:
            self.model.dirty = set()
            self.refresh_state(dirty)
        waiting = self._paint_panes(tick)
        if not (pending or resets or dirty or waiting) and self._flush_timer is not None:
            self._flush_timer.pause()

    def on_key(self, event: events.Key) -> None:
        self._last_key_t = time.monotonic()  # runs before the key's binding: see _paint_panes
        if self.model.ended and not isinstance(self.focused, Input) and self.context != actions.SELECT:
            key = COMMAND_KEYS.get(event.key)
            if key is not None:  # greyed in the footer, and pressed anyway: say why nothing happens
                run = (self.model.state or {}).get("run") or {}
                how = ended_text(run, self.rlapp.timefmt) or "the run has ended"
                config = run.get("config") or "CONFIG"
                self.notify(f"{how}. An ended run is read-only; to run it again: rlsup up {config} --resume "
                            "(or --fresh to start over) from another shell: this view follows it", title=f"{key.description}: not possible", severity="warning",
                            timeout=10)

    def _gauges_due(self) -> None:
        self._gauge_timer, self._gauges_at = None, 0.0
        self.wake()

    def _paint_panes(self, tick: int) -> bool:
        """Repaint panes with appended lines; True when a flooded pane had to wait its turn.

        Right after a key press flooded panes wait (KEY_QUIET_S): the frame that shows the key's
        effect then carries nothing else, and the loop is free to make it. Panes a zoom hides wait
        until shown (the layout that shows them paints them): a hidden widget's repaint made Textual
        arrange the whole screen again (0.6 ms, ten times a second under a flood)."""
        quiet = time.monotonic() - self._last_key_t < KEY_QUIET_S
        flooded = []
        for v in (p.view for p in self.panes.values() if p.display and p.view.pending is not None):
            if v.flooding:
                flooded.append(v)
            else:
                v.paint(tick)
        if not flooded:
            return False
        if quiet:
            return True
        budget = max(1, math.ceil(len(flooded) / FLOOD_PAINT_TICKS))
        due = sorted((v for v in flooded if tick - v.painted_tick >= FLOOD_PAINT_TICKS), key=lambda v: v.painted_tick)
        for v in due[:budget]:
            v.paint(tick)
        return len(due) < len(flooded) or len(due) > budget

    def _add_panes(self, names: list[str]) -> None:
        for name in names:
            self.panes[name] = LogPane(name, len(self.panes), max_lines=self.rlapp.max_lines, clock=self.rlapp.clock,
                                       id=f"pane-{len(self.panes)}")
        new = [self.panes[name] for name in names]
        self.query_one("#logs", Grid).mount(*new)
        self._select(self.selected)
        self._layout()
        if self.rlapp.freeze_heap:  # once, after the frame that shows the first snapshot
            self.rlapp.freeze_heap = False
            self.call_after_refresh(freeze_heap)
        for pane in new:  # does the log file hold older lines than the view? (the title says so)
            self.run_worker(self._read_page(pane, "", limit=1, from_seq=None), group="disk")

    # reading older lines from disk ----------------------------------------------------------
    async def _disk(self, op: str, component: str, *, warn: bool = False, **fields: Any) -> dict[str, Any]:
        """A request for the log file on disk; with ``warn``, a refusal shows as a warning."""
        disk = getattr(self.rlapp.session, "disk", None)
        reply: dict[str, Any] = ({"ok": False, "error": "this session cannot read logs from disk"} if disk is None
                 else await answer(disk(op, component, **fields)))
        if warn and not reply.get("ok"):
            self.notify(reply.get("error") or "cannot read the log file", severity="warning")
        return reply

    async def _read_page(self, pane: LogPane, at: str, limit: int = PAGE, **where: Any) -> None:
        """A page of the log file (``where``): the view learns where the file begins, and with ``at`` opens its
        history window on the page, if older than its lines ("top": Home; "bottom": the page above the live
        lines, while the view is still at their top); a refusal then shows as a warning."""
        v = pane.view
        reply = await self._disk("log_read", pane.component, warn=bool(at), limit=limit, **where)
        if not reply.get("ok"):
            return
        v.disk_first = reply["disk_first_seq"]
        first = v.window_first
        if at and reply["lines"] and (first is None or reply["seq"] < first) and (
                at == "top" or (v.hist is None and v.top == 0)):
            v.show_disk(reply, at=at)
        pane.update_title()

    def on_log_view_need_lines(self, event: LogView.NeedLines) -> None:
        if isinstance(pane := event.view.parent, LogPane):
            self.run_worker(self._read_page(pane, "top", from_seq=None) if event.direction == 0  # Home
                            else self._page(pane, event.direction), group="disk")

    async def _page(self, pane: LogPane, direction: int) -> None:
        """The page of the log file before (or after) what the pane holds."""
        v = pane.view
        h = v.hist
        if h is None:  # scrolled up past the oldest live line: the window opens just above it
            first = v.live_first
            if first is None or getattr(v, "_asking", False):
                return
            v._asking = True  # type: ignore[attr-defined]
            try:
                await self._read_page(pane, "bottom", before_seq=first)
            finally:
                v._asking = False  # type: ignore[attr-defined]
            return
        end = v.dropped + len(v.lines)
        where: dict[str, Any] = {"before_seq": v.dropped} if direction < 0 else {"from_seq": end}
        reply = await self._disk("log_read", pane.component, **where,
                                 limit=PAGE if direction < 0 else min(PAGE, h.live_seq - end))
        if v.hist is not h:
            return  # left meanwhile
        if not reply.get("ok"):
            h.loading = False
            self.notify(reply.get("error") or "cannot read the log file", severity="warning")
        else:
            lines = reply["lines"]
            if direction > 0:
                lines = lines[: max(0, h.live_seq - reply["seq"])]
            v.add_disk(reply["seq"], lines, reply["disk_end_seq"])
        pane.update_title()

    def refresh_state(self, areas: set[str] | frozenset[str] = AREAS) -> None:
        now = self.rlapp.clock()
        if not self._clock_refresh:
            self._refreshed_at = time.monotonic()  # a refresh an event brought, not the clock
        self._clock_refresh = False
        v = self.model.view(now)
        areas = self._areas_due(areas, now)
        self._paint_areas(areas, v or {}, now)
        if self.model.ended:
            self.refresh_bindings()  # command keys go grey: an ended run is read-only

    def _areas_due(self, areas: set[str] | frozenset[str], now: float) -> set[str]:
        """The areas to repaint: those whose data changed; every one when the data turned stale or
        fresh (their look changes); those that show a time when a shown time moved."""
        stale = self.model.stale
        if stale != self._shown_stale:
            self._shown_stale = stale
            self.query_one("#top", Vertical).set_class(stale, "-stale")
            areas = AREAS
        due = set(areas)
        sig = self._clock_signature(now)
        if sig != self._clock_sig:  # a shown time moved: repaint it with this refresh
            self._clock_sig = sig
            due |= {"run", "table", "progress"}
        return due

    def _paint_areas(self, areas: set[str], v: dict[str, Any], now: float) -> None:
        comps = v.get("components") or {}
        stale = self.model.stale
        if "run" in areas:
            self.query_one(RunHeader).set_data(v.get("run") or {}, self.rlapp.session.server,
                                               (self.model.connection, self.model.connection_detail),
                                               self.model.data_at if stale else None, now)
        if areas & GAUGE_AREAS:
            self._gauges_at = time.monotonic()
        if areas & {"table", "resources"}:
            self.query_one(ComponentTable).set_data(comps, self.selected, now, stale)
        if "progress" in areas:
            self.query_one(ProgressPanel).set_data(comps, now, ended=self.model.ended, timefmt=self.rlapp.timefmt)
        if "gpu" in areas:
            self.query_one(GpuPanel).set_data(v)
        if "flags" in areas:
            self.query_one(FlagsStrip).set_data(self.model.flags(now))
        if areas & {"table", "run"}:
            self._retitle_panes(comps)

    def _retitle_panes(self, comps: dict[str, Any]) -> None:
        """Pane titles show their component's state: retitle those whose state changed."""
        for name, pane in self.panes.items():
            state = comps.get(name, {}).get("state", "")
            if state != pane.state:
                pane.state = state
                pane.update_title()

    # contexts -------------------------------------------------------------------------------
    @property
    def context(self) -> str:
        pane = self.selected_pane()
        if pane is not None and pane.view.selecting:
            return actions.SELECT
        return actions.LOG if (self.log_focus or self.zoomed) else actions.TABLE

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        where = actions.CONTEXTS.get(action)
        if where is None:
            return True  # not ours (Textual's own)
        if self.context not in where:
            return False
        if action in actions.COMMANDS and self.model.ended:
            return None  # shown greyed: an ended run takes no commands
        return True

    async def run_from_palette(self, action: str) -> None:
        """Run an action chosen in the command palette, saying why when its context is not the current one."""
        name = action.split("(")[0]
        where = actions.CONTEXTS.get(name, actions.ANY)
        if self.context not in where:
            need = " or ".join(actions.CONTEXT_NAMES[c] for c in (actions.TABLE, actions.LOG, actions.SELECT)
                               if c in where)
            self.notify(f"{name.replace('_', ' ')} acts in the {need}", severity="warning")
            return
        if action in actions.LOG_ACTIONS:  # the selected log pane's (none yet: nothing to act on)
            if (pane := self.selected_pane()) is not None:
                await self.app.run_action(action, pane)
            return
        await self.run_action(action)

    def _show_focus(self) -> None:
        ctx = self.context
        for j, p in enumerate(self.panes.values()):
            p.has_keys = j == self.selected and (self.log_focus or self.zoomed)
            p.set_look(focused=j == self.selected and ctx != actions.TABLE)
        self._focus_selected()
        table = self.query_one(ComponentTable)
        focused = ctx == actions.TABLE
        if table.focused != focused:
            table.focused = focused
            table.refresh()
        self.refresh_bindings()

    def _focus_selected(self) -> None:
        """Give the focus to the selected log pane, so its keys come first (not while the search
        box has it: typing goes there)."""
        if isinstance(self.focused, Input) and self.focused.display:
            return
        pane = self.selected_pane()
        if pane is not None and self.focused is not pane:
            self.set_focus(pane, scroll_visible=False)

    @on(LogPane.ModeChanged)
    def _mode_changed(self, event: LogPane.ModeChanged) -> None:
        self._show_focus()

    # selection ------------------------------------------------------------------------------
    def selected_name(self) -> str | None:
        names = list(self.panes)
        return names[self.selected] if 0 <= self.selected < len(names) else None

    def selected_pane(self) -> LogPane | None:
        name = self.selected_name()
        return self.panes.get(name) if name else None

    def _select(self, i: int) -> None:
        if not self.panes:
            return
        old = self.selected_pane()
        if old is not None and old.view.selecting and i % len(self.panes) != self.selected:
            old.view.end_select()
        self.selected = i % len(self.panes)
        for j, p in enumerate(self.panes.values()):
            p.set_look(selected=j == self.selected)
        table = self.query_one(ComponentTable)
        table.selected = self.selected
        table.refresh()
        if self.zoomed:
            self._layout()
        else:
            self._show_focus()

    def action_cycle(self, step: int) -> None:
        self._select(self.selected + step)

    def action_select(self, i: int) -> None:
        if 0 <= i < len(self.panes):
            self._select(i)

    def action_step(self, step: int) -> None:  # no wrapping around, unlike cycle (tab)
        self.action_select(self.selected + step)

    def action_focus_log(self) -> None:
        if self.selected_pane() is not None:
            self.log_focus = True
            self._show_focus()

    def action_focus_table(self) -> None:
        self.log_focus = False
        if self.zoomed:
            self.zoomed = False
            self._layout()
        self._show_focus()

    @on(ComponentTable.Clicked)
    def _table_clicked(self, event: ComponentTable.Clicked) -> None:
        self.log_focus = False
        self._select(event.index)

    @on(LogPane.Clicked)
    def _pane_clicked(self, event: LogPane.Clicked) -> None:
        names = list(self.panes)
        if event.pane.component in names:
            self.log_focus = True
            self._select(names.index(event.pane.component))

    # commands -------------------------------------------------------------------------------
    def send(self, command: str, component: str | None, on_ok: Callable[[], None] | None = None,
             **args: Any) -> None:
        self.run_worker(self._send(command, component, on_ok, **args), group="commands")

    async def _send(self, command: str, component: str | None, on_ok: Callable[[], None] | None,
                    **args: Any) -> None:
        what = f"{command} {component}" if component else command
        reply = await answer(self.rlapp.session.command(command, component, **args))
        if reply.get("ok"):
            self.notify(reply.get("message") or f"{what}: done", title=what)
            if on_ok:
                on_ok()
        else:
            self.notify(reply.get("error") or "refused", title=f"{what} failed", severity="error", timeout=8)

    @_on_selected
    def action_restart(self, name: str, c: dict[str, Any]) -> None:
        confirm(self.app, f"Restart {name}? (it is {c.get('state', '?')}, pid {c.get('pid') or '-'})",
                      lambda: self.send("restart", name))

    @_on_selected
    def action_resume(self, name: str, c: dict[str, Any]) -> None:
        ck = c.get("checkpoint") or {}
        where = f"its latest checkpoint (step {ck['step']})" if ck.get("step") is not None else "its latest checkpoint"
        confirm(self.app, f"Restart {name} from {where}?", lambda: self.send("resume", name))

    @_on_selected
    def action_stop_start(self, name: str, c: dict[str, Any]) -> None:
        if c.get("state") in ACTIVE:
            confirm(self.app, f"Stop {name}? (it is {c.get('state')})", lambda: self.send("stop", name))
        else:
            self.send("start", name)

    def action_stop_all(self) -> None:
        def stopped() -> None:
            self.rlapp.exit_message = "stopping every component; the supervisor ends the run when they are down"
            self.rlapp.session.close()
            self.rlapp.exit(0)

        confirm(self.app, "Stop EVERY component and end the run?", lambda: self.send("stop_all", None, stopped))

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
    def action_zoom(self) -> None:
        self.zoomed = not self.zoomed
        self._layout()

    @on(LogPane.SearchAsked)
    def _open_search(self, event: LogPane.SearchAsked) -> None:
        box = self.query_one("#search", SearchInput)
        box.display = True
        box.focus()

    @on(Input.Submitted, "#search")
    def _search_submitted(self, event: Input.Submitted) -> None:
        event.input.display = False
        self._focus_selected()
        if (pane := self.selected_pane()) is not None and event.value:
            pane.find(event.value, -1)

    @on(LogPane.FindOnDisk)
    def _find_past_held_lines(self, event: LogPane.FindOnDisk) -> None:
        self.run_worker(self._find_on_disk(event.pane, event.query, event.direction), group="search",
                        exclusive=True)

    async def _find_on_disk(self, pane: LogPane, query: str, direction: int) -> None:
        v = pane.view
        first, h = v.window_first, v.hist
        reply: dict[str, Any] = {}
        if direction < 0 and first is not None:
            reply = await self._disk("log_search", pane.component, query=query, before_seq=first)
        elif direction > 0 and h is not None:
            reply = await self._disk("log_search", pane.component, query=query,
                                     after_seq=v.dropped + len(v.lines) - 1)
            if reply.get("seq") is not None and reply["seq"] >= h.live_seq:
                reply = {}  # in the live lines: found there below
            if reply.get("seq") is None:
                v.leave_history()
                v.current = None
                if v.search(query, direction, wrap=False) is not None:
                    return
        seq = reply.get("seq") if reply.get("ok") else None
        if seq is not None:
            page = await self._disk("log_read", pane.component, from_seq=max(seq - PAGE // 2, reply["disk_first_seq"]),
                                    limit=PAGE)
            if page.get("ok") and page["lines"]:
                v.show_disk(page, at="top")
                v.show_match(query, seq)  # (in view)
                return
        if v.search(query, direction) is None:  # wrap around within the lines held
            where = " (the whole log file too)" if reply.get("ok") else ""
            self.notify(f"not found in {pane.component}{where}: {query}", severity="warning")

    @_on_selected
    def action_details(self, name: str, c: dict[str, Any]) -> None:
        v = self.model.view(self.rlapp.clock()) or {}
        comp = (v.get("components") or {}).get(name, c)
        self.app.push_screen(FailureScreen(name, comp, list(self.model.timeline), v.get("run") or {},
                                           self.rlapp.timefmt))

    @_on_selected
    def action_charts(self, name: str, c: dict[str, Any]) -> None:
        self.app.push_screen(ChartsScreen(self.rlapp, name))

    def action_gpu_processes(self) -> None:
        self.app.push_screen(GpuScreen(self.model.view(self.rlapp.clock()) or {}))

    def action_events(self) -> None:
        self.app.push_screen(TimelineScreen(self.model.timeline, self.rlapp.timefmt))

    def action_flags(self) -> None:
        sel = self.selected_name()
        flags = sorted(self.model.flags(self.rlapp.clock()), key=lambda nf: nf[0] != sel)
        self.app.push_screen(FlagsScreen(flags, self.rlapp.timefmt))

    @_on_selected
    def action_stacks(self, name: str, c: dict[str, Any]) -> None:
        self.notify(f"taking the Python stacks of {name}'s processes (py-spy)", title=f"stack {name}")
        self.run_worker(self._stacks(name), group="commands")

    async def _stacks(self, name: str) -> None:
        reply = await answer(self.rlapp.session.command("stack", name))
        if not reply.get("lines"):
            self.notify(reply.get("error") or "refused", title=f"stack {name} failed", severity="error", timeout=8)
            return
        self.app.push_screen(StacksScreen(name, reply))

    def action_help(self) -> None:
        """The key table, built once: it never changes, and building it (a Rich table of every key) held the
        first frame of each opening for 40-60 ms under a log flood; reopened, it is laid out and drawn already."""
        if not self.app.is_screen_installed("help"):
            self.app.install_screen(HelpScreen(), "help")
        self.app.push_screen("help")


class RlsupApp(App[int]):
    """The TUI over the session ``session_factory(listener)`` builds; ``clock`` and ``timefmt`` are
    injectable so tests render the same screen every time. With ``freeze_heap`` (``run_tui``; not in tests, where
    apps come and go), what is alive once the first snapshot shows is frozen out of garbage collections
    (:func:`rlsup.tui.freeze_heap`)."""

    CSS_PATH = "app.tcss"
    TITLE = "rlsup"
    COMMANDS = {KeyTableCommands}  # ctrl+p: the key table's actions (not Textual's theme/quit commands)
    BINDINGS = actions.bindings(app=True)

    def __init__(self, session_factory: Callable[[RunModel], Session], *, target: str = "", attach_hint: str = "",
                 clock: Callable[[], float] = time.time, timefmt: Callable[[float], str] = local_hms,
                 max_lines: int = 10_000, freeze_heap: bool = False):
        super().__init__()
        self.target, self.attach_hint, self.clock, self.timefmt = target, attach_hint, clock, timefmt
        self.freeze_heap = freeze_heap
        self.max_lines, self.exit_message = max_lines, ""
        self.model = self.listener = RunModel(max_lines, clock, timefmt)  # the session's listener
        self.model.changed, self.model.connection_changed = self._wake, self.connection_changed
        self._last_connection = ""
        self.session = session_factory(self.listener)

    def _wake(self) -> None:
        if (main := getattr(self, "main", None)) is not None:
            main.wake()

    def get_default_screen(self) -> Screen:
        self.main = MainScreen(self)
        return self.main

    def on_mount(self) -> None:
        self.run_worker(self._run_session(), name="session", exit_on_error=False)

    async def _run_session(self) -> None:
        try:
            await self.session.run()
        except Exception as e:  # never take the screen down with it: say so in the header
            self.model.on_connection("closed", f"session failed: {e}")  # (which wakes the screen)

    def action_detach(self) -> None:
        """Ctrl-C, on any screen: detach, as ``q`` does (never Textual's "press ctrl+q" toast)."""
        self.main.action_detach()

    def connection_changed(self, status: str, detail: str) -> None:
        if status != self._last_connection:
            if status == "ended":
                run = (self.model.state or {}).get("run") or {}
                where = f"; its logs and journal stay in {run['run_dir']}" if run.get("run_dir") else ""
                self.notify((ended_text(run, self.timefmt) or "the supervisor ended the run") + where,
                            title="run ended", timeout=10)
            elif status == "reconnecting" and self.model.ended:  # `rlsup up --resume` from another shell
                self.notify(detail, title="the run goes on", timeout=10)
            elif status == "reconnecting" and self._last_connection == "attached":
                self.notify(detail or "connection lost", title="reconnecting", severity="warning")
            self._last_connection = status


def run_tui(connect: Callable[[], Awaitable[Any]], *, target: str, attach_hint: str,
            goes_on: GoesOn | None = None, reopen_s: float | None = None) -> int:
    """Open the TUI on a run (``connect``, ``goes_on``, ``reopen_s``: as for
    :class:`~rlsup.supervisor.client.session.Session`). Returns 0 on detach (``q``, Ctrl-C) and after ``Q`` +
    confirm; the reason is printed once the terminal is back."""
    sized_by_the_terminal()
    app = RlsupApp(lambda listener: Session(connect, listener, goes_on=goes_on, reopen_s=reopen_s), target=target,
                   attach_hint=attach_hint, freeze_heap=True)
    result = app.run()
    # Any way out but Q (q, ctrl+c, ctrl+q, a crash) leaves training running: say how to come back.
    print(app.exit_message or f"training continues; re-attach with: {attach_hint}")
    return app.return_code or (result if isinstance(result, int) else 0)
