"""The signature catalogue: texts that name a failure, and texts that only look like one.

Every pattern here was taken from a real failure report (see tests/fixtures/diagnosis/*.log for the
links). Tiers rank root causes above symptoms: tier 0 is a primary failure (OOM, a bug, a full
disk), tier 1 a failure that is usually the consequence of another process's death (collective
timeouts, refused connections, a dead engine seen from its API server), tier 3 pure wrappers that
only point elsewhere ("See root cause above", ChildFailedError).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PRIMARY, COLLATERAL, SIGNAL, WRAPPER = 0, 1, 2, 3


@dataclass(frozen=True)
class Signature:
    name: str
    category: str
    tier: int
    pattern: re.Pattern[str]
    # A weak signature alone does not make a failure of a process that has not failed; a retried
    # connection error is how a client waits for its server.
    weak: bool = False


def _sig(name: str, category: str, tier: int, pattern: str, weak: bool = False) -> Signature:
    return Signature(name, category, tier, re.compile(pattern), weak)


# Order matters within a line: the first match names the line.
SIGNATURES: tuple[Signature, ...] = (
    # --- memory -------------------------------------------------------------------------------
    _sig("cuda_oom", "cuda_oom", PRIMARY,
         r"CUDA out of memory|(?:torch\.)?(?:cuda\.)?OutOfMemoryError\b|CUBLAS_STATUS_ALLOC_FAILED"
         r"|HIP out of memory|cudaErrorMemoryAllocation|out of memory \(CUDA\)"),
    _sig("kernel_oom_kill", "host_oom", PRIMARY,
         r"Out of memory: Killed process \d+|Memory cgroup out of memory: Killed process \d+"
         r"|oom-kill:.*\bpid=\d+"),
    _sig("ray_oom", "host_oom", PRIMARY,
         r"ray\.exceptions\.OutOfMemoryError|Task was killed due to the node running low on memory"),
    _sig("vllm_kv_cache", "inference_memory_config", PRIMARY,
         r"No available memory for the cache blocks|is larger than the maximum number of tokens that can "
         r"be stored in KV cache|insufficient KV cache|Not enough memory\. Please try to (?:increase|decrease) "
         r"--mem-fraction-static|max_total_num_tokens=\S+ is (?:too small|smaller)"
         r"|needs? \S+ GiB KV cache is needed, which is larger than the available KV cache memory"),
    # --- native crashes -----------------------------------------------------------------------
    _sig("segfault", "segfault", PRIMARY,
         r"Fatal Python error: Segmentation fault|\*\*\* SIGSEGV received|Segmentation fault \(core dumped\)"
         r"|Segfault encountered|SIGSEGV\(11\)|received signal SIGSEGV|Bus error \(core dumped\)"),
    # An abort is usually the last act of something printed before it (an NCCL watchdog, a C++
    # exception), so it ranks below collective failures.
    _sig("fatal_python", "fatal_python_error", SIGNAL,
         r"Fatal Python error: (?!Segmentation fault)|terminate called (?:after throwing|without an active)"
         r"|SIGABRT\(6\)|Aborted \(core dumped\)"),
    # --- CUDA ---------------------------------------------------------------------------------
    _sig("cuda_error", "cuda_error", PRIMARY,
         r"CUDA error: (?!out of memory)|CUDA kernel errors might be asynchronously reported"
         r"|device-side assert triggered|cudaErrorIllegalAddress|CUDNN_STATUS_(?!SUCCESS)\w+"
         r"|CUBLAS_STATUS_(?!SUCCESS|ALLOC_FAILED)\w+|an illegal memory access was encountered"
         r"|CUDA driver initialization failed|no CUDA-capable device is detected|Xid \d+"),
    # --- disk / ports -------------------------------------------------------------------------
    _sig("disk_full", "disk_full", PRIMARY,
         r"No space left on device|\[Errno 28\]|StorageFull|Disk quota exceeded|\[Errno 122\]|ENOSPC"),
    # `python -m pkg.mod` with the package missing prints no traceback, only this line; a wrong
    # interpreter or an unactivated virtualenv fails like this on every attempt.
    _sig("module_not_found", "python_exception", PRIMARY,
         r"Error while finding module specification for '[^']+' \(ModuleNotFoundError|"
         r"^(?:/\S+: )?No module named [\w.]+$|^\S*python[\d.]*: No module named "),
    _sig("port_in_use", "port_in_use", PRIMARY,
         r"Address already in use|\[Errno 98\]|\[Errno 48\]|EADDRINUSE|address already in use"
         r"|port \d+ is (?:already )?in use|is already in use by another process"),
    # --- distributed --------------------------------------------------------------------------
    _sig("nccl_timeout", "nccl_timeout", COLLATERAL,
         r"Watchdog caught collective operation timeout|WorkNCCL\(SeqNum=\d+.*\) ran for \d+ milliseconds"
         r"|collective operation timeout|NCCL timeout"),
    _sig("watchdog", "watchdog_timeout", COLLATERAL,
         r"Heartbeat monitor timed out|watchdog got stuck for \d+ seconds|Scheduler watchdog timeout"
         r"|[Ww]atchdog timeout \(self\.watchdog_timeout|RPC call to \w+ timed out"),
    _sig("nccl_error", "nccl_error", COLLATERAL,
         r"NCCL error|ncclUnhandledCudaError|ncclInternalError|ncclSystemError|ncclInvalidUsage"
         r"|ncclRemoteError|DistBackendError|NCCL communicator was aborted|NCCL WARN"),
    _sig("dist_timeout", "distributed_timeout", COLLATERAL,
         r"DistStoreError|DistNetworkError|Timed out after \d+ seconds waiting for (?:clients|workers)"
         r"|The client socket has timed out|Socket Timeout|RendezvousTimeoutError|wait timeout after \d+ms"),
    # --- inference engine death ---------------------------------------------------------------
    _sig("engine_dead", "inference_engine_dead", WRAPPER,
         r"EngineDeadError|AsyncEngineDeadError|EngineCore encountered (?:an issue|a fatal error)"
         r"|Engine core proc \S+ died unexpectedly|Received sigquit from a child proces"
         r"|Got fatal signal from worker processes|MulitprocExecutor got SIGQUIT|Engine core initialization failed"
         r"|EngineCore failed to start|The actor died unexpectedly before finishing this task"
         r"|A worker died or was killed while executing a task"),
    # --- connections --------------------------------------------------------------------------
    _sig("connection_refused", "connection_refused", COLLATERAL,
         r"ConnectionRefusedError|Connection refused|\[Errno 111\]|All connection attempts failed"
         r"|Cannot connect to host|httpx\.ConnectError|aiohttp\.client_exceptions\.ClientConnectorError"
         r"|NewConnectionError|RemoteDisconnected|Connection aborted|ConnectionResetError"
         r"|server launch failed|Max retries exceeded with url",
         weak=True),
)

# Lines that look like failures but are a normal wait at startup, or scary warnings.
BENIGN = re.compile(
    r"Server is not up yet|was not reached after \d+ seconds|Waiting for (?:the )?(?:inference|server|vLLM)"
    r"|Retrying in [\d.]+ ?s|retrying in [\d.]+|will retry|Waiting for .* to be ready|not ready yet"
    r"|UserWarning|FutureWarning|DeprecationWarning|is deprecated|\[WARNING\].*async_io|NCCL INFO"
    r"|to avoid (?:CUDA )?out of memory|expandable_segments:True to avoid fragmentation\.?$"
    r"|gpu_memory_utilization \(|Ignore(?:d)? leaked shared memory"
)

# A line that says the thing a client was waiting for is now there.
RECOVERED = re.compile(
    r"Inference pool (?:is )?ready|Server is up|server is ready|Application startup complete"
    r"|Uvicorn running on|The server is fired up|SUCCESS|Connected to|connection (?:re)?established"
    r"|is ready\b|Started server process",
    re.IGNORECASE,
)

# Exceptions that only point at an error printed elsewhere.
WRAPPER_TYPES = re.compile(
    r"(?:^|\.)(?:ChildFailedError|EngineDeadError|AsyncEngineDeadError|RayActorError|ActorDiedError"
    r"|WorkerFailedError|HydraException|KeyboardInterrupt|SystemExit|BrokenProcessPool|CalledProcessError"
    r"|ExceptionGroup|BaseExceptionGroup|CancelledError)$"
)
WRAPPER_MESSAGES = re.compile(
    r"See root cause above|See stack trace \(above\) for the root cause|see root cause above"
    r"|Engine core initialization failed|Worker '[^']+' failed with exit code|Failed core proc"
)
SYMPTOM_FUNCS = {"sigquit_handler", "kill_process_tree", "signal_handler", "_sigquit_handler"}

STEP_PATTERNS = (
    # not "Global Step:   0%|" (a progress bar) nor "global_step=3.2e+4" (a float)
    re.compile(r"\b[Ss]tep[\s:=#]*(\d+)(?![\d.]*%|\.\d|\d)"),
    re.compile(r"\bglobal_step[\s:=]+(\d+)(?![\d.])"),
)


def match_line(text: str) -> Signature | None:
    """The first signature the line matches, or None (benign lines never match)."""
    for sig in SIGNATURES:
        if sig.pattern.search(text):
            return sig
    return None


def classify_exception(text: str) -> tuple[str, int]:
    """Category and tier for an exception line ``Type: message``."""
    sig = match_line(text)
    typ = text.split(":", 1)[0].strip()
    if WRAPPER_TYPES.search(typ.split("(", 1)[0]) or WRAPPER_MESSAGES.search(text):
        return (sig.category if sig else "python_exception"), WRAPPER
    if sig is not None:
        return sig.category, sig.tier
    if re.search(r"(?:^|\.)(?:MemoryError)$", typ):
        return "host_oom", PRIMARY
    if re.search(r"(?:^|\.)(?:ConnectError|ConnectionError|ConnectTimeout)$", typ):
        return "connection_refused", COLLATERAL
    if re.search(r"(?:^|\.)TimeoutError$", typ) and re.search(r"NCCL|collective|barrier", text):
        return "distributed_timeout", COLLATERAL
    return "python_exception", PRIMARY
