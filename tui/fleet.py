"""The fleet screen: one row per pod, fleet flags on top, fleet-wide actions after a confirmation.

The app drives a headless :class:`rlsup.supervisor.client.fleet.Fleet` (one session per pod) on its own
loop; the fleet's callbacks only mark the view dirty and a timer repaints the table a few times
a second. Enter on a row exits the app with that pod's label: the caller (``cmd_fleet``) opens the
full TUI for it and comes back to the fleet afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, OptionList, Static
from textual.widgets.option_list import Option

from rlsup.supervisor.client.fleet import Fleet, PodSpec, gpu_summary, latest_problem, main_component
from rlsup.supervisor.render.bars import step_text
from rlsup.tui import sized_by_the_terminal
from rlsup.tui.format import clip, fmt_dur, fmt_rate, local_hms, separated
from rlsup.tui.screens import Closable, confirm

# The latest flag/diagnosis comes before the component states: on a narrow terminal the table
# scrolls sideways, and why a pod is unhappy matters more than the state of each component.
COLUMNS = (("sel", " "), ("pod", "pod"), ("conn", "connection"), ("run", "run"), ("step", "step"),
           ("rate", "rate"), ("eta", "ETA"), ("gpu", "GPU"), ("latest", "latest flag / diagnosis"),
           ("comps", "components"))
STATE_STYLE = {"running": "green", "starting": "yellow", "backoff": "bold yellow", "stopping": "yellow",
               "pending": "dim", "stopped": "dim", "completed": "bold blue", "fatal": "bold red"}
MAX_CELL = 56
MAX_REASON = 30
MAX_POD_PROBLEMS = 4  # per pod in the evidence screen (`v`), newest first
MAX_NAME = 12
REFRESH_HZ = 4.0  # repaints of the pod table per second (when anything changed)


def pod_cells(pod: dict[str, Any], selected: bool) -> dict[str, Text | str]:
    """The table cells of one pod (its ``rlsup fleet --json`` entry); pure, so tests can read it."""
    conn = pod["connection"]
    ended = pod.get("ended")
    if ended:  # "ended at 2026-11-22 10:37:08: trainer fatal: ... (exit code 1)", read from the pod's run dir
        conn_text = Text(clip(str(ended.get("note") or "ended"), 2 * MAX_REASON), style="yellow")
    elif pod["connected"]:
        conn_text = Text("connected", style="green")
    else:
        reason = f": {clip(pod['error'], MAX_REASON)}" if pod.get("error") else ""
        conn_text = Text(f"{conn}{reason}", style="bold red" if pod.get("error") else "yellow")
    comps = pod.get("components") or {}
    comp_text = Text(" ").join(Text.assemble(f"{clip(name, MAX_NAME)}:", (str(c.get("state")),
                                             STATE_STYLE.get(str(c.get("state")), ""))) for name, c in comps.items())
    main = (main_component(comps) or ("", {}))[1]  # no component: "-" for each
    latest = latest_problem(pod)
    return {
        "sel": Text("●", style="bold cyan") if selected else " ", "pod": Text(pod["label"], style="bold"),
        "conn": conn_text, "run": str((pod.get("run") or {}).get("name") or "-"), "comps": comp_text,
        "step": step_text(main), "rate": fmt_rate(main.get("rate")), "eta": fmt_dur(main.get("eta_s")),
        "gpu": gpu_summary(pod.get("gpus")),
        "latest": Text(clip(latest, MAX_CELL), style="red") if latest else "",
    }


class FleetFlags(Static):
    """The fleet flags on one or two lines (hidden when there are none)."""

    DEFAULT_CSS = "FleetFlags { height: auto; max-height: 3; background: $error 15%; padding: 0 1; }"

    def set_flags(self, flags: list[dict[str, Any]]) -> None:
        self.display = bool(flags)
        out = Text(overflow="ellipsis", end="")
        for f in separated(out, flags, "\n"):
            out.append("⚑ ", style="bold red").append(str(f["type"]), style="bold red")
            out.append(f": {f['message']} ({', '.join(f['pods'])})")
        if flags:
            out.append("   [v] evidence", style="dim")
        self.update(out)


class ComponentPicker(ModalScreen[str | None]):
    """Which component a fleet action applies to; enter picks, escape cancels."""

    BINDINGS = [Binding("escape", "dismiss", "cancel")]

    def __init__(self, question: str, names: Sequence[str], default: str | None = None):
        super().__init__()
        self.question = question
        self.names = list(names)
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, classes="question", markup=False)
            yield OptionList(*(Option(n, id=n) for n in self.names), id="picker")
            yield Static("enter: choose    escape: cancel", classes="hint")

    def on_mount(self) -> None:
        ol = self.query_one(OptionList)
        ol.highlighted = self.names.index(self.default) if self.default in self.names else 0
        ol.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)


def pod_evidence(pod: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    """A pod's own problems with their evidence, newest first: each component's flags and its last
    failed exit's diagnosis (from the pod's record: an ended pod's too). ``(component, what, lines)``."""
    out: list[tuple[float, str, str, list[str]]] = []
    for name, c in (pod.get("components") or {}).items():
        for f in c.get("flags") or []:
            out.append((float(f.get("ts") or 0), name, f"{f.get('type')}: {f.get('message')}",
                        [str(x) for x in f.get("evidence") or []]))
        ex = c.get("last_exit") or {}
        d = ex.get("diagnosis") or {}
        if d and d.get("category") not in (None, "none"):
            how = f"killed by {ex['signal']}" if ex.get("signal") else f"exit {ex.get('exit_code')}"
            out.append((float(ex.get("ts") or 0), name, f"{how}: {d.get('summary') or d.get('category')}",
                        [str(x) for x in d.get("evidence") or []]))
    return [(n, what, lines) for _, n, what, lines in sorted(out, key=lambda x: -x[0])]


