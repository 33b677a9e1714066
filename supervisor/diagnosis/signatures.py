"""The signature catalogue: texts that name a failure, and texts that only look like one.

Every pattern here was taken from a real failure report (see tests/fixtures/diagnosis/*.log for the
links) or from the upstream source that prints it. Tiers rank root causes above symptoms: tier 0 is
a primary failure (OOM, a bug, a full disk), tier 1 a failure that is usually the consequence of
another process's death (collective timeouts, refused connections, a dead engine seen from its API
server), tier 2 a death by signal reported by a launcher or a shell, tier 3 pure wrappers that only
point elsewhere ("See root cause above", ChildFailedError).

Within one line the *most specific* signature names it: the catalogue is ordered from specific to
generic, and the first that matches wins. A line carrying Ray's host-memory ``OutOfMemoryError`` is
host memory, not CUDA memory; ``No space left on device`` inside an ``NCCL WARN`` is a full disk;
``ncclRemoteError`` inside a ``terminate called`` is an NCCL failure.
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
    # Lower-case substrings one of which every text the pattern matches contains (see _KEYS).
    keys: tuple[str, ...] = ()
    # Lines this short are tried whatever their words (a shell's one-word kill report, translated).
    short: int = 0
    # A weak signature alone does not make a failure of a process that has not failed; a retried
    # connection error is how a client waits for its server.
    weak: bool = False


def _sig(name: str, category: str, tier: int, pattern: str, weak: bool = False) -> Signature:
    return Signature(name, category, tier, re.compile(pattern), _KEYS[name], _SHORT.get(name, 0), weak)


# How bash reports a job it saw die of SIGKILL, in every language bash is translated to
# (bminor/bash po/*.po, msgid "Killed"). A shell prints it alone on a line for a foreground job.
_KILLED_WORDS = (
    "Killed", "Doodgemaak proses.", "Убит", "Mort", "Zabit", "Slået ihjel", "Abgebrochen (Killed)",
    "Murdu", "Matado", "Tapetud", "Tapettu", "Tué", "Maraithe", "Eliminran", "Kilőve", "Dibunuh",
    "Ucciso", "მოკვდა", "죽었음", "Drept", "Geëlimineerd", "Unicestwiony", "Morto", "Morto (Killed)",
    "Omorât", "Zabitý", "Uničen", "Убијен", "Dödad", "Öldürüldü", "Вбитий", "Bị giết", "已杀死", "強制結束",
)
_KILLED_ALT = "|".join(re.escape(w) for w in sorted(_KILLED_WORDS, key=len, reverse=True))

# For each signature, lower-case substrings one of which every text its pattern matches contains:
# a line holding none of them is not tried against the pattern. Most lines hold none, and plain
# substring tests cost a tenth of the regexes. tests/supervisor/diagnosis checks on every corpus
# line that a pattern never matches without its keys.
_SHORT = {"shell_killed": max(len(w) for w in _KILLED_WORDS) + 4}
_KEYS: dict[str, tuple[str, ...]] = {
    "slurm_oom": ("oom-kill event", "oom_kill event", "out of memory"),
    "slurm_end": ("srun: error: ", "cancelled at "),
    "slurm_execve": ("execve():",),
    "ray_oom": ("outofmemoryerror", "running low on memory", "memory pressure"),
    "host_alloc": ("can't allocate memory", "cannot allocate memory", "unable to allocate"),
    "kernel_oom_kill": ("out of memory", "oom-kill"),
    "cuda_oom": ("out of memory", "outofmemoryerror", "cublas_status_alloc_failed", "cudaerrormemoryallocation"),
    "vllm_kv_cache": ("cache blocks", "kv cache", "mem-fraction-static", "max_total_num_tokens", "max seq len",
                      "free memory on device"),
    "disk_full": ("no space left", "errno 28", "storagefull", "quota exceeded", "errno 122", "enospc"),
    "port_in_use": ("already in use", "errno 98", "errno 48", "eaddrinuse", "is in use"),
    "segfault": ("segmentation fault", "sigsegv", "segfault", "bus error"),
    "cuda_error": ("cuda error", "device-side assert", "cudaerrorillegaladdress", "cudnn_status",
                   "cublas_status", "illegal memory access", "cuda driver", "cuda-capable", "xid ", "assertion `",
                   "triton error ["),
    "cuda_boilerplate": ("cuda kernel errors",),
    "dataloader_signal": ("is killed by signal",),
    "nccl_timeout": ("collective operation timeout", "worknccl", "nccl timeout", "watchdog caught collective"),
    "watchdog": ("heartbeat monitor", "watchdog got stuck", "watchdog timeout", "rpc call to"),
    "nccl_error": ("nccl", "distbackenderror"),
    "collective_teardown": ("operations have failed", "inconsistency, we", "watchdog thread terminated",
                            "in the watchdog", "terminating the process after attempting to dump"),
    "dist_timeout": ("diststoreerror", "distnetworkerror", "waiting for clients", "waiting for workers",
                     "client socket has timed out", "socket timeout", "rendezvoustimeouterror", "wait timeout after",
                     "for send operation", "for recv operation", "socket timed out", "pair closure", "monitoredbarrier"),
    "gloo_peer_closed": ("connection closed by peer", "connection reset by peer"),
    "c10d_connect": ("client socket has failed to connect",),
    "elastic_segv": ("received by pid",),
    "slurm_task_failed": ("exited with exit code",),
    "fatal_python": ("fatal python error", "terminate called", "sigabrt", "aborted"),
    "module_not_found": ("no module named", "module specification"),
    # a job-control line ("./run.sh: line 5: 12 Killed  python ..."); the word alone is a short line
    "shell_killed": ("killed", ": line "),
    "shell_signal": ("aborted",),
    "shell_segv": ("segmentation fault", "bus error"),
    "engine_dead": ("enginedeaderror", "enginecore", "engine core", "sigquit", "fatal signal",
                    "engine loop", "mqllmengine", "mqenginedeaderror", "worker proc", "workerproc",
                    "scheduler hit an exception", "scheduler is dead"),
    "ray_actor_died": ("actor died", "actor is dead", "worker died", "worker exit type", "workercrashederror",
                       "actorunavailableerror", "nodediederror", "is unavailable"),
    "connection_refused": ("refused", "errno 111", "connection attempts", "cannot connect", "connecterror",
                           "clientconnectorerror", "newconnectionerror", "remotedisconnected", "connection aborted",
                           "connectionreseterror", "server launch failed", "max retries exceeded", "connect call failed",
                           "apiconnectionerror", "winerror 10061", "connection error"),
}

# Ordered from specific to generic: the first match names the line.
SIGNATURES: tuple[Signature, ...] = (
    # --- host memory (before CUDA memory: Ray's exception is also called OutOfMemoryError) --------
    # Slurm's cgroup OOM killer, as slurmstepd and srun report it in the step's own output
    # (src/slurmd/slurmstepd: "Detected %u oom_kill event(s) in %ps" (older: "oom-kill event(s) in step
    # J.batch cgroup"); srun: "<node>: task R: Out Of Memory"): the log's only word on it
    _sig("slurm_oom", "host_oom", PRIMARY,
         r"Detected \d+ oom[-_]kill events?(?:\(s\))? in |srun: error: [^\s:]+: tasks? [\d,-]+: Out Of Memory"),
    _sig("ray_oom", "host_oom", PRIMARY,
         r"ray\.exceptions\.OutOfMemoryError|Task was killed due to the node running low on memory"
         r"|Workers? \(tasks / actors\) killed due to memory pressure \(OOM\)|RayOutOfMemoryError"),
    _sig("kernel_oom_kill", "host_oom", PRIMARY,
         r"Out of memory: Killed process \d+|Memory cgroup out of memory: Killed process \d+"
         r"|oom-kill:.*\bpid=\d+|invoked oom-killer"),
    # torch's CPU allocator and the C library refusing memory (a ulimit, a cgroup limit, overcommit off)
    _sig("host_alloc", "host_oom", PRIMARY,
         r"DefaultCPUAllocator: can't allocate memory|Error code 12 \(Cannot allocate memory\)"
         # numpy: "_ArrayMemoryError: Unable to allocate 26.8 GiB for an array with shape (60000, 60000)"
         r"|Unable to allocate [\d.]+ [KMGTP]?i?B for an array"),
    # --- GPU memory ----------------------------------------------------------------------------
    _sig("cuda_oom", "cuda_oom", PRIMARY,
         r"CUDA out of memory|(?<!exceptions\.)(?:torch\.)?(?:cuda\.)?OutOfMemoryError\b|CUBLAS_STATUS_ALLOC_FAILED"
         r"|HIP out of memory|cudaErrorMemoryAllocation|out of memory \(CUDA\)"
         # vLLM's cumem allocator (sleep mode) and the C++ allocator print "CUDA Error: out of memory at file:line"
         r"|CUDA [Ee]rror: out of memory|cuda runtime error \(2\) : out of memory"
         # the driver API's own error through Triton's launcher (triton/backends/nvidia/driver.c gpuAssert:
         # "Triton Error [CUDA]: %s"; ROCm's: "Triton Error [HIP]:  Code: %d, Messsage: %s") and through torch's
         # driver calls (C10_CUDA_DRIVER_CHECK: "CUDA driver error: out of memory", expandable segments)
         r"|Triton Error \[(?:CUDA|HIP)\]: +(?:Code: \d+, Mess+age: )?out of memory|CUDA driver error: out of memory"),
    # --- inference engine memory configuration ---------------------------------------------------
    _sig("vllm_kv_cache", "inference_memory_config", PRIMARY,
         r"No available memory for the cache blocks|is larger than the maximum number of tokens that can "
         r"be stored in KV cache|insufficient KV cache|Not enough memory\. Please try to (?:increase|decrease) "
         r"--mem-fraction-static|max_total_num_tokens=\S+ is (?:too small|smaller)"
         # vLLM V1: "To serve at least one request with the models's max seq len (N), (X GiB KV cache is
         # needed, which is larger than the available KV cache memory (Y GiB)"
         r"|To serve at least one request with the models?'s? max seq len"
         r"|KV cache is needed, which is larger than the available KV cache memory"
         r"|Free memory on device .{0,40}on startup is less than desired GPU memory utilization"
         # vLLM's CPU worker (vllm/v1/worker/cpu_worker.py determine_available_memory): "Available memory on
         # node 0 (20.14/23.54 GiB) on kv cache allocation is less than requested memory for kv (4000.0 GiB)"
         r"|on kv cache allocation is less than requested memory for kv"),
    # --- disk (before NCCL: NCCL WARNs about /dev/shm carry "No space left on device") -----------
    _sig("disk_full", "disk_full", PRIMARY,
         r"No space left on device|\[Errno 28\]|StorageFull|Disk quota exceeded|\[Errno 122\]|ENOSPC"),
    _sig("port_in_use", "port_in_use", PRIMARY,
         r"Address already in use|\[Errno 98\]|\[Errno 48\]|EADDRINUSE|address already in use"
         r"|port \d+ is (?:already )?in use|is already in use by another process"),
    # --- native crashes -----------------------------------------------------------------------
    _sig("segfault", "segfault", PRIMARY,
         r"Fatal Python error: Segmentation fault|\*\*\* SIGSEGV received|Segmentation fault \(core dumped\)"
         r"|Segfault encountered|SIGSEGV\(11\)|received signal SIGSEGV|Bus error \(core dumped\)"),
    # --- CUDA ---------------------------------------------------------------------------------
    _sig("cuda_error", "cuda_error", PRIMARY,
         r"CUDA error: (?!out of memory)|Triton Error \[(?:CUDA|HIP)\]: |CUDA driver error: (?!out of memory)"
         r"|device-side assert triggered|cudaErrorIllegalAddress|CUDNN_STATUS_(?!SUCCESS)\w+"
         r"|CUBLAS_STATUS_(?!SUCCESS|ALLOC_FAILED)\w+|an illegal memory access was encountered"
         r"|CUDA driver initialization failed|no CUDA-capable device is detected|Xid \d+"
         # the kernel log of the NVIDIA driver: "NVRM: Xid (PCI:0000:01:00): 62, ..."
         r"|\bXid \([^)]*\): \d+"
         # a device-side assertion as the kernel prints it: "Indexing.cu:1231: f: block: [31,0,0] ... Assertion `x` failed."
         r"|\.cu:\d+: .{0,200}\bAssertion `[^`]+`"),
    # CUDA's note under every CUDA error ("CUDA kernel errors might be asynchronously reported at some
    # other API call ... CUDA_LAUNCH_BLOCKING=1"): it says how errors are reported, not which one;
    # it names a failure only where the log shows nothing else.
    _sig("cuda_boilerplate", "cuda_error", WRAPPER, r"CUDA kernel errors might be asynchronously reported"),
    # torch's DataLoader reports a worker's death by signal: "DataLoader worker (pid 2498) is killed by
    # signal: Killed." (the OOM killer's SIGKILL, most often)
    _sig("dataloader_signal", "killed", SIGNAL, r"DataLoader worker \(pid \d+\) is killed by signal: (?:Killed|Terminated)"),
    # --- distributed --------------------------------------------------------------------------
    _sig("nccl_timeout", "nccl_timeout", COLLATERAL,
         # "[Rank 3] Watchdog caught collective operation timeout: ..." however short the line was cut: the
         # watchdog catches nothing else
         r"Watchdog caught collective\b|WorkNCCL\(SeqNum=\d+.*\) ran for \d+ milliseconds"
         r"|collective operation timeout|NCCL timeout"),
    _sig("watchdog", "watchdog_timeout", COLLATERAL,
         r"Heartbeat monitor timed out|watchdog got stuck for \d+ seconds|Scheduler watchdog timeout"
         r"|[Ww]atchdog timeout \(self\.watchdog_timeout|RPC call to \w+ timed out"),
    # NCCL's own failures. "NCCL WARN" alone is not one: NCCL warns about a missing plugin or
    # libibverbs on healthy runs; a WARN that reports a failed call or a closed peer is.
    _sig("nccl_error", "nccl_error", COLLATERAL,
         r"NCCL error|ncclUnhandledCudaError|ncclInternalError|ncclSystemError|ncclInvalidUsage"
         r"|ncclRemoteError|DistBackendError|NCCL communicator was aborted"
         r"|NCCL WARN (?!.*(?:Failed to open lib|libnccl-net|NET/Plugin))"
         r".*(?:[Ff]ailed|[Ee]rror|closed by remote peer|Broken pipe|timed out)"
         # NCCL's trace of a failed call returning up its stack, "NCCL WARN init.cc:1815 -> 5" (a result code
         # other than ncclSuccess: src/include/checks.h NCCLCHECK's "%s:%d -> %d")
         r"|NCCL WARN \S+:\d+ -> [1-9]\b"),
    # The process group's watchdog taking the process down (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:
    # "Some NCCL operations have failed or timed out ...", "To avoid data inconsistency, we are taking the
    # entire process down.", "Process group watchdog thread terminated with exception: ...", "Exception (either
    # an error before or asynchronously reported by NCCL) in the watchdog", "Terminating the process after
    # attempting to dump debug info, due to collective timeout or exception"; the same from HCCL, XCCL, CNCL):
    # an NCCL failure whose kind the watchdog's own line says where it is in the log (before or after these,
    # or cut away). Any of these cut mid-phrase still says it.
    _sig("collective_teardown", "nccl_error", COLLATERAL,
         r"Some [NHXC]CCL operations have failed|To avoid (?:data|this) inconsistency, we"
         r"|(?:Process group|NCCL) watchdog thread terminated|reported by NCCL\) in the watchdog"
         r"|Terminating the process after attempting to dump debug info"),
    _sig("dist_timeout", "distributed_timeout", COLLATERAL,
         r"DistStoreError|DistNetworkError|Timed out after \d+ seconds waiting for (?:clients|workers)"
         r"|The client socket has timed out|Socket Timeout|RendezvousTimeoutError|wait timeout after \d+ms"
         # gloo: "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete"
         r"|Timed out waiting \d+ms for (?:send|recv) operation|socket timed out after \d+ms"
         r"|Application timeout caused pair closure"
         # gloo's monitored barrier: "Rank 1 failed to pass monitoredBarrier in 4000 ms"
         r"|failed to pass monitoredBarrier"),
    # gloo: a peer's socket closed under a collective ("[gloo/transport/tcp/pair.cc:553] Connection
    # closed by peer [127.0.0.1]:6293. This is typically caused by a remote worker crashing"): it only
    # points at another rank's death, which torchrun's root-cause block or that rank's log names
    # The same from the reading side: "[gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:44234:
    # Connection reset by peer. This is typically caused by a remote worker hanging or bugs" (the peer
    # aborted: torchrun's root cause names it)
    _sig("gloo_peer_closed", "distributed_timeout", WRAPPER,
         r"\] Connection closed by peer|pair\.cc:\d+\] Read error \S+: Connection reset by peer"),
    # c10d's TCPStore client could not reach the store: torch logs it at warning level while it retries
    # ("[W socket.cpp:558] [c10d] The client socket has failed to connect to ... (errno: 110 - Connection
    # timed out)") and at error level when it gives up ("... to any network address"). "errno: 99 -
    # Cannot assign requested address" is the harmless IPv6 probe of healthy runs, not this.
    _sig("c10d_connect", "distributed_timeout", COLLATERAL,
         r"The client socket has failed to connect to (?:any network address|.*\(errno: 110 - Connection timed out\))",
         weak=True),
    # torchelastic's failure entry cut to its last lines ("traceback : Signal 11 (SIGSEGV) received by PID
    # 36206", torch/distributed/elastic/multiprocessing/errors): the block's own parse names the rank
    # where the block is whole (the engine drops this line then)
    _sig("elastic_segv", "segfault", SIGNAL, r"^traceback\s*: Signal (?:11 \(SIGSEGV\)|7 \(SIGBUS\)) received by PID"),
    # An abort is usually the last act of something printed before it (an NCCL watchdog, a C++
    # exception), so it ranks below collective failures.
    _sig("fatal_python", "fatal_python_error", SIGNAL,
         r"Fatal Python error: (?!Segmentation fault)|terminate called (?:after throwing|without an active)"
         r"|SIGABRT\(6\)|Aborted \(core dumped\)|^Aborted \(Signal sent by"
         # absl's failure signal handler in Ray's workers: "*** SIGABRT received at time=1744106512 on cpu 176 ***"
         r"|\*\*\* SIGABRT received at time="),
    # `python -m pkg.mod` with the package missing prints no traceback, only this line; a wrong
    # interpreter or an unactivated virtualenv fails like this on every attempt.
    _sig("module_not_found", "python_exception", PRIMARY,
         r"Error while finding module specification for '[^']+' \(ModuleNotFoundError|"
         r"^(?:/\S+: )?No module named [\w.]+$|^\S*python[\d.]*: No module named "),
    # --- deaths by signal as a shell or a launcher reports them --------------------------------
    # bash: "./train.sh: line 1:  7364 Killed   python3 train.py", "[1]+  Killed   python train.py",
    # or the word alone for a foreground job.
    _sig("shell_killed", "killed", SIGNAL,
         rf"^(?:\S+: line \d+: +\d+ +|\[\d+\][+-]? +)(?:{_KILLED_ALT})(?: +\S.*)?$|^\**(?:{_KILLED_ALT})\**$"),
    # bash's job report of other deaths by signal: "bash: line 1: 13999 Aborted   python train.py",
    # "./run.sh: line 3: 812 Segmentation fault (core dumped) python ..."
    _sig("shell_signal", "fatal_python_error", SIGNAL,
         r"^\S+: line \d+: +\d+ +Aborted(?: \(core dumped\))? +\S"),
    _sig("shell_segv", "segfault", PRIMARY,
         r"^\S+: line \d+: +\d+ +(?:Segmentation fault|Bus error)(?: \(core dumped\))? +\S"),
    # Slurm ending a step, read from the log alone (supervisor/diagnosis/slurm.py refines an exit whose
    # status is known): srun's "<node>: task R: Killed" / "Terminated" (src/srun/launch plugin
    # _task_finish), slurmstepd's "*** STEP J.S ON <node> CANCELLED AT <time> [DUE TO TIME LIMIT] ***"
    # (scancel, the time limit, a node failure) and srun's "Node failure on <node>": the tasks were
    # killed from outside, whatever they printed before
    # slurmstepd could not start the step's program ("slurmstepd-hq1: error: execve(): /opt/x/bin/python3: No
    # such file or directory", src/slurmd/slurmstepd/exec_wait / task.c): the cause, whatever srun says next
    _sig("slurm_execve", "unknown", PRIMARY, r"slurmstepd(?:-\S+)?: error: execve\(\): "),
    _sig("slurm_end", "killed", SIGNAL,
         r"srun: error: [^\s:]+: tasks? [\d,-]+: (?:Killed|Terminated)\s*$"
         r"|\*\*\* (?:STEP|JOB) \S+ ON \S+ CANCELLED AT |srun: error: Node failure on \S+"),
    # srun's report of a task that exited non-zero without saying why ("srun: error: hq1: task 0: Exited with
    # exit code 3"): a failure, cause unknown; any message the task printed outranks it
    _sig("slurm_task_failed", "unknown", WRAPPER, r"^srun: error: [^\s:]+: tasks? [\d,-]+: Exited with exit code [1-9]"),
    # --- inference engine death ---------------------------------------------------------------
    _sig("engine_dead", "inference_engine_dead", WRAPPER,
         r"EngineDeadError|AsyncEngineDeadError|EngineCore encountered (?:an issue|a fatal error)"
         r"|Engine core proc \S+ died unexpectedly|Received sigquit from a child proces"
         r"|Got fatal signal from worker processes|MulitprocExecutor got (?:SIGQUIT|fatal signal)"
         r"|Engine core initialization failed|EngineCore failed to start"
         # vLLM V0 (MQLLMEngine): "RuntimeError: Engine loop has died", "MQLLMEngine is already dead,
         # terminating server process", "MQEngineDeadError: Engine loop is not running"
         r"|Engine loop has died|MQLLMEngine is already dead|MQEngineDeadError|Engine loop is not running"
         r"|No heartbeat received from MQLLMEngine"
         # vLLM V1 executor: "Worker proc VllmWorker-0 died unexpectedly, shutting down executor."
         r"|Worker proc \S+ died unexpectedly|WorkerProc failed to start|WorkerProc hit an exception"
         # SGLang's scheduler process logs its crash as one record: "Scheduler hit an exception: Traceback
         # (most recent call last): ..."; the engine dies with it even where the traceback is cut off
         r"|Scheduler hit an exception"
         # vLLM V1's engine core, the same way: "EngineCore hit an exception: Traceback (most recent call last):"
         r"|EngineCore hit an exception"
         # SGLang's launcher when a scheduler process died before it was ready ("Rank 0 scheduler is dead. Please
         # check if there are relevant logs."; sglang/srt/entrypoints/engine.py): the EOFError it raises next only
         # points here, and the scheduler's own error is above
         r"|scheduler is dead\. Please check"),
    # --- Ray: an actor or task worker died, and Ray does not know why ----------------------------
    # ActorDiedError / RayActorError "The actor died unexpectedly before finishing this task", "The
    # actor is dead because its worker process has died ... Worker exit type: SYSTEM_ERROR" (or "its
    # owner has died", "its node has died"), WorkerCrashedError, the raylet's "A worker died or was
    # killed while executing a task". Ray lists possible causes (OOM killer, ray stop --force, a
    # crash) without knowing which: below any failure the log states (an OOM, a segfault, a bug).
    _sig("ray_actor_died", "ray_actor_died", SIGNAL,
         r"The actor died unexpectedly before finishing this task|The actor is dead because its \w+"
         r"|The actor died because its node has died|A worker died or was killed while executing (?:a )?task"
         r"|WorkerCrashedError|The worker died unexpectedly while executing this task"
         r"|Worker exit type: (?:UNEXPECTED_SY ?STEM_EXIT|SYSTEM_ERROR)|ActorUnavailableError: The actor \w+ is unavailable"
         r"|NodeDiedError"),
    # --- connections --------------------------------------------------------------------------
    _sig("connection_refused", "connection_refused", COLLATERAL,
         r"ConnectionRefusedError|Connection refused|\[Errno 111\]|All connection attempts failed"
         r"|Cannot connect to host|httpx\.ConnectError|aiohttp\.client_exceptions\.ClientConnectorError"
         r"|NewConnectionError|RemoteDisconnected|Connection aborted|ConnectionResetError"
         r"|server launch failed|Max retries exceeded with url|Connect call failed"
         r"|APIConnectionError|\[WinError 10061\]"
         # a client's logged record: "connection error while generating rollouts", OpenAI's "Connection error."
         r"|\b[Cc]onnection error\b",
         weak=True),
)


# Lines that look like failures but are a normal wait at startup, or scary warnings.
BENIGN = re.compile(
    r"Server is not up yet|was not reached after \d+ seconds|Waiting for (?:the )?(?:inference|server|vLLM)"
    r"|Retrying in [\d.]+ ?s|retrying in [\d.]+|will retry|Waiting for .* to be ready|not ready yet"
    r"|UserWarning|FutureWarning|DeprecationWarning|RuntimeWarning|is deprecated|\[WARNING\].*async_io|NCCL INFO"
    r"|to avoid (?:CUDA )?out of memory|expandable_segments:True to avoid fragmentation\.?$"
    r"|gpu_memory_utilization \(|Ignore(?:d)? leaked shared memory|If you are running out of memory"
)

# A line that says it will try again: a retried connection error is how a client waits.
RETRY_NOTICE = re.compile(r"\b(?:will retry|retrying in [\d.]+ ?s|Retrying in [\d.]+|retry(?:ing)? \(attempt \d+)", re.I)

# A line that says the thing a client was waiting for is now there.
RECOVERED = re.compile(
    r"Inference pool (?:is )?ready|Server is up|server is ready|Application startup complete"
    r"|Uvicorn running on|The server is fired up|SUCCESS|Connected to|connection (?:re)?established"
    r"|is ready\b|Started server process",
    re.IGNORECASE,
)

# Exceptions that only point at an error printed elsewhere.
WRAPPER_TYPES = re.compile(
    r"(?:^|\.)(?:ChildFailedError|EngineDeadError|AsyncEngineDeadError|MQEngineDeadError|RayActorError"
    r"|ActorDiedError|RayTaskError|WorkerFailedError|HydraException|KeyboardInterrupt|SystemExit"
    r"|BrokenProcessPool|CalledProcessError|ProcessRaisedException|ProcessExitedException|ExceptionGroup"
    r"|BaseExceptionGroup"
    r"|CancelledError)$"
)
WRAPPER_MESSAGES = re.compile(
    r"See root cause above|See stack trace \(above\) for the root cause|see root cause above"
    r"|Engine core initialization failed|Worker '[^']+' failed with exit code|Failed core proc"
    r"|Inspect the stacktrace to find the original error"
    r"|DataLoader worker \(pid\(s\) [\d, ]+\) exited unexpectedly"
    # vLLM's executor cancels what was in flight when a worker died: "RuntimeError: cancelled"
    # and relays a worker's exception, printed above it by the worker (vllm/v1/executor/
    # multiproc_executor.py get_response: RuntimeError(f"Worker failed with error '{e}', please check the
    # stack trace above for the root cause")): the worker's own traceback is the failure
    r"|Worker failed with error '"
    r"|^\w*Error: cancelled$"
    # vLLM's engine core after its executor lost a worker (vllm/v1/engine/core.py _handle_client_request:
    # raise RuntimeError("Executor failed.")): the executor's own line names the worker that died
    r"|^\w*Error: Executor failed\.?$"
    # a process manager reporting a child's exit whose own output is above: vLLM's API server and engine managers
    # (vllm/v1/utils.py wait_for_completion_or_failure: "Process ApiServer_0 (PID: 4242) died with exit code 1");
    # SGLang's launcher ("Initialization failed. Please see the error messages above."); vLLM V0's engine
    # ("Engine process failed to start. See stack trace for the root cause.")
    r"|\bProcess \S+ \(PID: \d+\) died with exit code"
    r"|Please see the error messages? above|See (?:the )?stack trace for the root cause"
)
# Tracebacks a program logs and carries on from: SGLang 0.5.23 posts /freeze_gc to its own server after
# warmup and logs any failure with the traceback at warning level (sglang/srt/entrypoints/http_server.py
# _freeze_gc_after_server_warmup: logger.warning("post-warmup freeze_gc failed", exc_info=True)); on CPU
# it is refused at every start. Never the failure.
HANDLED_FUNCS = {"_freeze_gc_after_server_warmup"}
# vLLM's API server asked to stop (SIGTERM/SIGINT: vllm/entrypoints/launchers/launcher.py signal_handler
# logs "[shutdown] API server: shutdown triggered"); the engine client it then stops raises
# EngineDeadError in the output handler, an orderly shutdown's noise unless vLLM says the engine core
# exited on its own ("[shutdown] MPClient: engine core exited unexpectedly", core_client.py)
ORDERLY_SHUTDOWN = re.compile(r"\bAPI server: shutdown triggered")  # the "[shutdown] " tag is stripped as a prefix
UNEXPECTED_EXIT = re.compile(r"exited unexpectedly|died unexpectedly")
SYMPTOM_FUNCS = {"sigquit_handler", "kill_process_tree", "signal_handler", "_sigquit_handler", "sigkill_handler"}

# Launchers that report a child's exit code on one line (the torchelastic block is parsed apart).
# DeepSpeed's launcher: "[ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', ...] exits with return code = -9"
LAUNCHER_EXIT = re.compile(r"\bexits with return code = (?P<code>-?\d+)\s*$")
# A Ray task's failure as the driver or a logger prints it, "RayTaskError(KeyError): ray::Worker.score()
# (pid=30020, ip=10.0.0.1, ...)" or "Execution failed: ray::SearchExecutionWorker.execute() (pid=119104,
# ip=...)", followed by the remote frames: read even where the paste or the tail cut it off before the
# exception line (then the remote frames still say where it failed).
RAY_TASK_HEADER = re.compile(
    # Ray's "Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): ray::WorkerDict.f() (pid=..": a
    # task whose error nobody waited for, printed by the driver when its reference was dropped
    r"(?:RayTaskError(?:\((?P<cause>\w+)\))?: |failed: |Unhandled error \(suppress with [^)]*\): |^)"
    r"(?:\[[\d;]*m)?ray::(?P<task>[\w.<>]+)\(\)(?:\[[\d;]*m)?"
    r" \(pid=(?P<pid>\d+), ip=")
# A record that says a process died and its own error is printed elsewhere (above): the exception its
# launcher raises right after only points there. SGLang: "Rank 0 scheduler is dead. Please check if there are
# relevant logs.", then "Exit code: 1" and a bare EOFError from the pipe the scheduler never wrote to.
POINTS_ABOVE = re.compile(r"scheduler is dead\. Please check|Please check if there are relevant logs")
# Slurm's own daemons and clients talking among themselves ("slurmstepd: error: Failed to send MESSAGE_TASK_EXIT:
# Connection refused" once srun has gone, after a requeue, a preemption or a cancel): their RPCs, never a
# service the program needed.
SLURM_DAEMON = re.compile(r"^(?:slurmstepd|slurmd|srun|salloc|sbatch)(?:-[\w.-]+)?: (?:error|fatal|warning): ")
# Hydra prints this when the task function raised; the traceback follows (or was cut off).
HYDRA_FAILED = re.compile(r"^[`'\"]?Error executing job with overrides: ")

STEP_PATTERNS = (
    # not "Global Step:   0%|" (a progress bar) nor "global_step=3.2e+4" (a float)
    # nor Slurm's step ids ("oom-kill event(s) in step 370626.batch cgroup", "step 12.extern")
    re.compile(r"\b[Ss]tep[\s:=#]*(\d+)(?![\d.]*%|\.\d|\d|\.(?:batch|extern|interactive)\b)"),
    # "global_step=12", "'global_step/max_steps': '5/3766'" (ms-swift), "global_step1428" (DeepSpeed
    # checkpoint folders)
    re.compile(r"\bglobal_step(?:/\w+)?['\"]?(?:[\s:=]+['\"]?)?(\d+)(?![\d.])"),
    # Transformers' checkpoint folders: "Saving model checkpoint to out/checkpoint-500"
    re.compile(r"\bcheckpoint-(\d+)\b"),
)
# A tqdm bar: "  3%|▎         | 10/375 [00:20<12:00,  1.97s/it]". Transformers' Trainer draws its
# training bar without a description; verl names its bar "Training Progress", RLinf "Global Step",
# a hand-written loop often "Training" or "Train". Bars with any other description (Map, Loading
# checkpoint shards, Processed prompts, Capturing CUDA graphs) count data, not training steps.
TQDM_BAR = re.compile(
    r"(?:^|(?<=\s))(?P<desc>[^|%]*?)\s*\d{1,3}%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)\s*\[[^\]]*?(?:it/s|s/it|\?it/s)"
)
TRAINING_BAR_DESC = re.compile(r"^(?:|Training Progress:?|Global Step:?|Train(?:ing)?:?)$")
# A training bar at its total is the last step completed, where the bar names training; a bar with no
# description at its total is more often a finished evaluation or data loop than training.
NAMED_TRAINING_BAR_DESC = re.compile(r"^(?:Training Progress|Global Step|Train(?:ing)?):?$")


_ANY_KEY = re.compile("|".join(re.escape(k) for k in sorted({k for s in SIGNATURES for k in s.keys})))
_SHORTEST_GATE = max(s.short for s in SIGNATURES)


def match_span(text: str) -> tuple[Signature, int] | None:
    """The most specific signature the line matches and where in the line its text starts."""
    low = text.lower()
    short = len(text) <= _SHORTEST_GATE
    if not short and not _ANY_KEY.search(low):
        return None
    for sig in SIGNATURES:
        if len(text) <= sig.short or any(k in low for k in sig.keys):
            m = sig.pattern.search(text)
            if m:
                return sig, m.start()
    return None


def match_line(text: str) -> Signature | None:
    """The most specific signature the line matches, or None."""
    hit = match_span(text)
    return hit[0] if hit else None


def benign_veto(text: str, at: int) -> bool:
    """The line is a scary warning or a startup wait, not a failure: a benign marker that starts at
    or before the failure text (``UserWarning: NCCL error handling is deprecated``). A failure glued
    after unrelated benign text on the same physical line is still a failure."""
    b = BENIGN.search(text)
    return b is not None and b.start() <= at


_CONNECT_TYPES = re.compile(r"(?:^|\.)(?:\w*Connect(?:ion)?(?:Refused)?Error|ConnectTimeout|ClientConnectorError)$")


_RAY_ACTOR_CAUSE = re.compile(
    r"RayTaskError\((?:ActorDiedError|RayActorError|ActorUnavailableError|WorkerCrashedError|NodeDiedError)\)")


def classify_exception(text: str) -> tuple[str, int]:
    """Category and tier for an exception line ``Type: message``."""
    sig = match_line(text)
    typ = text.split(":", 1)[0].strip()
    bare = typ.split("(", 1)[0]
    if re.search(r"(?:^|\.)KeyboardInterrupt$", bare):
        # SIGINT: Ctrl-C, or a launcher or scheduler stopping it: a death by signal, where it was
        return "killed", SIGNAL
    if sig is not None and sig.category == "ray_actor_died":
        # ActorDiedError without a cause Ray could name: the actor's death is what the log says
        return sig.category, sig.tier
    if _RAY_ACTOR_CAUSE.search(typ):
        # "ray.exceptions.RayTaskError(ActorDiedError): ray::Actor.fit() ...": the task failed because
        # an actor it called died, whatever the remote part (often cut off) goes on to say
        return "ray_actor_died", SIGNAL
    if WRAPPER_TYPES.search(bare) or WRAPPER_MESSAGES.search(text):
        # ray.exceptions.RayTaskError(KeyError): the cause is the exception in the parentheses,
        # printed under it with the remote frames.
        return (sig.category if sig else "python_exception"), WRAPPER
    if sig is not None:
        return sig.category, sig.tier
    if re.search(r"MemoryError$", bare):  # MemoryError, numpy's _ArrayMemoryError
        return "host_oom", PRIMARY
    if _CONNECT_TYPES.search(bare):
        return "connection_refused", COLLATERAL
    if re.search(r"(?:^|\.)TimeoutError$", bare) and re.search(r"NCCL|collective|barrier|store", text):
        return "distributed_timeout", COLLATERAL
    if re.search(r"(?:^|\.)(?:TimeoutError|TimeoutExpired)$", bare):
        # a wait that ran out: the consequence of whatever it waited for (an NCCL watchdog's timeout
        # printed next, a peer that died), which outranks it when the log shows one
        return "python_exception", COLLATERAL
    return "python_exception", PRIMARY
