"""The settable fake GPU sampler of the tests: rlsup's :class:`~rlsup.supervisor.gpu.nvml.FakeSampler` whose
GPUs' utilisation, memory and processes a test sets, at construction or later (thread-safe, so a test can
change processes while a :class:`~rlsup.supervisor.gpu.nvml.SamplerThread` runs)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rlsup.supervisor.gpu import nvml
from rlsup.supervisor.gpu.nvml import GpuInfo, GpuProcess, GpuSample


def _pick(v: float | Sequence[float | None] | None, i: int) -> float | None:
    if v is None or isinstance(v, (int, float)):
        return None if v is None else float(v)
    return v[i] if i < len(v) else None


class FakeSampler(nvml.FakeSampler):
    BASE_MEM_MB = 512.0

    def __init__(self, count: int = 1, model: str = "H100", *, util_pct: float | Sequence[float | None] = 0.0,
                 mem_used_mb: float | Sequence[float | None] | None = None,
                 processes: Mapping[int, Iterable[GpuProcess]] | None = None, **kwargs: Any) -> None:
        super().__init__(count, model, **kwargs)
        self._lock = threading.Lock()
        self.util = [_pick(util_pct, i) for i in range(count)]
        self.mem = [_pick(mem_used_mb, i) for i in range(count)]
        self.procs: list[list[GpuProcess]] = [[] for _ in range(count)]
        for idx, procs in (processes or {}).items():
            self.procs[idx] = list(procs)

    def set_util(self, index: int, pct: float | None) -> None:
        with self._lock:
            self.util[index] = pct

    def set_mem_used(self, index: int, mb: float | None) -> None:
        with self._lock:
            self.mem[index] = mb

    def set_processes(self, index: int, processes: Iterable[GpuProcess]) -> None:
        with self._lock:
            self.procs[index] = list(processes)

    def sample(self) -> GpuSample:
        with self._lock:
            return super().sample()

    def gpu(self, index: int) -> GpuInfo:
        """Memory defaults to a small driver overhead plus the processes' memory; temperature and power follow
        utilisation linearly."""
        util, mem, procs = self.util[index], self.mem[index], tuple(sorted(self.procs[index], key=lambda p: p.pid))
        if mem is None:
            mem = (self.BASE_MEM_MB + sum(p.used_mb or 0.0 for p in procs)) if procs else 0.0
        return dataclasses.replace(
            super().gpu(index), util_pct=util, mem_used_mb=min(mem, self.mem_total_mb), processes=procs,
            temp_c=None if util is None else round(30.0 + 0.5 * util, 1),
            power_w=None if util is None else round(self.power_limit_w * (0.1 + 0.9 * util / 100.0), 1))