class FleetFlagsScreen(Closable):
    """Each fleet flag with the evidence from every pod it names, then each pod's own problems with
    their evidence (a failure on one pod only is no fleet flag, and its evidence matters as much)."""

    BINDINGS = [Binding("escape,q,v", "dismiss", "close")]

    def __init__(self, flags: list[dict[str, Any]], timefmt: Callable[[float], str], pods: list[dict[str, Any]]):
        self.flags, self.timefmt = flags, timefmt
        text = Text(end="")
        for f in separated(text, flags, "\n\n"):
            self._flag(text, f)
        if not flags:
            text.append("no fleet flags: no failure is shared by two pods")
        for pod in pods:
            self._pod_problems(text, pod)
        super().__init__("[b]fleet flags and evidence per pod[/b]  (escape closes; enter on a pod opens it)", text)

    def _flag(self, text: Text, f: dict[str, Any]) -> None:
        """A fleet flag, then the evidence from each pod it names."""
        text.append(str(f["type"]), style="bold red").append(f"  {f['message']}")
        for ev in f.get("evidence") or []:
            how = ev.get("signal") or f"exit {ev.get('exit_code')}"
            text.append(f"\n  {ev['pod']}", style="bold")
            text.append(f"  {ev['component']}  {self.timefmt(ev.get('ts') or 0)}  {how}", style="dim")
            if ev.get("count", 1) > 1:
                text.append(f"  ({ev['count']} times)", style="dim")
            text.append(f"\n    {ev.get('summary') or ''}")
            for line in (ev.get("evidence") or [])[-8:]:
                text.append(f"\n    │ {line}", style="dim")

    def _pod_problems(self, text: Text, pod: dict[str, Any]) -> None:
        """A pod's own problems with their evidence, and how it ended (nothing for a pod with neither)."""
        problems = pod_evidence(pod)
        ended = (pod.get("ended") or {}).get("note")
        if not problems and not ended:
            return
        text.append(f"\n\n{pod['label']}", style="bold")
        if ended:
            text.append(f"  {ended}", style="yellow")
        for comp, what, lines in problems[:MAX_POD_PROBLEMS]:
            text.append(f"\n  {comp}  {what}")
            for line in lines[-8:]:
                text.append(f"\n    │ {line}", style="dim")


