"""The key footer, cut at a whole key: at 80 columns the main screen's keys do not all fit, and
Textual's footer cuts the last one mid-word. Keys that do not fit whole are left out (in the order
of the key table); ``?`` (help, which lists every key) always stays, as does the palette key.

The keys keep the order they had while the screen held every row (``actions.FOOTER_ORDER``), wherever
they are bound: Textual lists the focused widget's bindings first (the selected log pane's).

Textual's footer remounts every key (~20 widgets, each restyled twice) whenever the screen's bindings may
have changed: on every focus change and context switch, often twice a key (zoom, a pane switch, enter,
escape). Under a log flood that took 65-450 ms, and it could run before the frame showing the key's
effect. This one updates the keys in place, only those that changed (the table's keys and the log's
differ in a few labels), and remounts them only when their number changes."""

from __future__ import annotations

from itertools import accumulate, takewhile

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Footer

from rlsup.tui.actions import FOOTER_ORDER

KEEP = ("help",)  # actions shown whatever the width
GAP = 3  # cells a key takes beyond its key and description (padding, the space between them)


def _is_key(w: Widget) -> bool:
    """A footer key (Textual's FooterKey, recognised by its fields: its class is not public API)."""
    return hasattr(w, "key_display") and hasattr(w, "action") and hasattr(w, "description")


def key_width(key: Widget) -> int:
    return cell_len(getattr(key, "key_display", "") or "") + cell_len(getattr(key, "description", "") or "") + GAP


def fit(keys: list[Widget], width: int) -> list[Widget]:
    """The keys to show in ``width`` cells: those in :data:`KEEP` and, in order, as many others as fit whole."""
    kept = [k for k in keys if getattr(k, "action", None) in KEEP]
    others = [k for k in keys if k not in kept]
    room = width - sum(map(key_width, kept))
    fitting = others[: sum(1 for _ in takewhile(lambda used: used <= room, accumulate(map(key_width, others))))]
    return [k for k in keys if k in kept or k in fitting]


class FitFooter(Footer):
    _fitted_width = 0

    def compose(self) -> ComposeResult:
        items = list(super().compose())
        keys = sorted((k for k in items if _is_key(k)),
                      key=lambda k: FOOTER_ORDER.get(getattr(k, "action", ""), len(FOOTER_ORDER)))
        if len(keys) != len(items):  # groups (none in rlsup's tables): leave Textual's layout alone
            yield from items
            return
        width = self.size.width or self.app.size.width
        self._fitted_width = width
        palette = [k for k in keys if getattr(k, "action", "") == "app.command_palette" or "-command-palette" in k.classes]
        rest = [k for k in keys if k not in palette]
        yield from fit(rest, width - sum(map(key_width, palette)) - 1)
        yield from palette

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self._fitted_width:
            self.refresh(recompose=True)

    async def recompose(self) -> None:
        shown = [w for w in self.children if _is_key(w)]
        new = list(self.compose()) if shown and len(shown) == len(self.children) else []
        if not new or len(new) != len(shown) or not all(map(_is_key, new)):
            await super().recompose()
            return
        for old, key in zip(shown, new, strict=True):
            if _fields(old) != _fields(key):
                wider = key_width(old) != key_width(key)
                for name in _FIELDS:
                    setattr(old, name, getattr(key, name))
                old.set_class(key.has_class("-disabled"), "-disabled")  # (greyed: an ended run's commands)
                old.refresh(layout=wider)


_FIELDS = ("key", "key_display", "description", "action", "_disabled")


def _fields(key: Widget) -> tuple[object, ...]:
    """What a footer key shows and does (its fields, as Textual's FooterKey holds them)."""
    return tuple(getattr(key, name, None) for name in _FIELDS)
