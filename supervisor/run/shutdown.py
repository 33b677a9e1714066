"""The end of a run: its components stopped in reverse dependency order, in parallel waves.

A component is stopped once every component that depends on it is quiet (Kahn's algorithm on the
reversed graph: each edge is looked at once, so a 2,000-long chain of components that already ended
takes milliseconds, not minutes). :class:`StopOrder` is that order, pure; :func:`stop_in_order`
drives it on the run's components, waiting only when nothing became quiet in a round.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ..config.model import Config
from ..rules import lifecycle as lc

if TYPE_CHECKING:
    from .component import Component


class StopOrder:
    """Which components may be stopped now: those whose dependents are all quiet."""

    def __init__(self, cfg: Config, present: Iterable[str]):
        have = set(present)
        order = cfg.topo_order()
        self.deps = {n: {d for d in cfg.components[n].depends_on if d in have} for n in order}
        self.waiting_on = dict.fromkeys(order, 0)  # dependents not yet quiet
        for n in order:
            for d in self.deps[n]:
                self.waiting_on[d] += 1
        self.first = [n for n in reversed(order) if not self.waiting_on[n]]

    def quiet(self, name: str) -> list[str]:
        """``name`` is quiet: the dependencies that may be stopped now."""
        freed = []
        for d in self.deps[name]:
            self.waiting_on[d] -= 1
            if not self.waiting_on[d]:
                freed.append(d)
        return freed


async def stop_in_order(cfg: Config, components: Mapping[str, Component], why: lc.Cause) -> None:
    """Shut every component down, dependents before their dependencies; return once all are quiet
    (final, with no stop or cleanup under way)."""
    order = StopOrder(cfg, components)
    stopping = order.first
    for n in stopping:
        components[n].handle(lc.Shutdown(why))
    while stopping:
        still: list[str] = []
        freed: list[str] = []
        for n in stopping:
            c = components[n]
            if c.state not in lc.FINAL or c.busy:
                still.append(n)
            else:
                freed += order.quiet(n)
        for n in freed:
            components[n].handle(lc.Shutdown(why))
        if not freed and still:
            await asyncio.sleep(0.02)  # nothing became quiet: look again a little later
        stopping = still + freed
