"""What to do next about a diagnosis, in one sentence: the message first, then the category."""

from __future__ import annotations

import re

# A write the disk refused without an errno: torch's zip writer ("PytorchStreamWriter failed writing file ...:
# file write failed", "unexpected pos X vs Y" at the end of the file) and C++ streams ("basic_ios::clear: iostream
# error"), as real logs of full disks and quotas show them (pytorch/pytorch#156955, verl-project/verl#3346).
WRITE_FAILED = re.compile(r"PytorchStreamWriter failed writing file|file write failed|unexpected pos \d+ vs \d+"
                          r"|basic_ios::clear: iostream error")

# Specific wordings whose remedy differs from their category's.
_BY_MESSAGE: tuple[tuple[frozenset[str], re.Pattern[str], str], ...] = (
    (frozenset({"inference_memory_config"}), re.compile(r"Free memory on device .* is less than desired GPU memory utilization"),
     "Another process holds GPU memory at startup (often a previous run's engine): free the GPU or lower "
     "--gpu-memory-utilization."),
    (frozenset({"inference_memory_config"}), re.compile(r"KV cache|cache blocks|mem-fraction-static|max_total_num_tokens"),
     "The KV cache does not fit: raise --gpu-memory-utilization (SGLang --mem-fraction-static) or lower "
     "--max-model-len."),
    (frozenset({"python_exception", "disk_full"}), WRITE_FAILED,
     "Writing the checkpoint failed: check free space and quota on the output disk."),
    (frozenset({"disk_full"}), re.compile(r"/dev/shm"),
     "Shared memory (/dev/shm) is full: give the container a larger --shm-size."),
    (frozenset({"host_oom"}), re.compile(r"ray\.exceptions\.OutOfMemoryError|killed due to memory pressure|running low on memory"),
     "Ray killed a worker for host memory: fewer workers per node, smaller rollout buffers, or more RAM."),
    (frozenset({"watchdog_timeout"}), re.compile(r"Heartbeat monitor timed out|watchdog got stuck"),
     "NCCL's watchdog hung: a collective never completed; look for the rank that died or stalled first."),
    (frozenset({"nccl_error"}), re.compile(r"unhandled cuda error|ncclUnhandledCudaError|Cuda failure", re.IGNORECASE),
     "A CUDA call failed inside NCCL, not the network: check the GPU (nvidia-smi, Xid lines in dmesg), the driver "
     "and CUDA versions, and whether a peer crashed first."),
    (frozenset({"cuda_error"}), re.compile(r"\bXid \("),
     "The GPU driver reported an Xid error: check nvidia-smi and dmesg on that node; the GPU may need a reset "
     "before anything runs on it again."),
    (frozenset({"distributed_timeout"}), re.compile(r"Timed out waiting \d+ms for (?:send|recv)|socket timed out|DistStoreError"
                                                     r"|Socket Timeout|failed to connect to|monitoredBarrier"),
     "A peer never answered: check that every rank started and can reach MASTER_ADDR:MASTER_PORT."),
)

_BY_CATEGORY: dict[str, str] = {
    "cuda_oom": "Lower the batch or sequence length, or the inference engine's GPU memory share if it shares the GPU.",
    "host_oom": "Host RAM ran out: fewer dataloader workers or smaller buffers, or more memory.",
    "killed": "Something outside the process killed it: check dmesg for the OOM killer and the scheduler's limits.",
    "segfault": "Native crash in the library named by the stack: check CUDA, driver and library versions.",
    "nccl_timeout": "A collective timed out: find the rank that failed or stalled first.",
    "nccl_error": "NCCL failed: check NCCL_SOCKET_IFNAME / the network, and that no peer died first.",
    "distributed_timeout": "A peer never arrived: check that every rank started and can reach the master.",
    "connection_refused": "The service it talks to is down: look at that component's log first.",
    "inference_engine_dead": "The inference engine died: its own log above names the cause.",
    "inference_memory_config": "The engine's memory settings do not fit this GPU: adjust them and restart.",
    "ray_actor_died": "Ray does not know why this actor died: read its worker's log and the node's kernel log "
                      "(dmesg, for the OOM killer) before restarting.",
    "watchdog_timeout": "A worker hung: look for a stuck collective or a dead peer just before.",
    "cuda_error": "Rerun with CUDA_LAUNCH_BLOCKING=1 to find the failing kernel.",
    "fatal_python_error": "The interpreter aborted: the lines just before name the C++ exception.",
    "disk_full": "Free space on the output or temp disk (or raise the quota), then resume.",
    "port_in_use": "Another process holds the port: stop it (often a previous run) or pick another port.",
    "python_exception": "A bug or bad input at the location shown; it will recur on restart until fixed.",
    "unknown": "No known failure in the log: read the lines before the exit.",
}
# Said instead of "it will recur on restart until fixed" of a failure that did not recur after its restart.
NO_RECURRENCE = {
    _BY_CATEGORY["python_exception"]: "A bug or bad input at the location shown; it did not recur after the restart "
                                      "(a rare path, or input that was not met again): fix it before it does.",
}


_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


def hint_for(category: str, text: str = "") -> str:
    if category == "none":
        return ""
    m = _MISSING_MODULE.search(text)
    if m:  # the package, and the rlsup extra that installs it where there is one
        from ..records.extras import install_hint

        if how := install_hint(m.group(1)):
            return f"Install the missing package: {how}"
    return next((hint for cats, pat, hint in _BY_MESSAGE if category in cats and text and pat.search(text)),
                _BY_CATEGORY.get(category, ""))
