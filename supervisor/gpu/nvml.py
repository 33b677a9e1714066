"""GPU and host sampling: the one hardened boundary around NVML.

Promises of this module:

* Importing it never imports ``pynvml``; only :class:`NvmlSampler` does, lazily, on its first sample.
* ``sample()`` never raises for anything NVML does. A failed query becomes ``None`` (shown as N/A),
  a failed initialisation becomes a sample with ``backend="none"`` and a ``reason`` a human can act
  on ("no NVIDIA driver found (libnvidia-ml.so.1 not loadable)"). "No GPU" is a value, not an error.
* Samples are frozen dataclasses with a JSON-able :meth:`GpuSample.to_dict` (what ``rlsup status
  --json`` puts under ``"gpus"``/``"host"``) and a matching :meth:`GpuSample.from_dict` for clients.
* :class:`FakeSampler` (``fake:NxMODEL``) stands in for NVML in demos (and, made settable, in tests).
* :func:`classify_holders` decides, before anything is signalled, which GPU holders are *proven* to be
  this run's (only those may ever be killed) and which are foreign or cannot be mapped to a process
  here (NVML reports host PIDs inside a PID namespace): with any of the latter the supervisor waits on
  memory alone and says so.
* MIG: on a GPU in MIG mode every MIG device is listed in :attr:`GpuInfo.mig` with its own memory and
  processes, and its processes are counted on the parent GPU too.

GPU indices are NVML indices (PCI bus order). A component's configured ``gpus`` only match them when
its children enumerate devices the same way, i.e. with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Protocol

import psutil

from ..monitor.process import ENV_COMPONENT, ENV_RUN_DIR

log = logging.getLogger(__name__)

ENV_VAR = "RLSUP_GPU_SAMPLER"
_MIB = 1024 * 1024


# --------------------------------------------------------------------------------------------- values


@dataclass(frozen=True)
class GpuProcess:
    """A process holding a GPU context; ``used_mb`` is None where NVML cannot tell (e.g. WDDM, MIG)."""

    pid: int
    used_mb: float | None


@dataclass(frozen=True)
class MigInstance:
    """One MIG device of a GPU in MIG mode (NVML: nvmlDeviceGetMigDeviceHandleByIndex)."""

    index: int
    uuid: str | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    mem_used_mb: float | None
    mem_total_mb: float | None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class GpuInfo:
    """One GPU at one instant. Every measurement is None when NVML could not provide it."""

    index: int
    name: str
    uuid: str | None
    util_pct: float | None
    mem_used_mb: float | None
    mem_total_mb: float | None
    temp_c: float | None
    power_w: float | None
    power_limit_w: float | None
    processes: tuple[GpuProcess, ...] = ()
    mig: tuple[MigInstance, ...] = ()
    node: str | None = None  # the Slurm node it is on (a multi-node run's per-node samplers); None: this host


@dataclass(frozen=True)
class HostInfo:
    """Host CPU and RAM; ``mem_used_mb`` is total minus available (what htop/nvitop call used)."""

    cpu_pct: float
    cpu_count: int
    mem_used_mb: float
    mem_total_mb: float
    load1: float


@dataclass(frozen=True)
class GpuSample:
    """One sampling tick: every GPU (possibly none, then ``reason`` says why) plus host stats."""

    ts: float
    backend: str  # "nvml" | "fake" | "none"
    gpus: tuple[GpuInfo, ...]
    reason: str | None
    host: HostInfo

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form; lists instead of tuples, keys named as the dataclass fields (a GPU's ``node`` only
        where it has one)."""
        def plain(v: Any) -> Any:
            if isinstance(v, tuple):
                return [plain(x) for x in v]
            if is_dataclass(v):
                return {f.name: plain(getattr(v, f.name)) for f in fields(v)
                        if not (f.name == "node" and v.node is None)}  # type: ignore[union-attr]
            return v

        d = plain(self)
        return {k: d[k] for k in ("ts", "backend", "reason", "gpus", "host")}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GpuSample:
        """Inverse of :meth:`to_dict` (clients rebuild samples from the socket's JSON)."""
        def procs(items: Iterable[Mapping[str, Any]]) -> tuple[GpuProcess, ...]:
            return tuple(GpuProcess(int(p["pid"]), p.get("used_mb")) for p in items)

        gpus = tuple(
            GpuInfo(
                **{k: v for k, v in g.items() if k not in ("processes", "mig")},
                processes=procs(g.get("processes", ())),
                mig=tuple(
                    MigInstance(**{k: v for k, v in m.items() if k != "processes"},
                                processes=procs(m.get("processes", ())))
                    for m in g.get("mig", ())
                ),
            )
            for g in d.get("gpus", ())
        )
        return cls(ts=float(d["ts"]), backend=str(d["backend"]), gpus=gpus, reason=d.get("reason"),
                   host=HostInfo(**d["host"]))


