"""Before a new attempt: wait until the previous attempt's GPU memory is released (a service the run offers).

After a timeout, the holders *proven* to be this run's leftovers (same pid and start time, or this
run's marker) are killed and a ``gpu_not_released`` flag says so; processes that cannot be attributed
(NVML reporting host PIDs from inside a container, say) are waited on by memory alone and never
signalled. Decides nothing about the lifecycle: it waits, kills proven leftovers, and says what it did.
"""

from __future__ import annotations

import asyncio
import signal as signal_mod
from collections.abc import Callable
from typing import Any

from ..monitor.process import same_process, terminate_processes
from ..records import events as ev
from ..records.clock import Clock
from .nvml import classify_holders, proc_identity


async def wait_gpu_release(name: str, gpus: list[int], sampler: Any, *, prev: dict[int, float | None],
                           run_pids: Callable[[], dict[int, str]], run_dir: str, timeout: float, clock: Clock,
                           stop_wanted: Callable[[], bool], emit: Callable[[ev.Event], Any],
                           proc_lookup: Callable[[int], Any] | None = None) -> None:
    loop = asyncio.get_running_loop()
    deadline = clock.monotonic() + timeout
    while True:
        try:  # a fresh sample, not the last 1 Hz one: the previous attempt just ended
            sample = await loop.run_in_executor(None, sampler.sample)
        except Exception:  # noqa: BLE001 - the sampler's failures are reported by its thread
            return
        held = classify_holders(sample, gpu_indices=gpus, run_pids=run_pids(), prev_pids=prev, run_dir=run_dir,
                                proc_lookup=proc_lookup or proc_identity)
        if not held.waiting_on or stop_wanted():
            return
        if clock.monotonic() >= deadline:
            break
        await asyncio.sleep(0.5)
    # only if still the process classified (its pid may have been reused since)
    procs = [p for h in held.ours if (p := same_process(h.pid, h.create_time)) is not None]
    survivors = await loop.run_in_executor(None, terminate_processes, procs, signal_mod.SIGKILL, 5.0)
    evidence = [f"gpu {h.gpu}: pid {h.pid} holds {h.used_mb or '?'} MiB ({h.why})"
                for h in held.ours + held.unmappable]  # what was waited on; foreign holders are not ours to blame
    if held.ours:
        action = ("killed them (SIGKILL; only this run's proven leftovers) before starting the next attempt"
                  if not survivors else "killed what could be killed; starting anyway")
    else:
        action = "killed nothing (no holder is provably this run's); starting anyway"
    if held.memory_only:
        action += f"; {held.note}"
    emit(ev.FlagRaised(
        name, type="gpu_not_released",
        message=f"{name}'s GPUs were still held {timeout:g}s after its previous attempt ended ({len(held.ours)} "
                f"leftover(s) of this run, {len(held.unmappable)} not attributable)",
        evidence=evidence + [f"could not kill pid {p.pid}" for p in survivors], action=action))
