"""The workloads the benchmarks run, the same script under every supervisor (and alone).

    writer.py lines N STAMP SETTLE [UNTIL]  N lines of 90 bytes, one write per line when unbuffered
                                            (every 1000th a progress line), as tests/scripts/flood.py
    writer.py blocks N STAMP SETTLE         N blocks of 64 KiB (512 lines of 128 bytes), one write each
    writer.py biglines N STAMP SETTLE       N lines of 1 MiB (newline included), one write each
    writer.py chatty NAME RATE SECONDS GO HOLD
                                            waits for the file GO (it holds the start time), then writes
                                            RATE lines/s (~100 bytes, one write each, on a fixed schedule)
                                            for SECONDS, then `END NAME COUNT t=WALLTIME`, then sleeps HOLD
    writer.py fill NAME N HOLD              N lines of ~100 bytes, then `FILLED NAME`, then sleeps HOLD
    writer.py timedflood GO SECONDS STAMP   waits for GO, floods 90-byte lines (one write each) until
                                            SECONDS after the start time; the count goes to STAMP
    writer.py idle                          sleeps

With UNTIL, the writer stays alive after its stamp until the file UNTIL exists (at most 120 s), so that a
benchmark can read its supervisor's CPU once the supervisor has caught up and before the exit is handled.
STAMP receives JSON: the writer's own lifetime (first write to the last write returned), measured
with perf_counter after SETTLE seconds of rest, so interpreter start-up and the supervisor's own
start-up work are outside the timed part in every setup alike; and the writer's CPU (cpu_s).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

BLOCK = 64 << 10
BIG = 1 << 20


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view):]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _stamp(path: str, **kw: float) -> None:
    with open(path, "w") as f:
        json.dump({**kw, "cpu_s": _cpu()}, f)


def lines_content(n: int):
    """What ``lines`` writes, line by line (the benchmark rebuilds it to check the log)."""
    pad = "x" * 70
    for i in range(1, n + 1):
        if i % 1000 == 0:
            yield f"Step {i // 1000}/{n // 1000} | loss 0.{i % 997:03d} | reward 0.5 {pad[:50]}\n"
        else:
            yield f"line {i:09d} {pad} end\n"


def block(i: int) -> bytes:
    head = f"block {i:08d} ".encode()
    line = b"b" * 127 + b"\n"
    first = head + b"b" * (127 - len(head)) + b"\n"
    return first + line * (BLOCK // 128 - 1)


def bigline(i: int) -> bytes:
    head = f"big {i:06d} ".encode()
    return head + b"y" * (BIG - 1 - len(head)) + b"\n"


def wait_go(go: str) -> float:
    while True:
        try:
            with open(go) as f:
                txt = f.read().strip()
            if txt:
                return float(txt)
        except (OSError, ValueError):
            pass
        time.sleep(0.05)


def main(argv: list[str]) -> None:
    mode = argv[1]
    if mode in ("lines", "blocks", "biglines"):
        n, stamp, settle = int(argv[2]), argv[3], float(argv[4])
        time.sleep(settle)
        t0 = time.perf_counter()
        if mode == "lines":
            w = sys.stdout.write
            for text in lines_content(n):
                w(text)
            sys.stdout.flush()
        elif mode == "blocks":
            for i in range(n):
                _write_all(block(i))
        else:
            for i in range(n):
                _write_all(bigline(i))
        t1 = time.perf_counter()
        _stamp(stamp, seconds=t1 - t0)
        if len(argv) > 5:
            give_up = time.monotonic() + 120
            while not os.path.exists(argv[5]) and time.monotonic() < give_up:
                time.sleep(0.01)
    elif mode == "chatty":
        name, rate, seconds, go, hold = argv[2], float(argv[3]), float(argv[4]), argv[5], float(argv[6])
        start = wait_go(go)
        total = int(rate * seconds)
        pad = "x" * 100
        prefix = f"{name} line "
        for i in range(total):
            due = start + i / rate
            delay = due - time.time()
            if delay > 0:
                time.sleep(delay)
            text = f"{prefix}{i:07d} {pad}"[:99] + "\n"
            os.write(1, text.encode())
        os.write(1, f"END {name} {total} t={time.time():.6f}\n".encode())
        time.sleep(hold)
    elif mode == "fill":
        name, n, hold = argv[2], int(argv[3]), float(argv[4])
        pad = "z" * 100
        w = sys.stdout.write
        for i in range(n):
            w(f"{name} fill {i:07d} {pad}"[:99] + "\n")
        w(f"FILLED {name}\n")
        sys.stdout.flush()
        time.sleep(hold)
    elif mode == "timedflood":
        go, seconds, stamp = argv[2], float(argv[3]), argv[4]
        start = wait_go(go)
        delay = start - time.time()
        if delay > 0:
            time.sleep(delay)
        end = start + seconds
        pad = "x" * 70
        w = sys.stdout.write
        i = 0
        now = time.time()
        while now < end:
            for _ in range(256):
                i += 1
                w(f"line {i:09d} {pad} end\n")
            now = time.time()
        sys.stdout.flush()
        _stamp(stamp, lines=i, seconds=now - start)
    elif mode == "idle":
        time.sleep(1e6)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv)