class GpuSampler(Protocol):
    def sample(self) -> GpuSample: ...

    def close(self) -> None: ...


# ---------------------------------------------------------------------------------------------- host


class HostStats:
    """Host CPU/RAM/load. CPU percent is busy time since the previous call (psutil's interval=None
    semantics), computed from our own ``cpu_times`` baseline so that other callers of
    ``psutil.cpu_percent`` in the process cannot shorten our measuring window. Primed on creation."""

    def __init__(self) -> None:
        self._last = self._busy_total()

    @staticmethod
    def _busy_total() -> tuple[float, float]:
        t = psutil.cpu_times()
        total = sum(t)
        # Linux counts guest time inside user/nice already; psutil subtracts it the same way.
        total -= getattr(t, "guest", 0.0) + getattr(t, "guest_nice", 0.0)
        idle = t.idle + getattr(t, "iowait", 0.0)
        return total - idle, total

    def cpu_pct(self) -> float:
        busy, total = self._busy_total()
        last_busy, last_total = self._last
        self._last = (busy, total)
        d_total = total - last_total
        return round(min(100.0, max(0.0, 100.0 * (busy - last_busy) / d_total)), 1) if d_total > 0 else 0.0

    def read(self) -> HostInfo:
        vm = psutil.virtual_memory()
        return HostInfo(cpu_pct=self.cpu_pct(), cpu_count=psutil.cpu_count() or 1,
                        mem_used_mb=(vm.total - vm.available) / _MIB, mem_total_mb=vm.total / _MIB,
                        load1=psutil.getloadavg()[0])  # emulated where the OS has none


# ---------------------------------------------------------------------------------------------- none


class NoneSampler:
    """No GPU backend: every sample has ``backend="none"``, no GPUs, ``reason``, and real host stats."""

    def __init__(self, reason: str = "GPU sampling disabled", *, clock: Callable[[], float] = time.time) -> None:
        self.reason = reason
        self._clock = clock
        self._host = HostStats()

    def sample(self) -> GpuSample:
        return GpuSample(ts=self._clock(), backend="none", gpus=(), reason=self.reason, host=self._host.read())

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------- nvml


def nvml_failure_reason(exc: BaseException) -> str:
    """Turn an NVML initialisation failure into a sentence that says what to do about it."""
    if isinstance(exc, ImportError):
        return "nvidia-ml-py (pynvml) is not installed"
    name = type(exc).__name__
    reasons = {
        "NVMLError_LibraryNotFound": "no NVIDIA driver found (libnvidia-ml.so.1 not loadable)",
        "NVMLError_DriverNotLoaded": "NVIDIA driver not loaded (kernel module missing?)",
        "NVMLError_NoPermission": "no permission to access the NVIDIA driver (/dev/nvidia*)",
        "NVMLError_LibRmVersionMismatch": "NVIDIA driver/library version mismatch (reload the driver or reboot)",
        "NVMLError_FunctionNotFound": "NVIDIA driver too old for this nvidia-ml-py",
        "NVMLLibraryMismatchError": "NVIDIA driver too old for this nvidia-ml-py (library version mismatch)",
        "NVMLError_GpuIsLost": "a GPU fell off the bus (GPU is lost)",
    }
    return reasons.get(name) or f"NVML unavailable: {name.removeprefix('NVMLError_') or 'error'}: {exc}"


