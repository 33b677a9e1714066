"""A GPU memory holder for tests/gpu/run_gpu_checks.sh: a real CUDA process that takes and frees memory.

    holder.py --steps 2,6,1,8,0,4 --step-s 8 --log FILE   # reserve each figure (GiB) in turn, log what it holds
    holder.py --hold 10                                    # take 10 GiB and keep it
    holder.py --hold 10 --escapee 2 --escapee-log FILE     # ... and leave a grandchild holding 2 GiB behind

Every change is logged as a JSON line ``{"t": unix time, "pid", "reserved_mb", "allocated_mb"}``
(``torch.cuda.memory_reserved`` / ``memory_allocated`` of this process), so that what NVML reported for
the process can be held against what the process itself had reserved at that instant.

The escapee (``--escapee GIB``) is the grandchild a careless launcher leaves behind: it forks twice,
calls setsid, moves itself out of the attempt's cgroup where it can (root, cgroup v2) and holds its
memory, keeping the environment it inherited (so rlsup's run marker proves it is this run's).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

MIB = 1 << 20


def log(path: str | None, **fields: object) -> None:
    line = json.dumps({"t": time.time(), "pid": os.getpid(), **fields})
    print(line, flush=True)
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def reserve(torch, gib: float) -> object:
    """A tensor of ``gib`` GiB on the GPU (None for 0), touched so that the memory is really taken."""
    if gib <= 0:
        return None
    t = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda")
    if hasattr(t, "fill_"):
        t.fill_(1)
    torch.cuda.synchronize()
    return t


def held(torch, path: str | None, what: str) -> None:
    log(path, what=what, reserved_mb=torch.cuda.memory_reserved() / MIB,
        allocated_mb=torch.cuda.memory_allocated() / MIB)


def escape_cgroup() -> str:
    """Move this process to the root cgroup (v2) if it can: out of reach of the attempt's cgroup.kill."""
    try:
        with open("/proc/self/cgroup") as f:
            before = f.read().strip()
        with open("/sys/fs/cgroup/cgroup.procs", "w") as f:
            f.write(str(os.getpid()))
        return f"moved from {before} to the root cgroup"
    except OSError as exc:
        return f"stayed in its cgroup ({exc.strerror})"


class _Host:
    """Host memory in place of torch's CUDA allocator (RLSUP_HOLDER_HOST=1): tests this script's own
    steps on a machine without a GPU (tests/gpu/test_gpu_checks.py); never used for a figure."""

    uint8 = "uint8"

    def __init__(self) -> None:
        self.cuda = self
        self.held = 0

    def is_available(self) -> bool:
        return True

    def init(self) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def empty(self, n: int, dtype: object = None, device: object = None) -> bytearray:
        self.held = n
        return bytearray(n)

    def memory_reserved(self) -> int:
        return self.held

    memory_allocated = memory_reserved


def escapee(gib: float, path: str | None) -> None:
    """Fork twice and setsid; the grandchild execs a fresh holder of ``gib`` GiB (CUDA cannot be used in a
    forked child of a process that has initialised it) that holds until killed. Returns in the caller once
    the grandchild holds its memory."""
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.close(r)
            os.set_inheritable(w, True)
            os.execv(sys.executable, [sys.executable, __file__, "--as-escapee", str(gib), "--notify-fd", str(w),
                                      *(["--escapee-log", path] if path else [])])
        os._exit(0)
    os.close(w)
    os.read(r, 1)  # the escapee holds its memory
    os.close(r)


def as_escapee(gib: float, path: str | None, notify_fd: int) -> None:
    """The grandchild itself: ignores the polite signals, leaves the attempt's cgroup, holds, says so."""
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    where = escape_cgroup()
    torch = _Host() if os.environ.get("RLSUP_HOLDER_HOST") == "1" else __import__("torch")
    keep = reserve(torch, gib)
    log(path, what="escapee holds", gib=gib, cgroup=where, reserved_mb=torch.cuda.memory_reserved() / MIB)
    os.write(notify_fd, b"x")
    os.close(notify_fd)
    while keep is not None:
        time.sleep(3600)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", default=None, help="GiB to hold in turn, comma-separated")
    ap.add_argument("--step-s", type=float, default=8.0)
    ap.add_argument("--hold", type=float, default=None, help="GiB to take and keep")
    ap.add_argument("--escapee", type=float, default=None, help="GiB a grandchild left behind holds")
    ap.add_argument("--escapee-log", default=None)
    ap.add_argument("--as-escapee", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--notify-fd", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--log", default=None)
    ap.add_argument("--gpu-memory-utilization", default=None, help="ignored: read by `rlsup check`")
    ap.add_argument("--signals-log", default=None,
                    help="a bystander: log every catchable signal to this file and carry on")
    args = ap.parse_args()
    if args.as_escapee is not None:
        as_escapee(args.as_escapee, args.escapee_log, args.notify_fd)
        return 0
    if args.signals_log:
        def note(signum: int, _frame: object) -> None:
            with open(args.signals_log, "a") as f:
                f.write(f"{time.time()} {signal.Signals(signum).name}\n")

        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT):
            signal.signal(s, note)
    torch = _Host() if os.environ.get("RLSUP_HOLDER_HOST") == "1" else __import__("torch")
    if not torch.cuda.is_available():
        print("holder: no CUDA device", file=sys.stderr)
        return 3
    torch.cuda.init()
    torch.empty(1, device="cuda")  # the CUDA context, before anything is measured
    held(torch, args.log, "context")
    if args.escapee:
        escapee(args.escapee, args.escapee_log)
    if args.steps:
        for gib in [float(x) for x in args.steps.split(",")]:
            keep = reserve(torch, gib)
            held(torch, args.log, f"hold {gib:g} GiB")
            time.sleep(args.step_s)
            del keep
            torch.cuda.empty_cache()
        held(torch, args.log, "done")
        return 0
    keep = reserve(torch, args.hold or 0)
    held(torch, args.log, f"hold {args.hold or 0:g} GiB")
    while True:
        time.sleep(3600)
        del keep


if __name__ == "__main__":
    raise SystemExit(main())
