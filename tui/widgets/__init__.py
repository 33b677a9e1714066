"""rlsup."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget


class TextPanel(Widget):
    """A widget whose text :meth:`build` makes for a width, kept until the data or the width changes."""

    MIN_WIDTH = 0
    _text: tuple[int, Text] | None = None  # (width, what render() returns)

    def show(self) -> None:
        """After new data: repaint only when the text shown changes (a layout pass only when its height does)."""
        old = self._text[1] if self._text else None
        self._text = None
        new = self.render()
        if old is None or new.plain != old.plain:
            self.refresh(layout=old is None or new.plain.count("\n") != old.plain.count("\n"))

    def on_resize(self) -> None:
        self._text = None

    def render(self) -> Text:
        width = max(self.size.width, self.MIN_WIDTH)
        if self._text is None or self._text[0] != width:
            self._text = (width, self.build(width))
        return self._text[1]

    def build(self, width: int) -> Text:
        raise NotImplementedError
