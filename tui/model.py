"""What the TUI knows about the run, fed by the session callbacks; no textual here.

The session callbacks run on Textual's event loop and must stay cheap, so they only fold events
into the state (the same reducer the supervisor runs) and append log lines to per-component
pending buffers. The app's single flush timer takes those buffers once per tick.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import re
from collections.abc import Callable, Mapping
from typing import Any

from rlsup.supervisor.records import state as run_state
from rlsup.supervisor.records.events import (
    ComponentAdopted,
    ComponentStarted,
    GpuSampled,
    ProgressUpdated,
    Record,
    ResourcesSampled,
    as_record,
)
from rlsup.supervisor.records.progress import current_rate
from rlsup.tui.format import fmt_dur

MAX_TIMELINE = 5000
AREAS = frozenset({"run", "table", "progress", "gpu", "resources", "flags"})  # what a change may need repainted
GAUGE_AREAS = frozenset({"gpu", "resources"})  # what a GPU/host or resources sample changes (resources: the table's columns)


class Marker(str):
    """A line the view draws itself (a restart marker), not output of the component."""

    __slots__ = ()


class LogFeed:
    """Pending log lines per component, between the socket and the panes. Bounded: past ``limit``
    lines per component the oldest become one "not shown" marker, so a frozen view cannot grow memory.
    Restart markers (:class:`Marker`) go in at their ``log_seq`` (held back until the lines before it
    arrived), else where the stream stands."""

    def __init__(self, limit: int = 10_000):
        self.limit = limit
        self.pending: dict[str, list[str]] = {}
        self.next_seq: dict[str, int] = {}
        self.resets: set[str] = set()
        self.marked: set[str] = set()  # components whose pending lines hold a Marker
        self.first_seq: dict[str, int] = {}  # sequence number of the first pending line
        self.waiting: dict[str, list[tuple[int, Marker]]] = {}  # markers ahead of the stream, by seq
        self.taken_first: dict[str, int] = {}  # first_seq of the batches the last take() handed out
        # Sequence number of the oldest line the pane holds since its last reset: a marker older
        # than that belongs to lines the pane never got (a re-attach shows a log's end), so it has
        # no place in it, neither at its top nor at the stream's end.
        self.origin: dict[str, int] = {}

    def mark(self, component: str, seq: int | None, text: str) -> None:
        m = Marker(text)
        if seq is not None and seq < self.origin.get(component, seq):
            return
        known = self.next_seq.get(component)
        if seq is None or (known is not None and seq <= known):
            self.pending.setdefault(component, []).append(m)
            self.marked.add(component)
        else:
            w = self.waiting.setdefault(component, [])
            bisect.insort(w, (seq, m), key=lambda sm: sm[0])

    def _splice(self, component: str, seq: int, lines: list[str], drop_before: bool = False) -> list[str]:
        """``lines`` (numbered from ``seq``) with the waiting markers that fall among them."""
        w = self.waiting.get(component)
        end = seq + len(lines)
        if not w or w[0][0] > end:
            return lines
        out = list(lines)
        k = bisect.bisect_right(w, end, key=lambda sm: sm[0])
        for mseq, m in reversed(w[:k]):
            if not (drop_before and mseq < seq):
                out.insert(max(0, mseq - seq), m)
        del w[:k]
        self.marked.add(component)
        return out

    def add(self, component: str, seq: int, lines: list[str]) -> None:
        if first := component not in self.origin:
            self.origin[component] = seq
        if component in self.waiting:
            lines = self._splice(component, seq, lines, drop_before=first)
        buf = self.pending.get(component)
        if buf is None:
            buf = self.pending[component] = []
            self.first_seq[component] = seq
        buf.extend(lines)
        self.next_seq[component] = seq + len(lines)
        if len(buf) > self.limit + self.limit // 4:
            drop = len(buf) - self.limit
            del buf[:drop]
            buf.insert(0, skipped_marker(drop))
            if component in self.first_seq:
                self.first_seq[component] += drop

    def gap(self, component: str, from_seq: int, to_seq: int) -> None:
        buf = self.pending.setdefault(component, [])
        buf.append(skipped_marker(to_seq - from_seq, component))
        if component in self.waiting:
            buf.extend(self._splice(component, to_seq, []))
        self.next_seq[component] = to_seq

    def reset(self, component: str, seq: int, lines: list[str]) -> None:
        """Replace what the pane shows (a fresh snapshot, not a continuation).

        Lines pushed after the snapshot can reach the listener before the snapshot does (they
        follow the subscribe reply on the same connection); those are kept after it."""
        end = seq + len(lines)
        newer = self.pending.get(component) if self.first_seq.get(component, -1) >= end else None
        self.pending[component] = self._splice(component, seq, list(lines), drop_before=True) + (newer or [])
        self.next_seq[component] = max(end, self.next_seq.get(component, end)) if newer else end
        self.first_seq[component] = self.origin[component] = seq
        self.resets.add(component)

    def take(self) -> tuple[dict[str, list[str]], set[str], set[str]]:
        """All pending lines, which panes to clear first and which batches hold markers; leaves
        the feed empty."""
        out, resets, marked = self.pending, self.resets, self.marked
        self.pending, self.resets, self.marked = {}, set(), set()
        self.taken_first, self.first_seq = self.first_seq, {}
        return out, resets, marked


def skipped_marker(n: int, component: str | None = None) -> str:
    where = f" (full log: logs/{component}.log)" if component else ""
    return f"··· {n:,} lines not shown{where} ···"


def attempt_marker(event: Record | Mapping[str, Any], timefmt: Callable[[float], str]) -> str | None:
    """``── attempt 3 · resumed from step 50 · 10:37:08 ──`` for a ``started`` (or ``adopted``) event."""
    rec = as_record(event)
    e = rec.event
    parts = []
    if isinstance(e, ComponentStarted):
        parts.append(f"attempt {e.attempt or '?'}")
        if (resume := e.resume) is not None:
            parts.append("resumed from its checkpoint" if resume.step is None else f"resumed from step {resume.step}")
    elif isinstance(e, ComponentAdopted):
        parts.append(f"attempt {e.attempt or '?'} adopted by a new supervisor (pid {e.pid})")
    else:
        return None
    parts.append(timefmt(rec.ts or 0))
    return "── " + " · ".join(parts) + " ──"


class RunModel:
    """The client's copy of the run: state folded with ``state.apply``, the timeline, the feed.
    ``dirty`` names the screen areas whose data changed since the view last looked.

    It is the app's :class:`~rlsup.supervisor.client.session.SessionListener`: each callback only folds
    into it and calls ``changed`` (the app wakes its flush timer, which paints); with ``timefmt``, a start
    puts a restart marker in the component's log."""

    def __init__(self, log_limit: int = 10_000, clock: Callable[[], float] | None = None,
                 timefmt: Callable[[float], str] | None = None):
        self.timefmt = timefmt
        self.changed: Callable[[], None] = lambda: None
        self.connection_changed: Callable[[str, str], None] = lambda status, detail: None
        self.state: dict[str, Any] | None = None
        self.timeline: collections.deque[Record] = collections.deque(maxlen=MAX_TIMELINE)
        self.feed = LogFeed(log_limit)
        self.connection = "connecting"
        self.connection_detail, self.clock = "", clock
        self.data_at: float | None = None  # wall time the last snapshot or event arrived
        self.dirty: set[str] = set(AREAS)

    # SessionListener ------------------------------------------------------------------------
    def on_connection(self, status: str, detail: str) -> None:
        self.connection, self.connection_detail = status, detail
        self.dirty |= AREAS  # stale or live: every area changes its look
        self.connection_changed(status, detail)
        self.changed()

    def on_snapshot(self, snapshot: dict[str, Any], resumed: bool) -> None:
        self.state = snapshot.get("state") or run_state.initial({}, [])
        for name, block in (snapshot.get("logs") or {}).items():
            (self.feed.add if resumed else self.feed.reset)(name, block.get("seq", 0), block.get("lines", []))
        self._touch()
        self.dirty |= AREAS
        self.changed()

    def on_event(self, event: Record | Mapping[str, Any]) -> None:
        rec = as_record(event)  # typed once, at the socket's edge (the session parses; a dict still is)
        if self.state is not None:
            # a shape this client does not know
            with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):
                run_state.apply(self.state, rec)
        if isinstance(rec.event, (GpuSampled, ResourcesSampled)):
            self.dirty |= GAUGE_AREAS
        elif isinstance(rec.event, ProgressUpdated):
            self.dirty |= {"progress", "table"}
        else:
            self.timeline.append(rec)  # the timeline shows what came, as it came
            self.dirty |= AREAS
        self._touch()
        comp, e = rec.component, rec.event
        log_seq = e.log_seq if isinstance(e, ComponentStarted) else None
        if self.timefmt and comp and isinstance(e, (ComponentStarted, ComponentAdopted)) and (
                self.state is not None or log_seq is not None):
            # Replayed before the first snapshot, a marker without a log position would land in
            # the wrong place: only live starts, or starts that say where their output begins.
            if text := attempt_marker(rec, self.timefmt):
                self.feed.mark(comp, log_seq, text)
        self.changed()

    def on_logs(self, component: str, seq: int, lines: list[str]) -> None:
        self.feed.add(component, seq, lines)
        self.changed()

    def on_gap(self, component: str, from_seq: int, to_seq: int) -> None:
        self.feed.gap(component, from_seq, to_seq)
        self.changed()

    def _touch(self) -> None:
        if self.clock is not None:
            self.data_at = self.clock()

    @property
    def stale(self) -> bool:
        """The link is down (or not up yet) while the run may still be going: data may be old."""
        return self.connection in ("connecting", "reconnecting", "closed") and self.state is not None

    @property
    def ended(self) -> bool:
        run = (self.state or {}).get("run") or {}
        return bool(run.get("ended_at")) or self.connection == "ended"

    # views ----------------------------------------------------------------------------------
    def names(self) -> list[str]:
        return list((self.state or {}).get("components", {}))

    def view(self, now: float) -> dict[str, Any] | None:
        """The state with ages derived as :func:`rlsup.supervisor.records.state.view` does, but copying
        only the dicts it changes (that view deep-copies the whole state, histories included,
        and this runs on every repaint). Views must not be mutated."""
        if self.state is None:
            return None
        st = self.state
        comps = {}
        for name, c in st.get("components", {}).items():
            live = c.get("state") in ("starting", "running", "stopping") and c.get("started_at")
            comps[name] = {**c, "uptime_s": round(now - c["started_at"], 3) if live else None}
            if c.get("rate") is not None:  # no step for a while: the rate decays, then goes (no stale "3.27/s")
                comps[name]["rate"], comps[name]["eta_s"] = current_rate(
                    c.get("rate"), c.get("eta_s"), c.get("last_step_at"), c.get("step"), c.get("total"), now)
        run = dict(st.get("run") or {})
        if run.get("started_at"):
            run["uptime_s"] = round((run.get("ended_at") or now) - run["started_at"], 3)
        return {**st, "run": run, "components": comps}

    def flags(self, now: float | None = None) -> list[tuple[str, dict[str, Any]]]:
        """Every active flag as (component, flag), oldest first; with ``now``, a stall says how long
        it has lasted (the flag's own message says how long it was when it was raised)."""
        out = []
        for name, c in (self.state or {}).get("components", {}).items():
            for f in c.get("flags") or []:
                if now is not None and f.get("type") == "stall":
                    f = {**f, "message": stall_message(f.get("message") or "", c.get("last_step_at"),
                                                       f.get("ts"), now)}
                out.append((name, f))
        return sorted(out, key=lambda nf: nf[1].get("ts") or 0)


_STALL_FOR = re.compile(r"^no new step for [^ ]+")


def stall_message(message: str, last_step_at: float | None, raised_at: float | None, now: float) -> str:
    """``no new step for 20s (...)`` as it stands now: ``no new step for 3m12s (...)``."""
    since = last_step_at
    if since is None and raised_at is not None:
        m = re.match(r"^no new step for (\d+(?:\.\d+)?)s", message)
        since = raised_at - float(m.group(1)) if m else None
    if since is None:
        return message
    text = f"no new step for {fmt_dur(max(0.0, now - since))}"
    return _STALL_FOR.sub(text, message, count=1) if _STALL_FOR.match(message) else f"{text}: {message}"
