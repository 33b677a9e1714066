"""Resources of real processes: GPU hygiene on restart (with a fake NVML sampler: this run's leftovers that
still hold the GPU are waited for, then killed and flagged; processes outside the run never are), and
memory growth over steps."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys

from rlsup.supervisor.config.loader import load_config
from rlsup.supervisor.gpu.nvml import GpuProcess, proc_identity
from rlsup.supervisor.run.run import Run as Supervisor
from tests.conftest import PATIENCE, pid_alive, write_config
from tests.supervisor.gpu.fakes import FakeSampler


def _sleeper(env_extra: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                            env={**os.environ, **env_extra}, start_new_session=True)


def _as_gpu_holder(pid: int):
    """The fake NVML lists these CPU processes as GPU holders: make /proc agree that they map the device."""
    ident = proc_identity(pid)
    return None if ident is None else dataclasses.replace(ident, holds_gpu=True)


def _run(sup: Supervisor, until, timeout: float = 30.0) -> list[dict]:
    seen: list[dict] = []

    def watch(e: dict) -> None:
        seen.append(e)
        if until(e):
            sup.request_shutdown("test done")

    sup.subscribers.append(watch)

    async def main():
        asyncio.get_running_loop().call_later(timeout, sup.request_shutdown, "test timeout")
        return await sup.run()

    asyncio.run(main())
    return seen


def test_leftover_gpu_holders_of_the_run_are_killed_outsiders_kept(tmp_path):
    run_dir = tmp_path / "run"
    cfg = write_config(tmp_path, """
        name: hyg
        components:
          trainer:
            command: ["{py}", "-c", "import sys; sys.exit(1)"]
            gpus: [0]
            restart: {backoff: {initial: 0.1, max: 0.1}, max_restarts: 1}
    """)
    leftover = _sleeper({"RLSUP_RUN_DIR": str(run_dir), "RLSUP_COMPONENT": "trainer"})
    outsider = _sleeper({})
    try:
        fake = FakeSampler(1, processes={0: [GpuProcess(leftover.pid, 4000.0), GpuProcess(outsider.pid, 900.0)]})
        sup = Supervisor(load_config(str(cfg), run_dir=str(run_dir)), gpu_sampler=fake, serve=False)
        sup.gpus.release_timeout = 1.5
        sup.gpus.proc_lookup = _as_gpu_holder
        sup.prepare()
        # prepare() ends processes marked with this run dir that a dead supervisor left: start the
        # leftover's story after that, as a process of the previous attempt that NVML still lists.
        # (Marked with the run but another component's name, so the trainer attempt's own cleanup
        # does not end it: it stands for a holder that outlived that cleanup, e.g. stuck in the driver.)
        leftover2 = _sleeper({"RLSUP_RUN_DIR": str(run_dir), "RLSUP_COMPONENT": "retired"})
        fake.set_processes(0, [GpuProcess(leftover2.pid, 4000.0), GpuProcess(outsider.pid, 900.0)])
        events = _run(sup, lambda e: e["kind"] == "flag" and e["type"] == "gpu_not_released")
        flags = [e for e in events if e["kind"] == "flag" and e["type"] == "gpu_not_released"]
        assert flags, [(e["kind"], e.get("reason") or e.get("message")) for e in events if e["kind"] != "gpu"]
        f = flags[0]
        assert f"pid {leftover2.pid} holds 4000" in " ".join(f["evidence"])
        assert str(outsider.pid) not in " ".join(f["evidence"])
        assert "killed them" in f["action"]
        # what was done, not what might be: the outsider left alone, the leftover not "may be killed"
        assert f"outside this run hold the GPU (pid {outsider.pid}): left alone" in f["action"]
        assert "may be killed" not in f["action"] and "waiting" not in f["action"]
        leftover2.wait(PATIENCE)
        assert not pid_alive(leftover2.pid)
        assert pid_alive(outsider.pid)  # never touch what is not ours
        gpu = next(e for e in events if e["kind"] == "gpu")
        owners = {p["pid"]: p["component"] for p in gpu["gpus"][0]["processes"]}
        assert owners[outsider.pid] is None  # shown as outside the run
    finally:
        for p in (leftover, outsider):
            p.kill()
            p.wait()


def test_restart_waits_for_release_without_killing(tmp_path):
    run_dir = tmp_path / "run"
    cfg = write_config(tmp_path, """
        name: hyg2
        components:
          trainer:
            command: ["{py}", "-c", "import sys; sys.exit(1)"]
            gpus: [0]
            restart: {backoff: {initial: 0.1, max: 0.1}, max_restarts: 1}
    """)
    fake = FakeSampler(1)
    sup = Supervisor(load_config(str(cfg), run_dir=str(run_dir)), gpu_sampler=fake, serve=False)
    sup.gpus.release_timeout = 20
    sup.gpus.proc_lookup = _as_gpu_holder
    sup.prepare()
    holder = _sleeper({"RLSUP_RUN_DIR": str(run_dir), "RLSUP_COMPONENT": "retired"})
    fake.set_processes(0, [GpuProcess(holder.pid, 2000.0)])
    loop_calls = {"n": 0}

    def release(e: dict) -> None:
        # The driver frees the memory a moment after the first attempt ends.
        if e["kind"] == "started" and e.get("attempt") == 2:
            loop_calls["alive_at_start"] = pid_alive(holder.pid)
        if e["kind"] == "exited" and loop_calls["n"] == 0:
            loop_calls["n"] = 1
            asyncio.get_running_loop().call_later(1.5, fake.set_processes, 0, [])

    sup.subscribers.append(release)
    try:
        events = _run(sup, lambda e: e["kind"] == "started" and e.get("attempt") == 2)
        exit_ts = next(e["ts"] for e in events if e["kind"] == "exited")
        start2 = next(e for e in events if e["kind"] == "started" and e.get("attempt") == 2)
        assert start2["ts"] - exit_ts >= 1.0  # held back until the GPU was free
        assert not any(e["kind"] == "flag" and e["type"] == "gpu_not_released" for e in events)
        assert loop_calls["alive_at_start"]  # waited for, not killed (the run's end cleans it up later)
    finally:
        holder.kill()
        holder.wait()


def test_memory_growth_of_a_real_process_is_flagged(tmp_path):
    """A trainer that keeps what it allocates each step: its RSS grows steadily with the steps."""
    from rlsup.supervisor.diagnosis import MemoryGrowthDetector

    cfg = write_config(tmp_path, """
        name: leak
        components:
          trainer:
            command: ["{py}", "-u", "-c", "import time\\nkeep = []\\nfor i in range(1, 400):\\n    keep.append(bytearray(12 * 2**20))\\n    print(f'Step {i}/400 | loss 0.5', flush=True)\\n    time.sleep(0.1)"]
            progress: {preset: rlsup}
    """)
    sup = Supervisor(load_config(str(cfg), run_dir=str(tmp_path / "run")), serve=False)
    sup.resources.every_s = 0.5
    sup.resources.detector = lambda: MemoryGrowthDetector(min_samples=6, min_growth_mb=150, window_s=60)
    sup.prepare()
    events = _run(sup, lambda e: e["kind"] == "flag" and e["type"] == "memory_growth", timeout=40)
    flags = [e for e in events if e["kind"] == "flag" and e["type"] == "memory_growth"]
    assert flags, "no memory_growth flag for a process growing ~120 MB/s"
    assert "MB" in flags[0]["message"] or "GB" in flags[0]["message"] or "MiB" in flags[0]["message"]
    assert flags[0]["component"] == "trainer"


def test_a_slurm_step_has_no_cpu_or_memory_of_this_host():
    """A local attempt's gauge sums its processes; a Slurm step's processes run under slurmstepd on its
    nodes, and what this host has of it is the `srun` client: its few MB are not the component's (the
    TUI showed a trainer step as `RSS 9M`), so the gauge says nothing for it (`-` in status and TUI)."""
    from types import SimpleNamespace

    from rlsup.supervisor.records import events as ev
    from rlsup.supervisor.run.resources import ResourceSampling

    class Ring(list):
        bytes = 0

    def component(launcher):  # an attempt whose process is this test's own (a real pid, real RSS)
        att = SimpleNamespace(members=lambda: {os.getpid()}, launcher=launcher)
        return SimpleNamespace(current=att, ring=Ring(), state="running", progress=SimpleNamespace(step=None),
                               attempt=1)

    comps = {"local": component(None), "step": component(object())}
    w = ResourceSampling()
    w.sample(0.0, comps, [])
    (gauge,) = [e for e in w.sample(1.0, comps, []) if isinstance(e, ev.ResourcesSampled)]
    assert gauge.data["local"]["rss_mb"] > 1 and gauge.data["local"]["cpu_pct"] is not None
    assert gauge.data["step"]["rss_mb"] is None and gauge.data["step"]["cpu_pct"] is None
