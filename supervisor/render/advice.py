"""What to do next after a failure, per diagnosis category or flag type: the incident report and the
TUI's failure screen both give this advice. Plain data, no imports, so any front end may use it."""

# What to do next, per diagnosis category or flag type. The first line that applies is enough to
# start; {name} is the component, {loc} the failing location.
NEXT_STEPS: dict[str, str] = {
    "cuda_oom": "GPU out of memory: lower the batch / micro-batch size or sequence length, enable "
                "gradient checkpointing, or lower the inference engine's memory fraction "
                "(vLLM `--gpu-memory-utilization`, SGLang `--mem-fraction-static`) if it shares the GPU.",
    "host_oom": "Host out of memory: lower dataloader workers / rollout buffer sizes, or give the job more RAM; "
                "check the memory figures below and any `memory_growth` flag for a leak.",
    "killed": "Killed by a signal nobody in the run sent: check the kernel log (`dmesg`), the job scheduler "
              "(preemption, time limit) and the container's memory limit.",
    "segfault": "Native crash: note the library in the stack, check CUDA / driver / library versions match; "
                "rerun once to see whether it is deterministic.",
    "nccl_timeout": "Collective timeout: usually another rank died or stalled first; look for that rank's own "
                    "error above. Raise the NCCL timeout only if a step is legitimately slow.",
    "nccl_error": "NCCL error: check the network interface (`NCCL_SOCKET_IFNAME`), `NCCL_DEBUG=INFO` output "
                  "and that every rank sees the same GPUs.",
    "distributed_timeout": "Rendezvous / store timeout: a peer never arrived; check that every node started "
                           "and can reach MASTER_ADDR:MASTER_PORT.",
    "connection_refused": "Connection refused: the service {name} talks to was down; check its dependency's "
                          "state and log first (restart the dependency, not {name}).",
    "inference_engine_dead": "The inference engine died: read the engine's own log for the root cause "
                             "(often an OOM or a bad model config), then restart the inference component.",
    "inference_memory_config": "Inference memory config: raise `--gpu-memory-utilization` / "
                               "`--mem-fraction-static` or lower `--max-model-len` / max tokens.",
    "ray_actor_died": "A Ray actor or worker died and Ray does not say why: read that worker's log "
                      "(`ray logs worker-*`) and the node's kernel log for the OOM killer before restarting {name}.",
    "watchdog_timeout": "Watchdog timeout: a worker hung; look for a stuck collective or a dead peer just "
                        "before it.",
    "cuda_error": "CUDA error: rerun with `CUDA_LAUNCH_BLOCKING=1` to get the failing kernel; an illegal "
                  "address is usually an indexing bug, an Xid a hardware/driver problem.",
    "fatal_python_error": "The interpreter aborted: the lines before the abort name the C++ exception; check "
                          "library versions.",
    "disk_full": "Disk full: free space under the checkpoint / output directories (old checkpoints), then "
                 "`rlsup resume {name}`.",
    "port_in_use": "Port in use: a process from an earlier run still holds it (`ss -ltnp`); end it or change "
                   "the port.",
    "python_exception": "Fix the exception{at}, then `rlsup start {name}` (or `rlsup resume {name}`).",
    "unknown": "No failure text in the log: read the end of `logs/{name}.log`; the process may have exited "
               "without printing why.",
    "repeated_error": "The same error on consecutive attempts is a deterministic bug: fix the code{at}, then "
                      "`rlsup start {name}`; restarting will not help.",
    "step_crash": "Crashes at the same step: inspect the data/batch at that step, or resume from an earlier "
                  "checkpoint with `rlsup resume {name} --step N`.",
    "crash_loop": "{name} dies within seconds of starting: run its command by hand to see the startup error "
                  "(missing module, bad argument, wrong environment).",
    "stall": "{name} stopped making progress: check what it waits on (its dependencies) and `rlsup logs {name}`.",
    "dependency_down": "Bring the dependency back first; {name} recovers once it can connect.",
    "memory_growth": "Memory grows with steps: look for tensors kept across steps (losses appended without "
                     "`.item()`/`.detach()`), growing caches or lists.",
    "false_success": "{name} exited 0 before its last step: check for an early `return`/`break` or a data "
                     "source that ran out.",
    "disk_full_flag": "Free disk space, then resume.",
}
