"""GPU samples of every node of a multi-node run: one small sampler step per node.

On each node of the allocation a step ``srun --overlap --nodes=1 --nodelist=<node> python -m
rlsup.supervisor.slurm.gpus`` samples that node's GPUs with the sampler it would use on one machine
(NVML, or ``RLSUP_GPU_SAMPLER``) and writes one JSON line per sample on stdout. The supervisor reads
every node's stream in a thread per node and serves their union, each GPU tagged with its node, as one
:class:`~rlsup.supervisor.gpu.nvml.GpuSample`; the TUI's GPU panel groups them by node. ``--overlap`` so the
sampler takes no resources from the components; it asks for the node's GPUs so it may see them where
Slurm confines devices.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from ..gpu.nvml import GpuSample, HostInfo, make_sampler
from .jobs import SAMPLER_STEP, job_steps, run, tool

INTERVAL_S = 2.0


def leftovers(job_id: str) -> list[str]:
    """Cancel the sampler steps a previous supervisor of this job left running (killed with ``kill -9``, its
    steps' srun clients go on without a reader); the steps cancelled, as ``J.S``."""
    steps = [sid for sid, name in job_steps(job_id) or () if name == SAMPLER_STEP]
    if steps:
        run(["scancel", *steps])
    return steps


class NodeSamplers:
    """A GpuSampler whose samples are the union of one sampler step per node."""

    def __init__(self, job_id: str, nodes: Sequence[str], *, gpus_per_node: int = 0):
        self.nodes = list(nodes)
        self.latest: dict[str, GpuSample] = {}
        self.errors: dict[str, str] = {}
        self._lock = threading.Lock()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._closed = False
        leftovers(job_id)
        for node in self.nodes:
            argv = [tool("srun"), f"--jobid={job_id}", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={node}",
                    f"--gres=gpu:{gpus_per_node}" if gpus_per_node else "--gres=none", "--quiet",
                    f"--job-name={SAMPLER_STEP}", sys.executable, "-m", "rlsup.supervisor.slurm.gpus",
                    "--interval", str(INTERVAL_S)]
            try:
                p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
            except OSError as e:
                self.errors[node] = str(e)
                continue
            self._procs.append(p)
            threading.Thread(target=self._read, args=(node, p), daemon=True, name=f"rlsup-gpus-{node}").start()

    def _read(self, node: str, p: subprocess.Popen[bytes]) -> None:
        assert p.stdout is not None
        for raw in p.stdout:
            try:
                s = GpuSample.from_dict(json.loads(raw))
            except (ValueError, KeyError, TypeError):
                continue
            s = dataclasses.replace(s, gpus=tuple(dataclasses.replace(g, node=node) for g in s.gpus))
            with self._lock:
                self.latest[node] = s
        if not self._closed:
            with self._lock:
                self.errors[node] = f"the GPU sampler step on {node} ended ({p.wait()})"

    def sample(self) -> GpuSample:
        with self._lock:
            got = [self.latest[n] for n in self.nodes if n in self.latest]
            errors = dict(self.errors)
        gpus = tuple(g for s in got for g in s.gpus)
        host = got[0].host if got else HostInfo(0.0, os.cpu_count() or 1, 0.0, 0.0, 0.0)
        reason = None if gpus else (
            "; ".join(errors.values()) or (got[0].reason if got else "waiting for the nodes' GPU samplers"))
        return GpuSample(ts=time.time(), backend=got[0].backend if got else "none", gpus=gpus, reason=reason,
                         host=host)

    def close(self) -> None:
        self._closed = True
        for p in self._procs:
            if p.poll() is None:
                # The step's only task is a sampler, with nothing to save: srun's SIGTERM (cancel the
                # step, no grace) is just right here.
                with contextlib.suppress(OSError):
                    p.terminate()
            with contextlib.suppress(Exception):
                p.wait(5)


def for_run(cfg: Any, sampler: Any) -> Any:
    """In a multi-node Slurm job: the per-node samplers instead of this node's own; else ``sampler``."""
    from .launcher import running_job

    job = running_job(cfg)
    if job is None or len(job[1]) < 2:
        return sampler
    with contextlib.suppress(Exception):
        sampler.close()
    return NodeSamplers(*job, gpus_per_node=cfg.slurm.gpus_per_node)


def main(argv: Sequence[str]) -> int:
    """The sampler step: one JSON line per sample of this node, until srun ends it."""
    ap = argparse.ArgumentParser(prog="python -m rlsup.supervisor.slurm.gpus")
    ap.add_argument("--interval", type=float, default=INTERVAL_S)
    a = ap.parse_args(list(argv))
    sampler = make_sampler()
    try:
        while True:
            print(json.dumps(sampler.sample().to_dict()), flush=True)
            time.sleep(a.interval)
    except (BrokenPipeError, KeyboardInterrupt):
        return 0
    finally:
        sampler.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
