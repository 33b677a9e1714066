"""Write numbered lines to stdout and the same bytes to a copy of our own (the reference a test
compares the supervisor's log with).

Each line is ``a<ATTEMPT> <N:09d> <padding>``; with ``--steps K`` every K-th line is also a progress
line (``Step S/T``). Lines go to stdout first and to ``--copy`` after, so a process killed between
the two leaves the log a superset of the copy, never the other way round.

    numbered.py --copy FILE [--count N (0: forever)] [--rate LINES_PER_S (0: as fast as possible)]
                [--batch B] [--pad BYTES] [--vary] [--steps K] [--total-steps T] [--until FILE]

With ``--until FILE`` it stops (exit 0) once FILE exists.
"""
import argparse
import os
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--copy", required=True)
p.add_argument("--count", type=int, default=0)
p.add_argument("--rate", type=float, default=0.0)
p.add_argument("--batch", type=int, default=100)
p.add_argument("--pad", type=int, default=60)
p.add_argument("--vary", action="store_true", help="line lengths from 12 to ~600 bytes")
p.add_argument("--steps", type=int, default=0)
p.add_argument("--total-steps", type=int, default=1_000_000)
p.add_argument("--until")
a = p.parse_args()

attempt = os.environ.get("RLSUP_ATTEMPT", "0")
copy = os.open(a.copy, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
pad = "x" * 600


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def line(i: int) -> str:
    n = (i * 7919) % 590 if a.vary else a.pad
    s = f"a{attempt} {i:09d} {pad[:n]}"
    if a.steps and i % a.steps == 0:
        s += f" Step {i // a.steps}/{a.total_steps}"
    return s + "\n"


i = 0
start = time.monotonic()
while a.count == 0 or i < a.count:
    if a.until and os.path.exists(a.until):
        break
    n = a.batch if a.count == 0 else min(a.batch, a.count - i)
    block = "".join(line(i + k) for k in range(1, n + 1)).encode()
    write_all(1, block)
    write_all(copy, block)
    i += n
    if a.rate:
        ahead = i / a.rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
os.close(copy)
sys.exit(0)
