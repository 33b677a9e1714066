"""Print some lines, then exit with a code. With --fail-times K and --count FILE: fail K times, then succeed."""
import argparse
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--code", type=int, default=1)
p.add_argument("--lines", type=int, default=3)
p.add_argument("--sleep", type=float, default=0.0)
p.add_argument("--count")
p.add_argument("--fail-times", type=int, default=-1)
a = p.parse_args()
n = 0
if a.count:
    try:
        n = int(open(a.count).read() or 0)
    except FileNotFoundError:
        n = 0
    open(a.count, "w").write(str(n + 1))
for i in range(a.lines):
    print(f"Step {i + 1}/{a.lines} | loss {1.0 / (i + 1):.3f}", flush=True)
time.sleep(a.sleep)
if a.fail_times >= 0 and n >= a.fail_times:
    print("done", flush=True)
    sys.exit(0)
print("crashing now", file=sys.stderr, flush=True)
sys.exit(a.code)
