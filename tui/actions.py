"""The one table of keys. The main screen's bindings, its footer, the ``?`` help, the command
palette and the README's key table all read it.

Each row names its action (a method of the main screen, or for ``log`` rows of the selected
:class:`~rlsup.tui.widgets.log_pane.LogPane`, which holds the focus so Textual asks it first) and the
contexts where it acts: ``table`` (the default: arrows and j/k move the selection), ``log`` (``enter``
or a zoomed pane: they scroll the selected log) and ``select`` (copy mode, ``c``). One key may have
rows in disjoint contexts; ``check_action`` enables the current context's row, so the footer shows
what a key does now (a pane's disabled row lets the key through to the screen's).
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding, BindingType

TABLE, LOG, SELECT = "table", "log", "select"
BROWSE = frozenset({TABLE, LOG})
ANY = frozenset({TABLE, LOG, SELECT})
CONTEXT_NAMES = {TABLE: "component table", LOG: "log (enter to focus it, or z)", SELECT: "copy mode (c)"}
WHERE = {ANY: "anywhere", BROWSE: "table, log", frozenset({TABLE}): "table", frozenset({LOG}): "log",
         frozenset({SELECT}): "copy mode"}  # short names of the contexts, for help and the README


@dataclass(frozen=True)
class Key:
    keys: str  # Textual key names, comma-separated
    label: str  # how the footer and help show them
    action: str  # action on the main screen (on the selected log pane for ``log`` rows)
    description: str  # footer text
    help: str  # one line for the ? screen and the command palette
    footer: bool = True
    priority: bool = False
    contexts: frozenset[str] = BROWSE
    command: bool = False  # sends a command to the supervisor (refused on an ended run)
    app: bool = False  # bound on the app, so it acts on every screen
    log: bool = False  # bound on the log pane: acts on the selected log


KEYS: tuple[Key, ...] = (
    # selection and focus
    Key("tab", "tab", "cycle(1)", "next", "select the next component (shift+tab: previous)",
        footer=False, priority=True),
    Key("shift+tab", "shift+tab", "cycle(-1)", "prev", "select the previous component",
        footer=False, priority=True),
    *(Key(str(i), "1-9", f"select({i - 1})", "select", "select component N (the # column)", footer=False)
      for i in range(1, 10)),
    Key("up,k", "↑/k", "step(-1)", "select", "select the previous component", contexts=frozenset({TABLE})),
    Key("down,j", "↓/j", "step(1)", "select", "select the next component", footer=False,
        contexts=frozenset({TABLE})),
    Key("enter", "enter", "focus_log", "log keys", "give the arrows and j/k to the selected log",
        contexts=frozenset({TABLE})),
    Key("escape", "esc", "focus_table", "table keys", "give the arrows and j/k back to the component table",
        contexts=frozenset({LOG})),
    # scrolling the selected log
    Key("up,k", "↑/k", "scroll(-1)", "scroll", "scroll the log up a line (pauses follow)", contexts=frozenset({LOG}), log=True),
    Key("down,j", "↓/j", "scroll(1)", "scroll", "scroll the log down a line (at the end: follow again)",
        footer=False, contexts=frozenset({LOG}), log=True),
    Key("pageup,ctrl+b", "pgup/ctrl+b", "page(-1)", "page", "scroll the selected log up a page", footer=False, contexts=ANY, log=True),
    Key("pagedown,ctrl+f", "pgdn/ctrl+f", "page(1)", "page", "scroll the selected log down a page", footer=False,
        contexts=ANY, log=True),
    Key("home,g", "home/g", "log_top", "top", "line 1 of the log, read from disk (pauses follow)", footer=False, contexts=ANY, log=True),
    Key("end,G", "end/G", "log_end", "end", "the newest line, following again", footer=False, contexts=ANY, log=True),
    Key("left,h", "←/h", "sideways(-1)", "sideways", "scroll the log left (wrap off)", footer=False, contexts=ANY, log=True),
    Key("right,l", "→/l", "sideways(1)", "sideways", "scroll the log right (wrap off)", footer=False, contexts=ANY, log=True),
    Key("f", "f", "follow", "follow", "follow the selected log on/off", log=True),
    Key("w", "w", "wrap", "wrap", "wrap long lines on/off (off: cut, scroll sideways with ←/→)", contexts=ANY, log=True),
    Key("slash", "/", "search", "search", "search the selected log; n / N: next / previous match", contexts=ANY, log=True),
    Key("n", "n", "match(1)", "next match", "next (newer) match of the search", footer=False, contexts=ANY, log=True),
    Key("N", "N", "match(-1)", "prev match", "previous (older) match of the search", footer=False, contexts=ANY, log=True),
    Key("z", "z", "zoom", "zoom", "zoom the selected log pane (again: back to all panes)"),
    # commands
    Key("r", "r", "restart", "restart", "restart the selected component (asks y/n)", command=True),
    Key("u", "u", "resume", "resume", "restart it from its latest checkpoint (asks y/n)", command=True),
    Key("s", "s", "stop_start", "stop/start", "stop the selected component (asks) or start it if stopped",
        command=True),
    # views
    Key("d", "d", "details", "details", "why the selected component failed: diagnosis, evidence, what rlsup did, "
                                        "what to do next"),
    Key("m", "m", "charts", "charts", "charts of every progress metric against step, for the whole run"),
    Key("p", "p", "gpu_processes", "GPU procs", "the processes on each GPU, with the component they belong to",
        footer=False),
    Key("t", "t", "stacks", "stacks", "where the selected component's processes are: their Python stacks (py-spy), "
                                      "taken by the supervisor", footer=False, command=True),
    Key("e", "e", "events", "events", "event timeline: starts, exits, diagnoses, restarts, flags"),
    Key("v", "v", "flags", "flags", "flags with their evidence (selected component first)"),
    Key("question_mark", "?", "help", "help", "this help"),
    Key("q", "q", "detach", "detach", "leave the TUI; training keeps running (rlsup attach to come back)"),
    Key("ctrl+c", "ctrl+c", "detach", "detach", "the same as q", footer=False, priority=True, contexts=ANY, app=True),
    Key("Q", "Q", "stop_all", "stop all", "stop every component and end the run (asks)", command=True),
    # copy mode (after the rows that share its keys, so the footer keeps their order)
    Key("c", "c", "copy_mode", "copy", "copy mode: select lines of the selected log for the clipboard or a file", log=True),
    Key("up,k", "↑/k", "cursor(-1)", "extend", "move the end of the selection up", contexts=frozenset({SELECT}), log=True),
    Key("down,j", "↓/j", "cursor(1)", "extend", "move the end of the selection down", footer=False,
        contexts=frozenset({SELECT}), log=True),
    Key("space", "space", "reanchor", "restart", "start the selection again at the cursor",
        contexts=frozenset({SELECT}), log=True),
    Key("y,enter", "y/enter", "copy", "copy", "put the selection on the clipboard (OSC 52; in tmux also its buffer)",
        contexts=frozenset({SELECT}), log=True),
    Key("s", "s", "save", "save", "write the selection to a file (asks for the path)", contexts=frozenset({SELECT}), log=True),
    Key("escape,q", "esc/q", "cancel_copy", "cancel", "leave copy mode", contexts=frozenset({SELECT}), log=True),
)

CONTEXTS: dict[str, frozenset[str]] = {}  # screen or pane action name (no arguments) -> where it acts
COMMANDS = frozenset(k.action for k in KEYS if k.command)
LOG_ACTIONS = frozenset(k.action for k in KEYS if k.log)  # the actions of the selected log pane
# The footer's order, kept now that the rows are bound in two places (see footer.py): Textual's binding
# map holds the keys in the order the table first binds each (bound rows or not), and the footer shows an
# action where it first meets one of its keys. So: action -> the first row that binds any of its keys.
_FIRST_ROW = {key: i for i, k in reversed(list(enumerate(KEYS))) if not k.app for key in k.keys.split(",")}
FOOTER_ORDER = {k.action: min(_FIRST_ROW[key] for key in k.keys.split(",")) for k in KEYS if not k.app}
for _k in (k for k in KEYS if not k.app):
    _name = _k.action.split("(")[0]
    CONTEXTS[_name] = CONTEXTS.get(_name, frozenset()) | _k.contexts


def bindings(log: bool = False, app: bool = False) -> list[BindingType]:
    """Textual bindings for the main screen, from :data:`KEYS` (app-wide rows and the log pane's
    excluded); with ``log``, those of the log pane; with ``app``, those the app holds for every
    screen (Ctrl-C detaches from anywhere)."""
    seen: set[tuple[str, str]] = set()
    out: list[BindingType] = []
    for k in KEYS:
        if k.app != app or k.log != log:
            continue
        show = k.footer and (k.label, k.action) not in seen
        seen.add((k.label, k.action))
        out.append(Binding(k.keys, k.action, k.description, show=show, key_display=k.label,
                           priority=k.priority))
    return out


def help_rows() -> list[tuple[str, str, str]]:
    """(keys, what it does, where) for the help screen and the README, one row per distinct
    label and action."""
    rows: dict[tuple[str, str], tuple[str, str, str]] = {}
    for k in KEYS:
        rows.setdefault((k.label, k.action.split("(")[0]), (k.label, k.help, WHERE[k.contexts]))
    return list(rows.values())


def palette_entries() -> list[tuple[str, str, str]]:
    """(action, keys, help) for the command palette: every action of the table, once."""
    out: dict[str, tuple[str, str, str]] = {}
    for k in KEYS:
        if not k.action.startswith("select(") or k.action == "select(0)":
            out.setdefault(k.action, (k.action, k.label, k.help))
    return list(out.values())


def markdown_table() -> str:
    """The README's key table, generated from :data:`KEYS`."""
    lines = ["| key | what it does | where |", "| --- | --- | --- |"]
    for label, what, where in help_rows():
        keys = " / ".join(f"`{part}`" for part in label.split("/")) if label not in ("/",) else "`/`"
        lines.append(f"| {keys} | {what} | {where} |")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m rlsup.tui.actions: the key table for the README and docs/tui.md
    print(markdown_table())
