"""The run's GPUs sampled in a thread, each GPU process named by the component it belongs to.

The sampler (NVML, a fake for demos, or none) runs in its own thread and hands each sample to the
loop; the loop names each process's component from the run's live attempts and emits the ``gpu``
gauge. Samples come every second while a client watches, every few seconds otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..records import events as ev
from .component import Component

GPU_SAMPLE_S = 1.0


def owners(components: Mapping[str, Component]) -> dict[int, str]:
    """Every pid of the run's live attempts, with the component it belongs to."""
    return {pid: n for n, c in components.items() if c.current is not None for pid in c.current.members()}


def gpu_event(sample: Any, owned: Mapping[int, str]) -> ev.GpuSampled:
    """A sample as the ``gpu`` gauge, each process named by its component (None: not the run's)."""
    d = sample.to_dict()
    for g in d.get("gpus") or []:
        for p in g.get("processes") or []:
            p["component"] = owned.get(p["pid"])
    return ev.GpuSampled(None, {k: d.get(k) for k in ("gpus", "host", "backend", "reason")})


class GpuSampling:
    """The run's GPU sampler (NVML, a fake, or None) and its thread; how long a restart waits for the previous
    attempt's GPU memory (``release_timeout``) and how a GPU process is identified (``proc_lookup``:
    gpu.proc_identity unless a test fakes NVML)."""

    def __init__(self, sampler: Any, deliver: Callable[[Any], None]):
        self.sampler = sampler
        self.deliver = deliver  # called in the sampler's thread: hands the sample to the loop
        self.release_timeout = 30.0
        self.proc_lookup: Callable[[int], Any] | None = None
        self._thread: Any = None

    def start(self, watched: bool) -> None:
        if self.sampler is None:
            return
        from ..gpu.nvml import SamplerThread

        self._thread = SamplerThread(self.sampler, self.deliver, interval=GPU_SAMPLE_S)
        self.watched(watched)
        self._thread.start()

    def watched(self, yes: bool) -> None:
        """A client came or went: GPU bars every second while anyone looks."""
        if self._thread is not None:
            self._thread.interval = GPU_SAMPLE_S if yes else 10.0

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stop()
