"""dependency_down: a consumer failing to reach a dependency that is down; restart the dependency.

Pure: :func:`dependency_down` decides, :class:`DependencyTracker` says what to do about it over time.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..records.phrases import fmt_duration
from .normalize import strip_prefixes
from .patterns import Flag

CONNECTION_RE = re.compile(
    r"ConnectionRefusedError|Connection refused|Cannot connect to host|ServerDisconnected(?:Error)?"
    r"|Failed to establish a new connection|ConnectionResetError|Connection reset by peer"
    r"|RemoteDisconnected|ClientConnectorError|ConnectError|Max retries exceeded with url"
    r"|EngineDeadError|Server disconnected|\[Errno 111\]|\[Errno 104\]")


@dataclass(frozen=True)
class DependencyFlag(Flag):
    """A ``dependency_down`` :class:`Flag` with the action to take and the dependencies at fault."""

    action: str = ""
    dependencies: tuple[str, ...] = ()


def connection_errors(lines: Iterable[str]) -> list[str]:
    """The lines (rank prefixes stripped) that say a connection failed."""
    stripped = (strip_prefixes(raw.rstrip("\n"))[1] for raw in lines)
    return [line for line in stripped if CONNECTION_RE.search(line)]


def dependency_down(
    component: str,
    *,
    categories: Iterable[str] = (),
    lines: Iterable[str] = (),
    deps: Mapping[str, str],
    probes_failing: Mapping[str, bool] | None = None,
    down_since: Mapping[str, float] | None = None,
    now: float | None = None,
) -> DependencyFlag | None:
    """A ``dependency_down`` flag when ``component`` shows connection errors while one of its
    dependencies is down, else None.

    ``categories``: diagnosis categories of its recent exits; ``lines``: its recent log lines;
    ``deps``: dependency name -> state (``running`` is up; anything else, or a failing probe in
    ``probes_failing``, is down); ``down_since``/``now`` (optional) put a duration in the message.
    Connection errors toward dependencies that are all up are not this flag's business (a wrong
    URL, a third-party service): None.
    """
    probes_failing = probes_failing or {}
    cats = [c for c in categories if c in ("connection_refused", "inference_engine_dead")]
    errs = connection_errors(lines)
    if not cats and not errs:
        return None
    down = [d for d, st in deps.items() if st != "running" or probes_failing.get(d)]
    if not down:
        return None
    parts = []
    for d in down:
        why = f"{deps[d]}" if deps[d] != "running" else "running but its probe fails"
        if down_since and now is not None and d in down_since:
            why += f", down for {fmt_duration(now - down_since[d])}"
        parts.append(f"{d} ({why})")
    what = f"{len(errs)} connection error line(s)" if errs else "exits diagnosed " + "/".join(sorted(set(cats)))
    msg = f"{component} cannot reach its dependency {', '.join(parts)}: {what}"
    # The most recent errors, deduplicated, say more than the first of hundreds of retries.
    shown = list(dict.fromkeys(reversed(errs)))[:6][::-1]
    facts = [f"dependency {d}: state {deps[d]}" + (", probe failing" if probes_failing.get(d) else "")
             for d in down]
    names = " and ".join(down)
    action = (f"restarting {names}, not {component}; {component} is stopped if {names} "
              f"cannot come back within the budget")
    return DependencyFlag("dependency_down", msg, tuple(shown + facts), False, action=action,
                          dependencies=tuple(down))


class DependencyTracker:
    """How long each dependency has been down, and what to do about it.

    Call :meth:`observe` for a dependency whenever its state or probe is checked (every tick is
    fine). It returns, once each per down episode:

    - ``"restart_dependency"`` when the dependency is down and a consumer is failing because of
      it (the caller restarts it unless it is already starting or in backoff);
    - ``"stop_consumers"`` when it has stayed down for ``budget_s`` (the caller stops the
      consumers with a flag saying why, instead of letting them retry for hours);
    - ``"recovered"`` when it is up again after an episode that produced one of the above;

    and None otherwise. The clock is injectable; nothing here sleeps.
    """

    def __init__(self, *, budget_s: float = 600.0, clock: Callable[[], float] = time.monotonic):
        self.budget_s = budget_s
        self.clock = clock
        self._down_since: dict[str, float] = {}
        self._acted: dict[str, set[str]] = {}

    def down_for(self, dep: str) -> float | None:
        """Seconds ``dep`` has been down, or None if it is up."""
        since = self._down_since.get(dep)
        return None if since is None else max(0.0, self.clock() - since)

    def down_since(self) -> dict[str, float]:
        """dependency -> clock time it went down, for :func:`dependency_down`'s message."""
        return dict(self._down_since)

    def observe(self, dep: str, *, down: bool, consumers_failing: bool = True) -> str | None:
        now = self.clock()
        if not down:
            self._down_since.pop(dep, None)
            acted = self._acted.pop(dep, set())
            return "recovered" if acted else None
        since = self._down_since.setdefault(dep, now)
        acted = self._acted.setdefault(dep, set())
        if now - since >= self.budget_s and "stop_consumers" not in acted:
            acted.add("stop_consumers")
            return "stop_consumers"
        if consumers_failing and not acted:
            acted.add("restart_dependency")
            return "restart_dependency"
        return None
