"""A pid listed before a wait (a component's stop timeout, a GPU-release wait) is signalled only while it is
still the process that was listed: the identity is its start time, taken when it was listed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil

from rlsup.supervisor.gpu import nvml as gpu
from rlsup.supervisor.gpu.nvml import GpuProcess
from rlsup.supervisor.monitor.process import kill_if_same, same_process, start_time
from tests.conftest import PATIENCE
from tests.supervisor.gpu.fakes import FakeSampler


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_a_reused_pid_is_not_killed() -> None:
    p = _sleeper()
    try:
        born = start_time(p.pid)
        assert born is not None
        # What the pid would name after being reused: the same number, another start time.
        assert same_process(p.pid, born - 5.0) is None
        assert not kill_if_same(p.pid, born - 5.0, signal.SIGKILL)
        time.sleep(0.2)  # deliberate: no signal may arrive in this window
        assert p.poll() is None, "a process that is not the one listed was killed"
        assert same_process(p.pid, None) is None  # no identity, no proof, no kill
        assert kill_if_same(p.pid, born, signal.SIGKILL)
        assert p.wait(PATIENCE) == -signal.SIGKILL
    finally:
        if p.poll() is None:
            p.kill()


def test_gpu_holders_carry_the_identity_they_were_classified_with() -> None:
    p = _sleeper()
    try:
        created = psutil.Process(p.pid).create_time()
        ident = gpu.ProcIdentity(p.pid, "python", created, "/run", True, True)
        f = FakeSampler(1)
        f.set_processes(0, [GpuProcess(p.pid, 100.0)])
        held = gpu.classify_holders(f.sample(), gpu_indices=[0], run_pids={}, prev_pids={p.pid: created}, run_dir="/run",
                                    proc_lookup=lambda pid: ident)
        assert [h.pid for h in held.ours] == [p.pid] and held.ours[0].create_time == created
        # run.Supervisor.wait_gpu_release kills only same_process(h.pid, h.create_time)
        assert same_process(p.pid, held.ours[0].create_time) is not None
        assert same_process(p.pid, created + 3.0) is None
    finally:
        p.kill()
        p.wait()
