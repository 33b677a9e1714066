"""The flags strip: every active flag on one or two lines, with the key that shows evidence."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widget import Widget

from rlsup.tui.format import separated


class FlagsStrip(Widget):
    COMPONENT_CLASSES = {"flags--icon", "flags--type", "flags--hint"}
    DEFAULT_CSS = """
    FlagsStrip { height: auto; max-height: 3; background: $error 15%; }
    FlagsStrip > .flags--icon { color: $error; text-style: bold; }
    FlagsStrip > .flags--type { color: $error; text-style: bold; }
    FlagsStrip > .flags--hint { color: $text-muted; }
    """

    flags: list[tuple[str, dict[str, Any]]] = []

    def set_data(self, flags: list[tuple[str, dict[str, Any]]]) -> None:
        if flags == self.flags and self.display == bool(flags):
            return
        self.flags = flags
        self.display = bool(flags)  # showing or hiding it is the layout change; the text is not
        self.refresh()

    def render(self) -> Text:
        out = Text(overflow="ellipsis", end="")
        out.append(" ⚑ ", style=self.get_component_rich_style("flags--icon"))
        for comp, f in separated(out, self.flags, "  ·  "):
            out.append(f"{comp} ")
            out.append(str(f.get("type")), style=self.get_component_rich_style("flags--type"))
            out.append(f": {f.get('message') or ''}")
        out.append("   [v] evidence", style=self.get_component_rich_style("flags--hint"))
        return out
