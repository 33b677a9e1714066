from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from types import SimpleNamespace

import psutil
import pynvml
import pytest

from rlsup.supervisor.gpu import nvml as gpu
from rlsup.supervisor.gpu.nvml import (
    FAKE_HOST,
    GpuInfo,
    GpuProcess,
    GpuSample,
    NoneSampler,
    NvmlSampler,
    SamplerThread,
    make_sampler,
)
from tests.conftest import PATIENCE
from tests.supervisor.gpu.fakes import FakeSampler

# ------------------------------------------------------------------------------------- attribution
# Pure functions of a sample and the run's process trees: which component uses which GPU, which holders
# are foreign. Nothing in rlsup calls them any more (the run names each GPU process's component from its
# live trees, and judges holders with classify_holders); they live here with their tests.


def attribute(
    sample: GpuSample,
    trees: Mapping[str, Collection[int]],
    assigned: Mapping[str, Sequence[int]],
) -> dict[int, list[str]]:
    """GPU index -> names of the components using it.

    A component uses a GPU when one of its processes (``trees[name]``: every pid of its process tree)
    holds memory there, or when its config assigns the GPU (``assigned[name]``: its ``gpus``). The
    second matters in containers, where NVML reports host pids that never match the tree. Keys are
    every GPU of the sample plus every assigned index; names keep the order components appear in
    ``assigned`` then ``trees`` (config order) and are not repeated.
    """
    order = list(dict.fromkeys([*assigned, *trees]))
    users: dict[int, set[str]] = {g.index: set() for g in sample.gpus}
    for name, indices in assigned.items():
        for i in indices:
            users.setdefault(int(i), set()).add(name)
    pid_owner = _pid_owner(trees)
    for g in sample.gpus:
        for p in g.processes:
            owner = pid_owner.get(p.pid)
            if owner is not None:
                users[g.index].add(owner)
    return {i: [n for n in order if n in names] for i, names in sorted(users.items())}


def _pid_owner(trees: Mapping[str, Collection[int]]) -> dict[int, str]:
    owner: dict[int, str] = {}
    for name, pids in trees.items():
        for pid in pids:
            owner.setdefault(int(pid), name)
    return owner


def held_by(sample: GpuSample, pids: Collection[int]) -> dict[int, list[GpuProcess]]:
    """GPU index -> those of ``pids`` that still hold a context there (GPUs with none are left out).
    Restart hygiene waits until this is empty for the previous attempt's pids."""
    wanted = set(pids)
    out: dict[int, list[GpuProcess]] = {}
    for g in sample.gpus:
        hit = [p for p in g.processes if p.pid in wanted]
        if hit:
            out[g.index] = hit
    return out


def foreign_holders_by_gpu(
    sample: GpuSample, trees: Mapping[str, Collection[int]], indices: Collection[int]
) -> dict[int, list[GpuProcess]]:
    """GPU index (of ``indices``) -> processes there that belong to no tree of this run."""
    ours = set(_pid_owner(trees))
    wanted = set(indices)
    out: dict[int, list[GpuProcess]] = {}
    for g in sample.gpus:
        if g.index in wanted:
            hit = [p for p in g.processes if p.pid not in ours]
            if hit:
                out[g.index] = hit
    return out


def foreign_holders(
    sample: GpuSample, trees: Mapping[str, Collection[int]], indices: Collection[int]
) -> list[GpuProcess]:
    """Processes on GPUs ``indices`` that are in none of the run's process trees (issue 7: report them,
    never kill them). One entry per pid, ordered by pid; a pid on several of those GPUs gets the sum
    of its memory (None only when no GPU reported a figure)."""
    total: dict[int, float | None] = {}
    for procs in foreign_holders_by_gpu(sample, trees, indices).values():
        for p in procs:
            prev = total.get(p.pid)
            if p.pid not in total:
                total[p.pid] = p.used_mb
            elif p.used_mb is not None:
                total[p.pid] = p.used_mb + (prev or 0.0)
    return [GpuProcess(pid, mb) for pid, mb in sorted(total.items())]

def _nvml_works() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


HAVE_NVML = _nvml_works()


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gpu.ENV_VAR, raising=False)


# ----------------------------------------------------------------------------------------- import


