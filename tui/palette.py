"""The command palette (ctrl+p): every action of the key table by name, with its key."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from textual.command import DiscoveryHit, Hit, Hits, Provider

from rlsup.tui.actions import palette_entries

if TYPE_CHECKING:
    from rlsup.tui.app import RlsupApp


class KeyTableCommands(Provider):
    def _commands(self) -> list[tuple[str, str]]:
        """(name shown, action) for every action; "select" once per component."""
        app: RlsupApp = self.app  # type: ignore[assignment]
        out = []
        for action, label, text in palette_entries():
            if action.startswith("select("):
                for i, name in enumerate(app.main.names[:9]):
                    out.append((f"select component {i + 1}: {name}  ({i + 1})", f"select({i})"))
                continue
            out.append((f"{text}  ({label})", action))
        return out

    def _run(self, action: str) -> None:
        app: RlsupApp = self.app  # type: ignore[assignment]
        app.call_later(app.main.run_from_palette, action)

    async def discover(self) -> Hits:
        for name, action in self._commands():
            yield DiscoveryHit(name, partial(self._run, action))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, action in self._commands():
            if (score := matcher.match(name)) > 0:
                yield Hit(score, matcher.highlight(name), partial(self._run, action))