class NVMLError_LibraryNotFound(Exception):  # noqa: N801 - pynvml's name: nvml_failure_reason goes by it
    """What pynvml's ``nvmlInit`` raises where NVML's library does not load, raised without importing pynvml."""


def _library_missing() -> bool:
    """Whether ``nvmlInit`` would fail because NVML's library (``libnvidia-ml.so.1``, what pynvml loads on
    Linux) does not load here, learnt without importing pynvml (about 15 ms of CPU at each start of a
    supervisor on a machine without an NVIDIA driver). False where pynvml is imported already, or is not
    installed (its ImportError says that), or where the library loads."""
    if not sys.platform.startswith("linux") or "pynvml" in sys.modules:
        return False
    import ctypes
    import importlib.util

    if importlib.util.find_spec("pynvml") is None:
        return False
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return True
    return False


class NvmlSampler:
    """Samples GPUs through NVML. ``nvmlInit`` runs on the first sample, not on construction.

    If initialisation fails the sample says ``backend="none"`` with :func:`nvml_failure_reason`; it is
    retried at most every ``retry_init_s`` seconds (a driver can be loaded later, but the failed probe
    should not cost a dlopen per tick). After a successful init every individual query that fails
    (NotSupported on consumer cards, NoPermission for power, a lost GPU, ...) becomes None.
    Thread-safe: one lock around sample() and close().
    """

    def __init__(self, *, clock: Callable[[], float] = time.time, retry_init_s: float = 60.0) -> None:
        self._clock = clock
        self._retry_init_s = retry_init_s
        self._host = HostStats()
        self._lock = threading.Lock()
        self._nvml: Any = None  # the pynvml module once initialised
        self._init_failed_at: float | None = None
        self.reason: str | None = None  # why the last init failed, if it did
        self._handles: dict[int, Any] = {}

    # -- lifecycle

    def _ensure_init(self) -> bool:
        if self._nvml is not None:
            return True
        now = time.monotonic()
        if self._init_failed_at is not None and now - self._init_failed_at < self._retry_init_s:
            return False
        try:
            if _library_missing():
                raise NVMLError_LibraryNotFound()
            import pynvml  # lazy: the headless core must import without it

            pynvml.nvmlInit()
        except Exception as exc:  # the boundary: nothing NVML does may escape
            self.reason = nvml_failure_reason(exc)
            self._init_failed_at = now
            log.debug("NVML init failed: %r", exc)
            return False
        self._nvml = pynvml
        self._init_failed_at = None
        self.reason = None
        self._handles.clear()
        return True

    def probe(self) -> str | None:
        """Initialise now; return None when NVML works, else the reason it does not."""
        with self._lock:
            self._init_failed_at = None
            return None if self._ensure_init() else self.reason

    def close(self) -> None:
        with self._lock:
            if self._nvml is not None:
                with contextlib.suppress(Exception):  # shutting down a broken driver is not worth an error
                    self._nvml.nvmlShutdown()
            self._nvml = None
            self._handles.clear()

    # -- queries

    def _q(self, fn_name: str, *args: Any) -> Any:
        """Call one NVML function; any failure is None (N/A). Uninitialized means the library went
        away under us (e.g. someone called nvmlShutdown), so the next sample re-initialises."""
        nv = self._nvml
        try:
            return getattr(nv, fn_name)(*args)
        except Exception as exc:
            if type(exc).__name__ == "NVMLError_Uninitialized":
                self._nvml = None
            return None

    def _processes(self, handle: Any) -> tuple[GpuProcess, ...]:
        nv = self._nvml
        found: list[GpuProcess] = []
        for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                procs = getattr(nv, fn)(handle)
            except Exception as exc:
                # nvidia-ml-py 12+ calls the _v3 symbol, which drivers before 510 lack. Up to 12.5xx that
                # raised NVMLError_FunctionNotFound; from 12.575 the unversioned wrappers are decorated
                # with @throwOnVersionMismatch, which turns it into NVMLLibraryMismatchError (a plain
                # Exception, not an NVMLError) -- either way the _v2 call is what works.
                mismatch = type(exc).__name__ in ("NVMLError_FunctionNotFound", "NVMLLibraryMismatchError")
                procs = self._q(f"{fn}_v2", handle) if mismatch else None
            found += [GpuProcess(int(p.pid), _num(getattr(p, "usedGpuMemory", None), _MIB))
                      for p in procs or () if getattr(p, "pid", None) is not None]
        return _merged(found)

    def _mig(self, handle: Any) -> tuple[MigInstance, ...]:
        """The MIG devices of a GPU in MIG mode; () when MIG is off or not supported."""
        nv = self._nvml
        mode = self._q("nvmlDeviceGetMigMode", handle)
        if not mode or mode[0] != getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1):
            return ()
        count = self._q("nvmlDeviceGetMaxMigDeviceCount", handle) or 0
        out = []
        for i in range(int(count)):
            mh = self._q("nvmlDeviceGetMigDeviceHandleByIndex", handle, i)
            if mh is None:  # an empty slot (NVML_ERROR_NOT_FOUND)
                continue
            mem = self._q("nvmlDeviceGetMemoryInfo", mh)
            gi = self._q("nvmlDeviceGetGpuInstanceId", mh)
            ci = self._q("nvmlDeviceGetComputeInstanceId", mh)
            out.append(MigInstance(
                index=i,
                uuid=_text(self._q("nvmlDeviceGetUUID", mh)),
                gpu_instance_id=int(gi) if isinstance(gi, int) else None,
                compute_instance_id=int(ci) if isinstance(ci, int) else None,
                mem_used_mb=_num(getattr(mem, "used", None), _MIB),
                mem_total_mb=_num(getattr(mem, "total", None), _MIB),
                processes=self._processes(mh),
            ))
        return tuple(out)

    def _gpu(self, index: int) -> GpuInfo:
        handle = self._handles.get(index)
        if handle is None:
            handle = self._q("nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                return GpuInfo(index, "N/A", None, None, None, None, None, None, None, ())
            self._handles[index] = handle
        mem = self._q("nvmlDeviceGetMemoryInfo", handle)
        limit = self._q("nvmlDeviceGetEnforcedPowerLimit", handle)
        if limit is None:
            limit = self._q("nvmlDeviceGetPowerManagementLimit", handle)
        mig = self._mig(handle)
        return GpuInfo(
            index=index,
            name=_text(self._q("nvmlDeviceGetName", handle)) or "N/A",
            uuid=_text(self._q("nvmlDeviceGetUUID", handle)),
            util_pct=_num(getattr(self._q("nvmlDeviceGetUtilizationRates", handle), "gpu", None)),
            mem_used_mb=_num(getattr(mem, "used", None), _MIB),
            mem_total_mb=_num(getattr(mem, "total", None), _MIB),
            temp_c=_num(self._q("nvmlDeviceGetTemperature", handle,
                                getattr(self._nvml, "NVML_TEMPERATURE_GPU", 0))),
            power_w=_num(self._q("nvmlDeviceGetPowerUsage", handle), 1000.0),
            power_limit_w=_num(limit, 1000.0),
            # a MIG device's processes hold memory of this GPU: hygiene and attribution must see them
            processes=_merged([*self._processes(handle), *(p for m in mig for p in m.processes)]),
            mig=mig,
        )

    def sample(self) -> GpuSample:
        with self._lock:
            ts = self._clock()
            host = self._host.read()
            if not self._ensure_init():
                return GpuSample(ts=ts, backend="none", gpus=(), reason=self.reason, host=host)
            count = self._q("nvmlDeviceGetCount")
            gpus = tuple(self._gpu(i) for i in range(int(count or 0)))
            reason = "NVML could not count GPUs" if count is None else None if gpus else "NVML reports no GPUs"
            return GpuSample(ts=ts, backend="nvml", gpus=gpus, reason=reason, host=host)


def _merged(procs: Iterable[GpuProcess]) -> tuple[GpuProcess, ...]:
    """One entry per pid, by pid. A process with both a compute and a graphics context (or on a MIG device and
    its GPU) is listed twice; the larger figure is kept rather than summed, since both report one allocation."""
    merged: dict[int, float | None] = {}
    for p in procs:
        prev = merged.get(p.pid)
        merged[p.pid] = p.used_mb if prev is None else max(prev, p.used_mb or 0.0)
    return tuple(GpuProcess(pid, mb) for pid, mb in sorted(merged.items()))


def _text(v: Any) -> str | None:
    return v.decode(errors="replace") if isinstance(v, bytes) else None if v is None else str(v)


def _num(v: Any, divisor: float = 1.0) -> float | None:
    # NVML signals "not available" with all-ones integers in some structs.
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v in (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF):
        return None
    return float(v) / divisor


# ---------------------------------------------------------------------------------------------- fake


# name, memory (MiB as NVML reports it), power limit (W)
_MODELS: dict[str, tuple[str, float, float]] = {
    "H100": ("NVIDIA H100 80GB HBM3", 81559.0, 700.0),
    "H200": ("NVIDIA H200", 143771.0, 700.0),
    "A100": ("NVIDIA A100-SXM4-80GB", 81920.0, 400.0),
    "A40": ("NVIDIA A40", 46068.0, 300.0),
    "A10": ("NVIDIA A10", 23028.0, 150.0),
    "L4": ("NVIDIA L4", 23034.0, 72.0),
    "L40S": ("NVIDIA L40S", 46068.0, 350.0),
    "4090": ("NVIDIA GeForce RTX 4090", 24564.0, 450.0),
}
_SPEC_RE = re.compile(
    r"^\s*(?:(\d+)\s*[xX]\s*(?=\S))?"  # optional count: "8x"
    r"(\d+|\d*[A-Za-z][A-Za-z-]*\d[A-Za-z0-9-]*)?\s*$",  # a count alone, or a name holding a digit
)
_MAX_FAKE_GPUS = 256

# Fixed host figures so snapshot tests of the fake backend are byte-stable.
FAKE_HOST = HostInfo(cpu_pct=23.5, cpu_count=64, mem_used_mb=131072.0, mem_total_mb=2 * 1024 * 1024.0, load1=7.25)


class FakeSampler:
    """Deterministic idle GPUs for demos and snapshots (no processes, 30 °C, a tenth of the power limit); host
    stats are :data:`FAKE_HOST`."""

    def __init__(self, count: int = 1, model: str = "H100", *, clock: Callable[[], float] = time.time) -> None:
        if count < 0:
            raise ValueError("count must be >= 0")
        self.name, self.mem_total_mb, self.power_limit_w = _MODELS.get(model.upper(),
                                                                        (f"NVIDIA {model}", 24576.0, 300.0))
        self.count = count
        self._clock = clock

    @classmethod
    def from_spec(cls, spec: str, **kwargs: Any) -> FakeSampler:
        """``"8xH100"``, ``"2"`` (two H100s), ``"A40"`` (one), ``"1x4090"``, ``"0"`` (no GPUs).

        A bare number is always a count. A model is a known key or a letters-and-digits GPU name
        ("B200", "RTX6000"); anything else raises ValueError so typos do not become fake GPUs.
        """
        m = _SPEC_RE.match(spec)
        count_s, model = m.groups() if m else (None, None)  # no match: neither, refused below
        if count_s is None and model is not None and model.isdigit():
            count_s, model = model, None
        if (count_s is None and model is None) or (
            model is not None and model.isdigit() and model not in _MODELS
        ):
            raise ValueError(f"bad fake GPU spec {spec!r}: expected e.g. '8xH100', '2' or 'A40'")
        count = int(count_s) if count_s is not None else 1
        if count > _MAX_FAKE_GPUS:
            raise ValueError(f"bad fake GPU spec {spec!r}: at most {_MAX_FAKE_GPUS} GPUs (a model: '1x{count}')")
        return cls(count, model or "H100", **kwargs)

    def sample(self) -> GpuSample:
        gpus = tuple(self.gpu(i) for i in range(self.count))
        return GpuSample(ts=self._clock(), backend="fake", gpus=gpus,
                         reason=None if gpus else "fake backend with no GPUs", host=FAKE_HOST)

    def gpu(self, index: int) -> GpuInfo:
        return GpuInfo(index, self.name, f"GPU-fake-{index:04d}", util_pct=0.0, mem_used_mb=0.0,
                       mem_total_mb=self.mem_total_mb, temp_c=30.0, power_w=round(self.power_limit_w * 0.1, 1),
                       power_limit_w=self.power_limit_w)

    def close(self) -> None:
        pass


# ----------------------------------------------------------------------------------------- factory


def make_sampler(spec: str | None = None) -> GpuSampler:
    """Build the sampler a spec names.

    ``None``/``"auto"``: ``$RLSUP_GPU_SAMPLER`` if set, else NVML if it initialises, else a
    :class:`NoneSampler` carrying the reason NVML gave. ``"nvml"``: NVML without fallback (its samples
    carry the reason instead). ``"none"``. ``"fake:8xH100"`` / ``"fake:2"`` / ``"fake"``: FakeSampler.
    An unknown spec raises ValueError (a usage error, reported before anything starts).
    """
    if spec is None or spec.strip().lower() == "auto":
        env = os.environ.get(ENV_VAR, "").strip()
        if env and env.lower() != "auto":
            try:
                return make_sampler(env)
            except ValueError as exc:
                raise ValueError(f"{ENV_VAR}: {exc}") from None
        nvml = NvmlSampler()
        reason = nvml.probe()
        if reason is None:
            return nvml
        nvml.close()
        return NoneSampler(reason)
    kind, _, arg = spec.strip().partition(":")
    kind = kind.lower()
    if kind == "nvml" and not arg:
        return NvmlSampler()
    if kind == "none":
        return NoneSampler(arg or "GPU sampling disabled")
    if kind == "fake":
        return FakeSampler.from_spec(arg or "1")
    raise ValueError(f"unknown GPU sampler {spec!r}: expected auto, nvml, none, or fake[:NxMODEL]")


# ------------------------------------------------------------------------------------ GPU hygiene


@dataclass(frozen=True)
class ProcIdentity:
    """What can be seen here of the process with a given pid (see :func:`proc_identity`).

    ``run_dir``: its ``RLSUP_RUN_DIR`` marker (None when absent or unreadable, see ``env_readable``);
    ``holds_gpu``: whether it has an NVIDIA device mapped (``/dev/nvidia*`` in /proc/PID/maps), None
    when that cannot be read.
    """

    pid: int
    name: str
    create_time: float | None
    run_dir: str | None
    env_readable: bool
    holds_gpu: bool | None


def proc_identity(pid: int) -> ProcIdentity | None:
    """The identity of ``pid`` in this PID namespace, or None when no such process is visible here."""
    try:
        p = psutil.Process(pid)
        name = p.name()
        created: float | None = p.create_time()
    except psutil.NoSuchProcess:
        return None
    except psutil.Error:
        name, created = "?", None
    try:
        env = p.environ()
        run_dir: str | None = env.get(ENV_RUN_DIR) if env.get(ENV_COMPONENT) else None  # both, as find_marked
        # Empty while the kernel is between a new program's name and its environment (mid-exec),
        # and for a zombie: nothing can be told from it, which is not the same as "not the run's".
        readable = bool(env)
    except (psutil.Error, OSError):
        run_dir, readable = None, False
    holds: bool | None
    try:
        with open(f"/proc/{pid}/maps", "rb") as fh:
            holds = b"/dev/nvidia" in fh.read()
    except FileNotFoundError:
        return None  # it ended while we looked
    except OSError:
        holds = None
    return ProcIdentity(pid, name, created, run_dir, readable, holds)


@dataclass(frozen=True)
class Holder:
    """One process NVML lists on one of the GPUs in question, and why it was classified so."""

    gpu: int
    pid: int
    used_mb: float | None
    why: str
    create_time: float | None = None  # the identity it was classified with (the kill re-checks it)


@dataclass(frozen=True)
class Holders:
    """The outcome of :func:`classify_holders`.

    ``ours``: proven leftovers of this run -- the only processes the supervisor may signal.
    ``live``: processes of the run's current attempts (another component sharing the GPU): left alone
    and not waited for. ``foreign``: visible processes proven not to be this run's. ``unmappable``: pids
    that cannot be mapped to a process here (another PID namespace, gone, unreadable, or a visible pid
    that holds no NVIDIA device). ``note``: what the release wait never signals (the flag's action).
    """

    ours: tuple[Holder, ...]
    live: tuple[Holder, ...]
    foreign: tuple[Holder, ...]
    unmappable: tuple[Holder, ...]
    note: str

    @property
    def memory_only(self) -> bool:
        """True when the wait must go by GPU memory alone: some holder cannot be proven either way."""
        return bool(self.foreign or self.unmappable)

    @property
    def waiting_on(self) -> tuple[Holder, ...]:
        """What a restart waits for: the run's leftovers, plus anything that cannot be attributed."""
        return self.ours + self.unmappable


_Verdict = tuple[str, str, float | None]
"""How :func:`classify_holders` judged one holder: its kind (ours, live, foreign, unmappable), why, and for
ours the create_time it was proven with."""


def _judge_holder(pid: int, ident: ProcIdentity | None, run_pids: Mapping[int, str],
                  prev_times: Mapping[int, float | None], run_dir: str | None) -> _Verdict:
    """One holder judged by what can be seen of ``pid`` here (``ident``): the rules of :func:`classify_holders`."""
    if ident is None:
        return "unmappable", ("no such process here (another PID namespace, "
                              "or it ended and the driver has not freed it yet)"), None
    if ident.holds_gpu is False:
        return "unmappable", (f"pid {pid} here is {ident.name!r}, which has no "
                              "NVIDIA device open: NVML reports a PID of another namespace"), None
    marker_ours = run_dir is not None and ident.run_dir == run_dir
    if pid in run_pids and pid not in prev_times:
        return "live", f"live process of {run_pids[pid]}", None
    if pid in prev_times:
        return _judge_previous(ident, prev_times[pid], marker_ours)
    if marker_ours:
        return "ours", "carries this run's marker outside its live trees", ident.create_time
    if ident.env_readable:
        return "foreign", f"{ident.name!r} is not a process of this run", None
    return "unmappable", f"{ident.name!r}: its environment cannot be read to tell whose it is", None


def _judge_previous(ident: ProcIdentity, want_t: float | None, marker_ours: bool) -> _Verdict:
    """A holder whose pid a previous attempt had: ours only when its identity is proven (same start
    time, or this run's marker), foreign when the pid was reused, else unmappable."""
    if want_t is not None and ident.create_time is not None:
        if abs(ident.create_time - want_t) < 0.05:
            return "ours", "previous attempt (same pid and start time)", ident.create_time
        return "foreign", "pid reused by another process since the previous attempt ended", None
    if marker_ours:
        return "ours", "previous attempt (carries this run's marker)", ident.create_time
    return "unmappable", ("a previous attempt's pid whose identity cannot "
                          "be checked (no start time, no readable marker)"), None


def classify_holders(
    sample: GpuSample,
    *,
    gpu_indices: Collection[int],
    run_pids: Mapping[int, str],
    prev_pids: Mapping[int, float | None],
    proc_lookup: Callable[[int], ProcIdentity | None] = proc_identity,
    run_dir: str | None = None,
) -> Holders:
    """Which processes NVML lists on ``gpu_indices`` are provably this run's. Pure given ``proc_lookup``.

    ``run_pids``: pid -> component for every live member of the run's current process trees. ``prev_pids``:
    the previous attempt's pids -> create_time where the supervisor recorded it (the identity check), else
    None. ``run_dir``: the run's marker value (``RLSUP_RUN_DIR``).

    A holder is *ours* only when the pid is visible here, has an NVIDIA device mapped (or that cannot be
    read), and its identity is proven: a previous-attempt pid whose create_time matches, or whose run
    marker names this run; or any process carrying this run's marker that is not a live current member.
    A pid not visible here -- NVML in a container reports host PIDs -- or a visible pid that maps no
    NVIDIA device (a different process that happens to have the host pid's number) is *unmappable*.
    """
    kinds: dict[str, list[Holder]] = {"ours": [], "live": [], "foreign": [], "unmappable": []}
    for g in sample.gpus:
        if g.index not in gpu_indices:
            continue
        for p in g.processes:
            kind, why, create_time = _judge_holder(p.pid, proc_lookup(p.pid), run_pids, prev_pids, run_dir)
            kinds[kind].append(Holder(g.index, p.pid, p.used_mb, why, create_time))
    ours, live, foreign, unmappable = (tuple(hs) for hs in kinds.values())
    return Holders(ours, live, foreign, unmappable, _holders_note(foreign, unmappable))


def _holders_note(foreign: tuple[Holder, ...], unmappable: tuple[Holder, ...]) -> str:
    """What the release wait never signals, for the ``gpu_not_released`` flag's action (the run's own
    leftovers are the action's first words: killed, or not)."""
    def pids(hs: tuple[Holder, ...]) -> str:
        return ", ".join(str(h.pid) for h in hs[:6]) + (" ..." if len(hs) > 6 else "")

    parts = []
    if unmappable:
        parts.append(f"{len(unmappable)} pid(s) NVML reports cannot be mapped to a process here "
                     f"(pid {pids(unmappable)}; in a container NVML reports host PIDs): waited on by GPU memory "
                     "alone, never signalled")
    if foreign:
        parts.append(f"{len(foreign)} process(es) outside this run hold the GPU (pid {pids(foreign)}): left alone")
    return "; ".join(parts)


# ------------------------------------------------------------------------------------------ thread


class SamplerThread:
    """Calls ``sampler.sample()`` every ``interval`` seconds on a daemon thread and hands each sample to
    ``callback`` (the supervisor wraps ``loop.call_soon_threadsafe``). The first sample is taken at
    once. A sample or callback that raises is logged and counted, and the next tick comes as usual.
    :meth:`stop` wakes the thread through an Event, so it returns promptly; the sampler is closed on
    the thread that used it when ``close_sampler`` is true. A wedged NVML call cannot hang shutdown:
    stop() gives up after ``timeout`` and the daemon thread dies with the process."""

    def __init__(self, sampler: GpuSampler, callback: Callable[[GpuSample], None], interval: float = 1.0, *,
                 close_sampler: bool = True) -> None:
        if interval <= 0:
            raise ValueError("interval must be > 0")
        self.sampler, self.callback = sampler, callback
        self._interval = interval
        self._close_sampler = close_sampler
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop() and by a shorter interval
        self._thread = threading.Thread(target=self._run, name="rlsup-gpu-sampler", daemon=True)
        self.errors = 0

    @property
    def interval(self) -> float:
        return self._interval

    @interval.setter
    def interval(self, seconds: float) -> None:
        """A shorter interval (a client began to watch) takes a sample now, not at the end of the
        longer wait in progress."""
        if seconds <= 0:
            raise ValueError("interval must be > 0")
        shorter = seconds < self._interval
        self._interval = seconds
        if shorter:
            self._wake.set()

    def start(self) -> SamplerThread:
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> bool:
        """Ask the thread to finish and join it; True when it has ended within ``timeout``."""
        self._stop.set()
        self._wake.set()
        if self._thread.ident is None:  # never started
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            next_at = time.monotonic()
            while not self._stop.is_set():
                try:
                    self.callback(self.sampler.sample())
                except Exception as exc:  # one bad tick must not end sampling for the run
                    self.errors += 1
                    log.warning("GPU sample failed: %r", exc)
                # Fixed-rate schedule; after a slow tick, skip ahead instead of bursting.
                next_at += self._interval
                now = time.monotonic()
                if next_at < now:
                    next_at = now + self._interval
                if self._wake.wait(next_at - now):
                    self._wake.clear()
                    next_at = time.monotonic()  # the interval shrank: sample now
        finally:
            if self._close_sampler:
                try:
                    self.sampler.close()
                except Exception as exc:
                    log.warning("closing GPU sampler failed: %r", exc)
