"""The ``resources`` gauge (CPU, RSS and GPU memory per component) and the ``memory_growth`` flag.

A service the run calls on its tick: it reads each live attempt's processes (``/proc`` through
:func:`~rlsup.supervisor.monitor.process.usage`; not for a Slurm step, whose processes are not this host's) and returns the events to emit; the judgement of growth is
the pure :class:`~rlsup.supervisor.diagnosis.MemoryGrowthDetector`, one series per attempt.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..monitor.process import usage
from ..records import events as ev


class ResourceSampling:
    """The run's resource sampling: how often (``every_s``), when last (``last``, monotonic), each component's
    previous CPU reading and memory-growth series; ``detector`` makes a series' detector (tests tune it)."""

    def __init__(self) -> None:
        self.every_s = 5.0
        self.last = 0.0
        self.detector: Callable[[], Any] | None = None  # MemoryGrowthDetector unless set
        self._cpu_prev: dict[str, tuple[float, float]] = {}
        self._mem: dict[str, tuple[int | None, Any]] = {}

    @property
    def due_at(self) -> float:
        return self.last + self.every_s

    def sample(self, now: float, components: Mapping[str, Any], gpus: list[dict[str, Any]]) -> list[ev.Event]:
        """The events for one sample at monotonic ``now``: flags first, then the gauge."""
        self.last = now
        gpu_by = _gpu_mb_by_component(gpus)
        out: dict[str, Any] = {n: {"ring_lines": len(c.ring), "ring_mb": round(c.ring.bytes / 2**20, 2)}
                               for n, c in components.items()}
        events: list[ev.Event] = []
        for n, c in components.items():
            att = c.current
            if att is None:
                continue
            rss_mb: float | None = None
            pct: float | None = None
            # A Slurm step's processes run under slurmstepd on its nodes; what this host sees of the
            # attempt is the `srun` client (a few MB, no CPU): not the component's CPU and memory.
            if getattr(att, "launcher", None) is None:
                pct, rss_mb = self._cpu_and_rss(n, att, now)
            out[n].update(cpu_pct=pct, rss_mb=rss_mb, gpu_mb=gpu_by.get(n))
            if c.state == "running" and c.progress.step is not None:
                flag = self._growth(n, c).observe(now, c.progress.step, rss_mb, gpu_by.get(n))
                if flag is not None:
                    events.append(ev.FlagRaised(
                        n, type=flag.type, message=flag.message, evidence=list(flag.evidence),
                        action="none (watching); a leak ends in an OOM kill, so look at what accumulates per step"))
        if out:
            events.append(ev.ResourcesSampled(None, out))
        return events

    def _cpu_and_rss(self, name: str, att: Any, now: float) -> tuple[float | None, float]:
        """(CPU percent since the last sample, None at the first; RSS in MB) of the attempt's processes."""
        used = [u for pid in att.members() if (u := usage(pid)) is not None]
        cpu, rss = sum(u[0] for u in used), sum(u[1] for u in used)
        prev = self._cpu_prev.get(name)
        self._cpu_prev[name] = (now, cpu)
        pct = round(max(0.0, (cpu - prev[1]) / (now - prev[0]) * 100), 1) if prev and now > prev[0] else None
        return pct, round(rss / 2**20, 1)

    def _growth(self, name: str, c: Any) -> Any:
        """The memory-growth detector of the component's current attempt (a new attempt starts a new series)."""
        from ..diagnosis import MemoryGrowthDetector

        attempt, det = self._mem.get(name, (None, None))
        if det is None or attempt != c.attempt:
            det = (self.detector or MemoryGrowthDetector)()
            self._mem[name] = (c.attempt, det)
        return det


def _gpu_mb_by_component(gpus: list[dict[str, Any]]) -> dict[str, float]:
    """GPU memory in MB each component's processes hold, summed over the GPUs of the sample."""
    gpu_by: dict[str, float] = {}
    for g in gpus:
        for p in g.get("processes") or []:
            if p.get("component"):
                gpu_by[p["component"]] = gpu_by.get(p["component"], 0.0) + (p.get("used_mb") or 0.0)
    return gpu_by