class FleetApp(App[str | None]):
    """The fleet view over a :class:`Fleet`; returns the label of the pod to open, or None."""

    CSS_PATH = ["app.tcss", "fleet.tcss"]
    TITLE = "rlsup fleet"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("space", "toggle_pod", "select"),
        Binding("a", "toggle_all", "select all"),
        Binding("r", "component('restart', 'Restart')", "restart"),
        Binding("u", "component('resume', 'Resume (from the latest checkpoint)')", "resume"),
        Binding("d", "down", "down"),
        Binding("v", "flags", "flags"),
        Binding("q", "quit_fleet", "quit"),
    ]

    def __init__(self, fleet: Fleet, *, timefmt: Callable[[float], str] = local_hms):
        super().__init__()
        self.fleet, self.timefmt = fleet, timefmt
        self.selected: set[str] = set()
        self.fleet.on_change = self._changed
        self.dirty = True

    def _changed(self) -> None:
        self.dirty = True

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-header")
        yield FleetFlags(id="fleet-flags")
        yield DataTable(id="pods", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        for p in self.fleet.pods:
            table.add_row(*([""] * len(COLUMNS)), key=p.label)
        table.focus()
        self.run_worker(self.fleet.run(), name="fleet", exit_on_error=False)
        self.set_interval(1 / REFRESH_HZ, self.repaint)
        self.set_interval(1.0, self._changed)  # ETAs and reasons move without events
        self.repaint()

    # painting -----------------------------------------------------------------------------------
    def repaint(self, now: bool = False) -> None:
        """Repaint if anything changed (``now``: whether or not)."""
        if not (self.dirty or now):
            return
        self.dirty = False
        snap = self.fleet.snapshot()
        n = len(snap["pods"])
        up = sum(p["connected"] for p in snap["pods"])
        sel = f" · {len(self.selected)} selected" if self.selected else ""
        with contextlib.suppress(NoMatches):  # the app is closing: a last timer tick after some widgets went
            table = self.query_one(DataTable)
            for pod in snap["pods"]:
                for key, value in pod_cells(pod, pod["label"] in self.selected).items():
                    table.update_cell(pod["label"], key, value, update_width=True)
            self.query_one("#fleet-header", Static).update(Text.assemble(
                ("rlsup fleet", "bold"), f" · {n} pods · ", (f"{up} connected", "green" if up == n else "yellow"),
                sel, ("   enter: open pod · space: select · r/u/d: act on selected (or the row)", "dim")))
            self.query_one(FleetFlags).set_flags(snap["flags"])

    # selection ----------------------------------------------------------------------------------
    def cursor_label(self) -> str | None:
        table = self.query_one(DataTable)
        if not self.fleet.pods:
            return None
        return self.fleet.pods[min(table.cursor_row, len(self.fleet.pods) - 1)].label

    def targets(self) -> list[str]:
        """The selected pods in fleet order, or the pod under the cursor when none is selected."""
        if self.selected:
            return [p.label for p in self.fleet.pods if p.label in self.selected]
        label = self.cursor_label()
        return [label] if label else []

    def action_toggle_pod(self) -> None:  # not action_toggle: that is DOMNode's toggle(attribute)
        label = self.cursor_label()
        if label is None:
            return
        self.selected ^= {label}
        table = self.query_one(DataTable)
        table.move_cursor(row=table.cursor_row + 1)  # (clamped to the last row)
        self.repaint(now=True)

    def action_toggle_all(self) -> None:
        everyone = {p.label for p in self.fleet.pods}
        self.selected = set() if self.selected == everyone else everyone
        self.repaint(now=True)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        label = str(event.row_key.value)
        self.fleet.close()
        self.exit(label)

    def action_quit_fleet(self) -> None:
        self.fleet.close()
        self.exit(None)

    # fleet-wide actions -------------------------------------------------------------------------
    def _who(self, labels: list[str]) -> str:
        return f"{len(labels)} pod{'s' if len(labels) != 1 else ''} ({', '.join(labels)})"

    def action_component(self, command: str, verb: str) -> None:
        """``command`` for one component (asked for) on the target pods, after a y/n."""
        labels = self.targets()
        if not labels:
            return
        pods = [self.fleet.pod(label) for label in labels]
        names = list(dict.fromkeys(n for pod in pods for n in (pod.state or {}).get("components") or {}))
        newest = max((f for pod in pods for f in pod.failures), key=lambda f: f.ts, default=None)  # picked first
        if not names:
            self.notify("no component known on those pods yet (not connected?)", severity="warning")
            return

        def picked(name: str | None) -> None:
            if name:
                confirm(self, f"{verb} {name} on {self._who(labels)}?", lambda: self.send(labels, command, name))

        self.push_screen(ComponentPicker(f"{verb} which component on {self._who(labels)}?", names,
                                         newest.component if newest else None), picked)

    def action_down(self) -> None:
        labels = self.targets()
        if labels:
            confirm(self, f"Stop EVERY component and end the run (rlsup down) on {self._who(labels)}?",
                          lambda: self.send(labels, "stop_all", None))

    def send(self, labels: list[str], command: str, component: str | None) -> None:
        self.run_worker(self._send(labels, command, component), group="commands")

    async def _send(self, labels: list[str], command: str, component: str | None) -> None:
        what = f"{command} {component}" if component else command
        replies = await self.fleet.command(labels, command, component)
        ok = [label for label, r in replies.items() if r.get("ok")]
        bad = {label: r.get("error") or "refused" for label, r in replies.items() if not r.get("ok")}
        if ok:
            self.notify(f"done on {', '.join(ok)}", title=what)
        for label, err in bad.items():
            self.notify(f"{label}: {err}", title=f"{what} failed", severity="error", timeout=8)
        self.selected.clear()
        self.dirty = True

    def action_flags(self) -> None:
        self.push_screen(FleetFlagsScreen(self.fleet.flags(), self.timefmt, self.fleet.snapshot()["pods"]))


def run_fleet_tui(specs: Sequence[PodSpec], connector_for: Callable[[PodSpec], Any]) -> str | None:
    """Open the fleet screen; returns the label of the pod chosen with enter, or None on quit."""
    sized_by_the_terminal()
    app = FleetApp(Fleet(specs, connector_for))
    result = app.run()
    app.fleet.close()
    return result if isinstance(result, str) else None
