"""The one table of keys. The main screen's bindings, its footer and the ``?`` help all read it.

Each row names the action method on the main screen (``action_<name>``) it triggers.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding


@dataclass(frozen=True)
class Key:
    keys: str  # textual key names, comma separated
    label: str  # how help and footer spell it
    action: str  # action on the main screen
    description: str  # footer text
    help: str  # one line for the ? screen
    footer: bool = True
    priority: bool = False


KEYS: tuple[Key, ...] = (
    Key("tab", "tab", "next_component", "next", "select the next component (shift+tab: previous)",
        footer=False, priority=True),
    Key("shift+tab", "shift+tab", "prev_component", "prev", "select the previous component",
        footer=False, priority=True),
    *(Key(str(i), "1-9", f"select({i - 1})", "select", "select component N (the # column)", footer=False)
      for i in range(1, 10)),
    Key("r", "r", "restart", "restart", "restart the selected component (asks y/n)"),
    Key("u", "u", "resume", "resume", "restart it from its latest checkpoint (asks y/n)"),
    Key("s", "s", "stop_start", "stop/start", "stop the selected component (asks) or start it if stopped"),
    Key("f", "f", "follow", "follow", "follow the selected log on/off"),
    Key("slash", "/", "search", "search", "search the selected log; n / N: next / previous match"),
    Key("n", "n", "next_match", "next match", "next (newer) match of the search", footer=False),
    Key("N", "N", "prev_match", "prev match", "previous (older) match of the search", footer=False),
    Key("z", "z", "zoom", "zoom", "zoom the selected log pane (again: back to all panes)"),
    Key("e", "e", "events", "events", "event timeline: starts, exits, diagnoses, restarts, flags"),
    Key("v", "v", "flags", "flags", "flags with their evidence (selected component first)"),
    Key("question_mark", "?", "help", "help", "this help"),
    Key("q", "q", "detach", "detach", "leave the TUI; training keeps running (rlsup attach to come back)"),
    Key("Q", "Q", "stop_all", "stop all", "stop every component and end the run (asks)"),
)


def bindings() -> list[Binding]:
    """Textual bindings for the main screen, from :data:`KEYS`."""
    seen_label: set[str] = set()
    out = []
    for k in KEYS:
        show = k.footer and k.label not in seen_label
        seen_label.add(k.label)
        out.append(Binding(k.keys, k.action, k.description, show=show, key_display=k.label,
                           priority=k.priority))
    return out


def help_rows() -> list[tuple[str, str]]:
    """(keys, what it does) for the help screen, one row per distinct label."""
    rows: list[tuple[str, str]] = []
    seen: set[str] = set()
    for k in KEYS:
        if k.label not in seen:
            seen.add(k.label)
            rows.append((k.label, k.help))
    return rows
