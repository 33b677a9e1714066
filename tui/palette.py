"""The command palette (ctrl+p): every action of the key table by name, with its key."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from textual.command import DiscoveryHit, Hit, Hits, Provider

from rlsup.tui.actions import palette_entries

if TYPE_CHECKING:
    from rlsup.tui.app import RlsupApp


class KeyTableCommands(Provider):
    def _commands(self) -> list[tuple[str, Callable[[], object]]]:
        """(name shown, what runs it) for every action; "select" once per component."""
        app: RlsupApp = self.app  # type: ignore[assignment]
        named = []
        for action, label, text in palette_entries():
            if action.startswith("select("):
                named += [(f"select component {i + 1}: {name}  ({i + 1})", f"select({i})")
                          for i, name in enumerate(list(app.main.panes)[:9])]
            else:
                named.append((f"{text}  ({label})", action))
        return [(name, partial(app.call_later, app.main.run_from_palette, action)) for name, action in named]

    async def discover(self) -> Hits:
        for name, run in self._commands():
            yield DiscoveryHit(name, run)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, run in self._commands():
            if (score := matcher.match(name)) > 0:
                yield Hit(score, matcher.highlight(name), run)