def test_import_does_not_pull_pynvml_or_ui() -> None:
    code = (
        "import sys, rlsup.supervisor.gpu.nvml, rlsup.supervisor.render.bars\n"
        "bad = [m for m in ('pynvml', 'textual', 'rich') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_probe_without_a_driver_does_not_import_pynvml() -> None:
    """Where NVML's library does not load, the probe says so as nvmlInit would, without importing pynvml
    (about 15 ms of each supervisor start); where it loads, pynvml is what probes."""
    code = (
        "import ctypes, sys\n"
        "from rlsup.supervisor.gpu.nvml import NvmlSampler\n"
        "try:\n    ctypes.CDLL('libnvidia-ml.so.1'); driver = True\nexcept OSError:\n    driver = False\n"
        "print(driver, NvmlSampler().probe(), 'pynvml' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    if out.startswith("True"):
        assert out.endswith("True")
    else:
        assert out == "False no NVIDIA driver found (libnvidia-ml.so.1 not loadable) False"


# ------------------------------------------------------------------------------------------- fake


def test_fake_sampler_is_deterministic() -> None:
    a = FakeSampler.from_spec("8xH100", clock=lambda: 1000.0).sample()
    b = FakeSampler.from_spec("8xH100", clock=lambda: 1000.0).sample()
    assert a == b
    assert a.to_dict() == b.to_dict()
    assert a.backend == "fake" and a.reason is None
    assert [g.index for g in a.gpus] == list(range(8))
    assert {g.name for g in a.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert all(g.mem_total_mb == 81559.0 for g in a.gpus)
    assert a.host == FAKE_HOST


def test_fake_sampler_configurable() -> None:
    f = FakeSampler(3, "A40", util_pct=[10.0, 95.0, None], mem_used_mb=[100.0, None, 5000.0])
    s = f.sample()
    assert [g.util_pct for g in s.gpus] == [10.0, 95.0, None]
    assert [g.mem_used_mb for g in s.gpus] == [100.0, 0.0, 5000.0]
    assert s.gpus[2].temp_c is None and s.gpus[2].power_w is None
    assert s.gpus[1].temp_c == pytest.approx(77.5)
    assert s.gpus[1].power_w == pytest.approx(300.0 * (0.1 + 0.9 * 0.95), abs=0.1)

    f.set_processes(1, [GpuProcess(222, 2048.0), GpuProcess(111, None)])
    f.set_util(0, 50.0)
    f.set_mem_used(0, None)
    s2 = f.sample()
    assert [p.pid for p in s2.gpus[1].processes] == [111, 222]  # sorted by pid
    assert s2.gpus[1].mem_used_mb == FakeSampler.BASE_MEM_MB + 2048.0  # derived from processes
    assert s2.gpus[0].util_pct == 50.0 and s2.gpus[0].mem_used_mb == 0.0


@pytest.mark.parametrize(
    ("spec", "count", "name"),
    [
        ("8xH100", 8, "NVIDIA H100 80GB HBM3"),
        ("2", 2, "NVIDIA H100 80GB HBM3"),
        ("A40", 1, "NVIDIA A40"),
        ("4 x a100", 4, "NVIDIA A100-SXM4-80GB"),
        ("1xB200", 1, "NVIDIA B200"),
    ],
)
def test_fake_from_spec(spec: str, count: int, name: str) -> None:
    s = FakeSampler.from_spec(spec).sample()
    assert len(s.gpus) == count
    assert s.gpus[0].name == name


@pytest.mark.parametrize("spec", ["", "x", "8x", "8xH100!", "-1", "lots", "8x2", "4090", "8 x"])
def test_fake_bad_spec(spec: str) -> None:
    with pytest.raises(ValueError):
        FakeSampler.from_spec(spec)


def test_fake_zero_gpus_has_reason() -> None:
    s = FakeSampler.from_spec("0").sample()
    assert s.gpus == () and s.reason


def test_to_dict_is_json_and_round_trips() -> None:
    f = FakeSampler.from_spec("2xH100", clock=lambda: 5.0, util_pct=[30.0, None])
    f.set_processes(0, [GpuProcess(42, 1234.5)])
    s = f.sample()
    d = json.loads(json.dumps(s.to_dict()))
    assert d["backend"] == "fake" and d["ts"] == 5.0
    assert d["gpus"][0]["processes"] == [{"pid": 42, "used_mb": 1234.5}]
    assert d["gpus"][1]["util_pct"] is None
    assert set(d["host"]) == {"cpu_pct", "cpu_count", "mem_used_mb", "mem_total_mb", "load1"}
    assert GpuSample.from_dict(d) == s


# ------------------------------------------------------------------------------------------- none


def test_none_sampler_has_reason_and_real_host() -> None:
    s = NoneSampler("because", clock=lambda: 7.0).sample()
    assert (s.backend, s.gpus, s.reason, s.ts) == ("none", (), "because", 7.0)
    assert s.host.cpu_count == psutil.cpu_count()
    assert s.host.mem_total_mb == pytest.approx(psutil.virtual_memory().total / 2**20)
    assert 0.0 < s.host.mem_used_mb < s.host.mem_total_mb
    assert 0.0 <= s.host.cpu_pct <= 100.0


def test_host_cpu_pct_measures_busy_time() -> None:
    host = gpu.HostStats()
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:  # deliberately burn CPU: the measurement must see it
        pass
    assert host.cpu_pct() > 100.0 / (psutil.cpu_count() or 1) / 4


@pytest.mark.skipif(HAVE_NVML, reason="this machine has a working NVIDIA driver")
def test_make_sampler_auto_without_driver_gives_none_with_reason() -> None:
    sampler = make_sampler()
    s = sampler.sample()
    assert s.backend == "none"
    assert isinstance(sampler, NoneSampler)
    assert s.gpus == ()
    assert s.reason and ("driver" in s.reason or "library" in s.reason)
    assert s.host.mem_total_mb > 0
    sampler.close()


@pytest.mark.skipif(not HAVE_NVML, reason="needs an NVIDIA driver")
def test_make_sampler_auto_with_driver_gives_nvml() -> None:
    sampler = make_sampler("auto")
    try:
        s = sampler.sample()
        assert s.backend == "nvml"
        assert len(s.gpus) == pynvml.nvmlDeviceGetCount() >= 1  # the sampler's init is still live
        for g in s.gpus:
            assert g.name != "N/A" and g.mem_total_mb and g.mem_total_mb > 0
        json.dumps(s.to_dict())
    finally:
        sampler.close()


def test_make_sampler_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    s = make_sampler("fake:8xH100").sample()
    assert s.backend == "fake" and len(s.gpus) == 8
    assert len(make_sampler("fake:2").sample().gpus) == 2
    assert len(make_sampler("fake").sample().gpus) == 1
    none = make_sampler("none").sample()
    assert none.backend == "none" and none.reason
    assert isinstance(make_sampler("nvml"), NvmlSampler)
    with pytest.raises(ValueError):
        make_sampler("cuda")
    with pytest.raises(ValueError):
        make_sampler("fake:lots")

    monkeypatch.setenv(gpu.ENV_VAR, "fake:4xA40")
    forced = make_sampler().sample()
    assert forced.backend == "fake" and len(forced.gpus) == 4
    assert make_sampler("auto").sample().backend == "fake"
    assert make_sampler("none").sample().backend == "none"  # an explicit spec wins over the env
    monkeypatch.setenv(gpu.ENV_VAR, "bogus")
    with pytest.raises(ValueError, match=gpu.ENV_VAR):
        make_sampler()


# ------------------------------------------------------------------------------------------- nvml


class _Proc(SimpleNamespace):
    pid: int
    usedGpuMemory: int | None


def _raise(exc: BaseException):  # type: ignore[no-untyped-def]
    def f(*_a: object, **_k: object) -> None:
        raise exc

    return f


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Patch pynvml's C-calling functions with plain Python so NvmlSampler runs its real code."""
    calls = {"init": 0, "shutdown": 0}

    def init() -> None:
        calls["init"] += 1

    def shutdown() -> None:
        calls["shutdown"] += 1

    mib = 2**20
    patches = {
        "nvmlInit": init,
        "nvmlShutdown": shutdown,
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlDeviceGetHandleByIndex": lambda i: ("h", i),
        "nvmlDeviceGetName": lambda h: b"NVIDIA A40" if h[1] == 0 else "NVIDIA A40",
        "nvmlDeviceGetUUID": lambda h: f"GPU-{h[1]}",
        "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=37, memory=5),
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(used=1024 * mib, total=46068 * mib, free=0),
        "nvmlDeviceGetTemperature": lambda h, sensor: 51,
        "nvmlDeviceGetPowerUsage": lambda h: 123456,
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 300000,
        "nvmlDeviceGetComputeRunningProcesses": lambda h: [_Proc(pid=10, usedGpuMemory=512 * mib)],
        "nvmlDeviceGetGraphicsRunningProcesses": lambda h: [],
        # A40s have no MIG: NVML answers NVML_ERROR_NOT_SUPPORTED (nvmlDeviceGetMigMode).
        "nvmlDeviceGetMigMode": _raise(pynvml.NVMLError_NotSupported()),
    }
    for name, fn in patches.items():
        monkeypatch.setattr(pynvml, name, fn)
    return calls


def test_nvml_happy_path_values(fake_nvml: dict[str, int]) -> None:
    sampler = NvmlSampler(clock=lambda: 3.0)
    assert fake_nvml["init"] == 0  # lazy: nothing happens before the first sample
    s = sampler.sample()
    assert fake_nvml["init"] == 1
    assert (s.backend, s.reason, s.ts) == ("nvml", None, 3.0)
    g = s.gpus[0]
    assert (g.index, g.name, g.uuid) == (0, "NVIDIA A40", "GPU-0")  # bytes name decoded
    assert (g.util_pct, g.mem_used_mb, g.mem_total_mb, g.temp_c) == (37.0, 1024.0, 46068.0, 51.0)
    assert g.power_w == pytest.approx(123.456) and g.power_limit_w == 300.0
    assert g.processes == (GpuProcess(10, 512.0),)
    sampler.sample()
    assert fake_nvml["init"] == 1  # initialised once
    sampler.close()
    assert fake_nvml["shutdown"] == 1


@pytest.mark.parametrize(
    ("exc", "needle"),
    [
        (pynvml.NVMLError_LibraryNotFound(), "no NVIDIA driver found"),
        (pynvml.NVMLError_DriverNotLoaded(), "driver not loaded"),
        (pynvml.NVMLError_NoPermission(), "permission"),
        (pynvml.NVMLError_LibRmVersionMismatch(), "version mismatch"),
        (pynvml.NVMLError_Unknown(), "NVML unavailable: Unknown"),
        (OSError("weird ctypes failure"), "weird ctypes failure"),
    ],
)
def test_nvml_init_failure_becomes_reason(
    fake_nvml: dict[str, int], monkeypatch: pytest.MonkeyPatch, exc: BaseException, needle: str
) -> None:
    monkeypatch.setattr(pynvml, "nvmlInit", _raise(exc))
    sampler = NvmlSampler()
    s = sampler.sample()
    assert s.backend == "none" and s.gpus == ()
    assert s.reason is not None and needle in s.reason
    assert s.host.mem_total_mb > 0
    assert sampler.probe() == s.reason
    sampler.close()
    assert fake_nvml["shutdown"] == 0  # never initialised, so never shut down


def test_nvml_missing_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    s = NvmlSampler().sample()
    assert s.backend == "none" and s.reason == "nvidia-ml-py (pynvml) is not installed"


def test_nvml_init_retry_is_rate_limited(fake_nvml: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    tries = {"n": 0}

    def failing_init() -> None:
        tries["n"] += 1
        raise pynvml.NVMLError_DriverNotLoaded()

    monkeypatch.setattr(pynvml, "nvmlInit", failing_init)
    sampler = NvmlSampler(retry_init_s=3600)
    for _ in range(5):
        sampler.sample()
    assert tries["n"] == 1
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    assert sampler.sample().backend == "none"  # still inside the retry window
    assert sampler.probe() is None  # an explicit probe retries at once
    assert sampler.sample().backend == "nvml"


def mem_pct(g: GpuInfo) -> float | None:
    """What the GPU panel shows as a GPU's memory use (tui/widgets/gpu_panel.py computes it from the dict form)."""
    return None if g.mem_used_mb is None or not g.mem_total_mb else 100.0 * g.mem_used_mb / g.mem_total_mb


@pytest.mark.parametrize(
    "exc",
    [
        pynvml.NVMLError_NotSupported(),
        pynvml.NVMLError_NoPermission(),
        pynvml.NVMLError_GpuIsLost(),
        pynvml.NVMLError_Unknown(),
        RuntimeError("bug in bindings"),
    ],
)
def test_nvml_failed_queries_become_none(
    fake_nvml: dict[str, int], monkeypatch: pytest.MonkeyPatch, exc: BaseException
) -> None:
    for name in (
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetPowerManagementLimit",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetGraphicsRunningProcesses",
        "nvmlDeviceGetName",
    ):
        monkeypatch.setattr(pynvml, name, _raise(exc))
    s = NvmlSampler().sample()
    assert s.backend == "nvml" and len(s.gpus) == 2
    g = s.gpus[1]
    assert g.index == 1 and g.name == "N/A"
    assert (g.uuid, g.util_pct, g.mem_used_mb, g.mem_total_mb, g.temp_c, g.power_w, g.power_limit_w) == (
        None,
    ) * 7
    assert g.processes == ()
    assert mem_pct(g) is None


def test_nvml_power_limit_falls_back(fake_nvml: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pynvml, "nvmlDeviceGetEnforcedPowerLimit", _raise(pynvml.NVMLError_NotSupported()))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetPowerManagementLimit", lambda h: 250000)
    assert NvmlSampler().sample().gpus[0].power_limit_w == 250.0


def test_nvml_handle_and_count_failures(fake_nvml: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    def handle(i: int) -> tuple[str, int]:
        if i == 1:
            raise pynvml.NVMLError_GpuIsLost()
        return ("h", i)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", handle)
    sampler = NvmlSampler()
    s = sampler.sample()
    assert s.gpus[0].name == "NVIDIA A40"
    assert s.gpus[1].name == "N/A" and s.gpus[1].mem_total_mb is None

    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", _raise(pynvml.NVMLError_Unknown()))
    s = sampler.sample()
    assert s.backend == "nvml" and s.gpus == () and s.reason == "NVML could not count GPUs"

    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 0)
    s = sampler.sample()
    assert s.gpus == () and s.reason == "NVML reports no GPUs"


def test_nvml_uninitialized_reinitialises(fake_nvml: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    sampler = NvmlSampler()
    sampler.sample()
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", _raise(pynvml.NVMLError_Uninitialized()))
    sampler.sample()
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 1)
    s = sampler.sample()
    assert fake_nvml["init"] == 2 and len(s.gpus) == 1


def test_nvml_processes_deduplicated_and_merged(
    fake_nvml: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    mib = 2**20
    monkeypatch.setattr(
        pynvml,
        "nvmlDeviceGetComputeRunningProcesses",
        lambda h: [
            _Proc(pid=30, usedGpuMemory=100 * mib),
            _Proc(pid=20, usedGpuMemory=None),
            _Proc(pid=40, usedGpuMemory=None),
        ],
    )
    monkeypatch.setattr(
        pynvml,
        "nvmlDeviceGetGraphicsRunningProcesses",
        lambda h: [
            _Proc(pid=30, usedGpuMemory=300 * mib),
            _Proc(pid=20, usedGpuMemory=64 * mib),
            _Proc(pid=50, usedGpuMemory=1 * mib),
        ],
    )
    g = NvmlSampler().sample().gpus[0]
    assert g.processes == (
        GpuProcess(20, 64.0),
        GpuProcess(30, 300.0),
        GpuProcess(40, None),
        GpuProcess(50, 1.0),
    )


def test_nvml_processes_fall_back_to_v2(fake_nvml: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        pynvml, "nvmlDeviceGetComputeRunningProcesses", _raise(pynvml.NVMLError_FunctionNotFound())
    )
    monkeypatch.setattr(
        pynvml, "nvmlDeviceGetComputeRunningProcesses_v2", lambda h: [_Proc(pid=7, usedGpuMemory=2 * 2**20)]
    )
    g = NvmlSampler().sample().gpus[0]
    assert g.processes == (GpuProcess(7, 2.0),)


def test_nvml_close_swallows_shutdown_errors(
    fake_nvml: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    sampler = NvmlSampler()
    sampler.sample()
    monkeypatch.setattr(pynvml, "nvmlShutdown", _raise(pynvml.NVMLError_Unknown()))
    sampler.close()
    sampler.close()


@pytest.mark.skipif(HAVE_NVML, reason="this machine has a working NVIDIA driver")
def test_nvml_for_real_without_driver() -> None:
    sampler = NvmlSampler()
    s = sampler.sample()
    assert s.backend == "none"
    assert s.reason == "no NVIDIA driver found (libnvidia-ml.so.1 not loadable)"
    sampler.close()


# ------------------------------------------------------------------------------------ attribution


@pytest.fixture
def procs():  # type: ignore[no-untyped-def]
    """Real process trees: `sh` with a `sleep` child (a component), and a lone `sleep` (a stranger)."""
    started: list[subprocess.Popen[bytes]] = []

    def spawn(*argv: str) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(list(argv))
        started.append(p)
        return p

    yield spawn
    for p in started:
        for c in psutil.Process(p.pid).children(recursive=True) if p.poll() is None else []:
            c.kill()
        p.kill()
        p.wait()


def _tree(pid: int, want_children: int) -> set[int]:
    root = psutil.Process(pid)
    deadline = time.monotonic() + 5
    while True:
        kids = root.children(recursive=True)
        if len(kids) >= want_children or time.monotonic() > deadline:
            return {pid, *(k.pid for k in kids)}
        time.sleep(0.01)


def test_attribute_and_foreign_holders_with_real_pids(procs) -> None:  # type: ignore[no-untyped-def]
    trainer = procs("sh", "-c", "sleep 30; :")  # `; :` keeps sh alive as the parent of sleep
    inference = procs("sleep", "30")
    stranger = procs("sleep", "30")
    trainer_tree = _tree(trainer.pid, 1)
    assert len(trainer_tree) == 2
    trainer_child = max(trainer_tree - {trainer.pid})
    trees = {"inference": {inference.pid}, "trainer": trainer_tree, "orchestrator": set()}
    assigned = {"inference": [0], "orchestrator": [], "trainer": [2]}

    f = FakeSampler.from_spec("4xH100")
    f.set_processes(1, [GpuProcess(trainer_child, 20_000.0), GpuProcess(stranger.pid, 3_000.0)])
    f.set_processes(2, [GpuProcess(stranger.pid, None)])
    f.set_processes(3, [GpuProcess(inference.pid, 1.0), GpuProcess(stranger.pid, 500.0)])
    s = f.sample()

    assert attribute(s, trees, assigned) == {
        0: ["inference"],  # configured only
        1: ["trainer"],  # found by the child pid of its tree
        2: ["trainer"],  # configured; the stranger there is not a component
        3: ["inference"],  # by pid, though configured elsewhere
    }
    assert foreign_holders(s, trees, [1, 2]) == [GpuProcess(stranger.pid, 3_000.0)]
    assert foreign_holders(s, trees, [1, 2, 3]) == [GpuProcess(stranger.pid, 3_500.0)]
    assert foreign_holders(s, trees, [2]) == [GpuProcess(stranger.pid, None)]
    assert foreign_holders(s, trees, [0]) == []
    assert foreign_holders_by_gpu(s, trees, [1, 3]) == {
        1: [GpuProcess(stranger.pid, 3_000.0)],
        3: [GpuProcess(stranger.pid, 500.0)],
    }
    assert held_by(s, trainer_tree) == {1: [GpuProcess(trainer_child, 20_000.0)]}
    # The stranger is real and alive: foreign_holders reports it, and nothing here touched it.
    assert stranger.poll() is None


def test_attribute_edge_cases() -> None:
    s = NoneSampler("no gpu").sample()
    # No GPUs sampled: configuration still says who owns what.
    assert attribute(s, {"a": {os.getpid()}}, {"a": [0, 1], "b": [1]}) == {0: ["a"], 1: ["a", "b"]}
    f = FakeSampler(2)
    assert attribute(f.sample(), {}, {}) == {0: [], 1: []}
    f.set_processes(0, [GpuProcess(5, 1.0), GpuProcess(6, 1.0)])
    # Order follows the components' order in the config, not discovery order.
    assert attribute(f.sample(), {"z": {6}, "a": {5}}, {"z": [], "a": []})[0] == ["z", "a"]


# ----------------------------------------------------------------------------------------- thread


class _Flaky:
    """A sampler whose every other sample raises, recording close()."""

    def __init__(self) -> None:
        self.inner = FakeSampler(1)
        self.n = 0
        self.closed_on: str | None = None

    def sample(self) -> GpuSample:
        self.n += 1
        if self.n % 2 == 0:
            raise RuntimeError("flaky")
        return self.inner.sample()

    def close(self) -> None:
        self.closed_on = threading.current_thread().name


def test_sampler_thread_delivers_survives_errors_and_stops_promptly() -> None:
    got: list[GpuSample] = []
    enough = threading.Event()

    def cb(s: GpuSample) -> None:
        got.append(s)
        if len(got) == 2:
            raise ValueError("callback bug")  # must not kill the thread either
        if len(got) >= 4:
            enough.set()

    sampler = _Flaky()
    t = SamplerThread(sampler, cb, interval=0.01).start()
    assert enough.wait(PATIENCE), "sampler thread stopped delivering"
    assert t._thread.is_alive()
    assert t.errors >= 4  # 3 flaky samples before the 4th good one, plus the callback bug
    assert t.stop()
    assert not t._thread.is_alive()
    assert sampler.closed_on == "rlsup-gpu-sampler"
    assert all(s.backend == "fake" for s in got)


def test_sampler_thread_first_sample_immediate_and_stop_interrupts_wait() -> None:
    first = threading.Event()
    t = SamplerThread(FakeSampler(1), lambda s: first.set(), interval=60.0, close_sampler=False).start()
    assert first.wait(30)
    assert t.stop(timeout=30)  # joined before half its 60 s wait was out: stop woke it


def test_a_shorter_interval_samples_now_not_after_the_long_wait() -> None:
    """A client begins to watch while the sampler waits out its unwatched interval: the bars come at
    once, not up to that interval later; a longer interval does not wake it."""
    got: list[float] = []
    second = threading.Event()

    def cb(s: GpuSample) -> None:
        got.append(time.monotonic())
        if len(got) == 2:
            second.set()

    t = SamplerThread(FakeSampler(1), cb, interval=60.0, close_sampler=False).start()
    try:
        wait_until = time.monotonic() + 5
        while not got and time.monotonic() < wait_until:
            time.sleep(0.01)
        t.interval = 120.0
        assert not second.wait(0.3)  # longer: nothing sooner
        t.interval = 1.0
        assert second.wait(PATIENCE), "no sample after the interval shrank from 120 s to 1 s"
    finally:
        assert t.stop(timeout=5)
    with pytest.raises(ValueError):
        t.interval = 0


def test_sampler_thread_stop_before_start_and_bad_interval() -> None:
    assert SamplerThread(FakeSampler(1), lambda s: None).stop()
    with pytest.raises(ValueError):
        SamplerThread(FakeSampler(1), lambda s: None, interval=0)


# ------------------------------------------------------------------------ issue 17: NVML and hygiene


def test_nvml_library_mismatch_error_falls_back_to_v2(fake_nvml: dict[str, int],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """nvidia-ml-py 12.575+ (pynvml.py: nvmlDeviceGetComputeRunningProcesses is wrapped by
    @throwOnVersionMismatch) raises NVMLLibraryMismatchError -- a plain Exception, not an NVMLError --
    where older releases raised NVMLError_FunctionNotFound, on drivers without the _v3 symbol."""
    assert hasattr(pynvml, "NVMLLibraryMismatchError")
    mismatch = pynvml.NVMLLibraryMismatchError("Unversioned function called and the pyNVML version does "
                                               "not match the NVML lib version.")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", _raise(mismatch))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetGraphicsRunningProcesses", _raise(mismatch))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses_v2",
                        lambda h: [_Proc(pid=7, usedGpuMemory=2 * 2**20)])
    monkeypatch.setattr(pynvml, "nvmlDeviceGetGraphicsRunningProcesses_v2", lambda h: [])
    assert NvmlSampler().sample().gpus[0].processes == (GpuProcess(7, 2.0),)
    assert "too old" in gpu.nvml_failure_reason(mismatch)


def test_nvml_lists_mig_instances(fake_nvml: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A100 in MIG mode: the NVML calls nvitop uses (nvmlDeviceGetMigMode, nvmlDeviceGetMaxMigDeviceCount,
    nvmlDeviceGetMigDeviceHandleByIndex; NOT_FOUND for an empty slot), per-instance memory and processes."""
    mib = 2**20

    def mig_mode(h):  # type: ignore[no-untyped-def]
        if h[1] == 0:
            return [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE]
        raise pynvml.NVMLError_NotSupported()

    def mig_handle(h, i):  # type: ignore[no-untyped-def]
        if i == 1:
            raise pynvml.NVMLError_NotFound()
        return ("mig", h[1], i)

    def compute(h):  # type: ignore[no-untyped-def]
        if h[0] == "mig":
            return [_Proc(pid=100 + h[2], usedGpuMemory=(1000 + h[2]) * mib)]
        return [] if h[1] == 0 else [_Proc(pid=10, usedGpuMemory=512 * mib)]

    monkeypatch.setattr(pynvml, "nvmlDeviceGetMigMode", mig_mode)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMaxMigDeviceCount", lambda h: 3)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMigDeviceHandleByIndex", mig_handle)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetGpuInstanceId", lambda h: 7 + h[2])
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeInstanceId", lambda h: 0)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", compute)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUUID",
                        lambda h: f"MIG-{h[1]}-{h[2]}" if h[0] == "mig" else f"GPU-{h[1]}")
    s = NvmlSampler().sample()
    g0, g1 = s.gpus
    assert [(m.index, m.uuid, m.gpu_instance_id) for m in g0.mig] == [(0, "MIG-0-0", 7), (2, "MIG-0-2", 9)]
    assert [m.processes for m in g0.mig] == [(GpuProcess(100, 1000.0),), (GpuProcess(102, 1002.0),)]
    assert g0.processes == (GpuProcess(100, 1000.0), GpuProcess(102, 1002.0))  # counted on the GPU too
    assert g1.mig == () and g1.processes == (GpuProcess(10, 512.0),)
    back = GpuSample.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s


def test_classify_holders_pid_namespace_waits_on_memory_never_kills(procs) -> None:  # type: ignore[no-untyped-def]
    """NVML inside a container reports host PIDs: a pid that does not exist here, and a pid that happens
    to be a (different) visible process here. Neither may be taken for the run's."""
    run_dir = "/runs/ns-case"
    # A live component of the run sharing GPU 0, and its previous attempt's pid now belonging to a
    # visible process without any NVIDIA device (what a host PID looks like from inside the container).
    live = procs("sleep", "30")
    stranger = procs("sleep", "30")
    host_only_pid = psutil.pids()[-1] + 1_000_000  # beyond any pid in use here
    f = FakeSampler(1)
    f.set_processes(0, [GpuProcess(live.pid, 900.0), GpuProcess(stranger.pid, 30_000.0),
                        GpuProcess(host_only_pid, 20_000.0)])

    def lookup(pid: int) -> gpu.ProcIdentity | None:
        # The real /proc identity; only the live component is made to hold a GPU (none on CI). The
        # stranger's and the missing pid's identities are exactly what this machine shows.
        ident = gpu.proc_identity(pid)
        if ident is not None and pid == live.pid:
            ident = gpu.ProcIdentity(pid, ident.name, ident.create_time, ident.run_dir, ident.env_readable, True)
        return ident

    assert gpu.proc_identity(host_only_pid) is None
    assert gpu.proc_identity(stranger.pid).holds_gpu is False  # type: ignore[union-attr]
    h = gpu.classify_holders(f.sample(), gpu_indices=[0], run_pids={live.pid: "inference"},
                             prev_pids={stranger.pid: None, host_only_pid: None}, proc_lookup=lookup,
                             run_dir=run_dir)
    assert h.ours == ()
    assert [x.pid for x in h.live] == [live.pid]
    assert sorted(x.pid for x in h.unmappable) == sorted([stranger.pid, host_only_pid])
    assert h.memory_only and "by GPU memory alone, never signalled" in h.note and "host PIDs" in h.note
    by_pid = {x.pid: x.why for x in h.unmappable}
    assert "no NVIDIA device" in by_pid[stranger.pid] and "namespace" in by_pid[host_only_pid]
    assert stranger.poll() is None and live.poll() is None  # nothing was touched


def test_classify_holders_only_proven_processes_are_ours(procs) -> None:  # type: ignore[no-untyped-def]
    run_dir = "/runs/proof"
    env = {**os.environ, "RLSUP_RUN_DIR": run_dir, "RLSUP_COMPONENT": "trainer"}
    leftover = subprocess.Popen(["sleep", "30"], env=env)  # an orphan of a previous attempt, markers set
    other_run = subprocess.Popen(["sleep", "30"], env={**os.environ, "RLSUP_RUN_DIR": "/runs/other",
                                                       "RLSUP_COMPONENT": "trainer"})
    try:
        _execd(leftover, other_run)
        real = {p: gpu.proc_identity(p) for p in (leftover.pid, other_run.pid)}
        assert real[leftover.pid] is not None and real[leftover.pid].run_dir == run_dir

        def lookup(pid: int) -> gpu.ProcIdentity | None:
            # No GPU on a CI machine: these processes would hold one (the only thing faked here).
            ident = gpu.proc_identity(pid)
            return None if ident is None else gpu.ProcIdentity(
                ident.pid, ident.name, ident.create_time, ident.run_dir, ident.env_readable, True)

        created = psutil.Process(leftover.pid).create_time()
        f = FakeSampler(2)
        f.set_processes(0, [GpuProcess(leftover.pid, 5_000.0), GpuProcess(other_run.pid, 7_000.0)])
        f.set_processes(1, [GpuProcess(leftover.pid, 1.0)])
        h = gpu.classify_holders(f.sample(), gpu_indices=[0], run_pids={}, prev_pids={leftover.pid: created},
                                 proc_lookup=lookup, run_dir=run_dir)
        assert [(x.gpu, x.pid) for x in h.ours] == [(0, leftover.pid)]
        assert [x.pid for x in h.foreign] == [other_run.pid]
        assert h.memory_only and "outside this run" in h.note
        # the same pid with another start time: pid reuse, not ours
        h2 = gpu.classify_holders(f.sample(), gpu_indices=[0], run_pids={},
                                  prev_pids={leftover.pid: created - 100.0}, proc_lookup=lookup)
        assert h2.ours == () and "reused" in h2.foreign[0].why
        # no start time and no marker to check: identity unproven -> unmappable, never ours
        h3 = gpu.classify_holders(f.sample(), gpu_indices=[0], run_pids={},
                                  prev_pids={leftover.pid: None}, proc_lookup=lookup)
        assert h3.ours == () and [x.pid for x in h3.unmappable] == [leftover.pid]
    finally:
        for p in (leftover, other_run):
            p.kill()
            p.wait()


def _execd(*procs: subprocess.Popen[bytes]) -> None:
    """Wait until each child runs its program with its own environment: before the exec,
    /proc/PID/environ is still ours, and during it the name is the new one a moment before the
    environment is there (seen once in CI: name ``sleep``, environ empty)."""
    for p in procs:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            proc = psutil.Process(p.pid)
            if proc.name() == "sleep" and proc.environ():
                break
            time.sleep(0.01)


def test_a_process_with_only_the_run_dir_variable_is_not_the_runs() -> None:
    """$RLSUP_RUN_DIR is how users pick a run for `rlsup status`; a user's eval script started from
    such a shell holds a GPU but is not the run's, so GPU hygiene must never count it as a leftover."""
    user = subprocess.Popen(["sleep", "30"], env={**os.environ, "RLSUP_RUN_DIR": "/runs/mine"})
    ours = subprocess.Popen(["sleep", "30"], env={**os.environ, "RLSUP_RUN_DIR": "/runs/mine",
                                                  "RLSUP_COMPONENT": "trainer"})
    try:
        _execd(user, ours)
        assert gpu.proc_identity(user.pid).run_dir is None
        assert gpu.proc_identity(ours.pid).run_dir == "/runs/mine"
    finally:
        for p in (user, ours):
            p.kill()
            p.wait()
