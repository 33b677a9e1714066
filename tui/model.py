"""What the TUI knows about the run, fed by the session callbacks; no textual here.

The session callbacks run on Textual's event loop and must stay cheap, so they only fold events
into the state (the same reducer the supervisor runs) and append log lines to per-component
pending buffers. The app's single flush timer takes those buffers once per tick.
"""

from __future__ import annotations

import collections
from typing import Any

from rlsup.supervisor import state as run_state
from rlsup.supervisor.events import is_lifecycle

MAX_TIMELINE = 5000


class LogFeed:
    """Pending log lines per component, between the socket and the panes.

    Bounded: if the view stops flushing, only the newest ``limit`` lines per component are kept
    and the rest become one "not shown" marker, so a frozen view cannot grow memory without end.
    """

    def __init__(self, limit: int = 10_000):
        self.limit = limit
        self.pending: dict[str, list[str]] = {}
        self.next_seq: dict[str, int] = {}
        self.total: dict[str, int] = collections.Counter()
        self.resets: set[str] = set()

    def add(self, component: str, seq: int, lines: list[str]) -> None:
        buf = self.pending.get(component)
        if buf is None:
            buf = self.pending[component] = []
        buf.extend(lines)
        self.next_seq[component] = seq + len(lines)
        self.total[component] += len(lines)
        if len(buf) > self.limit + self.limit // 4:
            drop = len(buf) - self.limit
            del buf[:drop]
            buf.insert(0, skipped_marker(drop))

    def gap(self, component: str, from_seq: int, to_seq: int) -> None:
        self.pending.setdefault(component, []).append(skipped_marker(to_seq - from_seq, component))
        self.next_seq[component] = to_seq

    def reset(self, component: str, seq: int, lines: list[str]) -> None:
        """Replace what the pane shows (a fresh snapshot, not a continuation)."""
        self.pending[component] = list(lines)
        self.next_seq[component] = seq + len(lines)
        self.resets.add(component)

    def take(self) -> tuple[dict[str, list[str]], set[str]]:
        """All pending lines (and which panes to clear first); leaves the feed empty."""
        out, resets = self.pending, self.resets
        self.pending, self.resets = {}, set()
        return out, resets


def skipped_marker(n: int, component: str | None = None) -> str:
    where = f" (full log: logs/{component}.log)" if component else ""
    return f"··· {n:,} lines not shown{where} ···"


class RunModel:
    """The client's copy of the run: state folded with ``state.apply``, the timeline, the feed."""

    def __init__(self, log_limit: int = 10_000):
        self.state: dict[str, Any] | None = None
        self.timeline: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_TIMELINE)
        self.feed = LogFeed(log_limit)
        self.connection = "connecting"
        self.connection_detail = ""
        self.server: dict[str, Any] = {}
        self.dirty = True  # state changed since the view last looked

    # SessionListener ------------------------------------------------------------------------
    def on_connection(self, status: str, detail: str) -> None:
        self.connection, self.connection_detail = status, detail
        self.dirty = True

    def on_snapshot(self, snapshot: dict[str, Any], resumed: bool) -> None:
        self.state = snapshot.get("state") or run_state.initial({}, [])
        for name in self.state.get("components", {}):
            self.feed.total.setdefault(name, 0)
        for name, block in (snapshot.get("logs") or {}).items():
            if resumed:
                self.feed.add(name, block.get("seq", 0), block.get("lines", []))
            else:
                self.feed.reset(name, block.get("seq", 0), block.get("lines", []))
        self.dirty = True

    def on_event(self, event: dict[str, Any]) -> None:
        if self.state is not None:
            run_state.apply(self.state, event)
        if is_lifecycle(event.get("kind", "")):
            self.timeline.append(event)
        self.dirty = True

    def on_logs(self, component: str, seq: int, lines: list[str]) -> None:
        self.feed.add(component, seq, lines)

    def on_gap(self, component: str, from_seq: int, to_seq: int) -> None:
        self.feed.gap(component, from_seq, to_seq)

    # views ----------------------------------------------------------------------------------
    def names(self) -> list[str]:
        if self.state is None:
            return []
        return list(self.state.get("components", {}))

    def view(self, now: float) -> dict[str, Any] | None:
        return None if self.state is None else run_state.view(self.state, now)

    def flags(self) -> list[tuple[str, dict[str, Any]]]:
        """Every active flag as (component, flag), oldest first."""
        out = []
        for name, c in (self.state or {}).get("components", {}).items():
            out.extend((name, f) for f in c.get("flags") or [])
        return sorted(out, key=lambda nf: nf[1].get("ts") or 0)
