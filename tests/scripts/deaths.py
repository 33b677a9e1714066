"""Die a different way on each run: ``--deaths raise,kill9,raise`` raises ValueError on the first run,
SIGKILLs itself (printing nothing) on the second, raises again on the third; after the list, it runs
until stopped. ``--count FILE`` keeps the run number across restarts. ``--quiet`` prints nothing on the
runs that do not raise, as a process the OOM killer takes while it loads a model says nothing."""
import argparse
import os
import signal
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--count", required=True)
p.add_argument("--deaths", required=True)
p.add_argument("--sleep", type=float, default=0.3)
p.add_argument("--wait-file", help="on runs after the first, wait until this file exists before dying (a "
                                    "supervisor swap in between)")
a = p.parse_args()
try:
    n = int(open(a.count).read() or 0)
except FileNotFoundError:
    n = 0
open(a.count, "w").write(str(n + 1))
deaths = a.deaths.split(",")
how = deaths[n] if n < len(deaths) else "live"
if how == "live":
    print(f"run {n + 1}: up and running", flush=True)
    while True:
        time.sleep(1)
if a.wait_file and n > 0:
    while not os.path.exists(a.wait_file):
        time.sleep(0.05)
time.sleep(a.sleep)
if how == "raise":
    print(f"run {n + 1}: loading batch", flush=True)
    raise ValueError("bad batch shape")
if how == "kill9":
    os.kill(os.getpid(), signal.SIGKILL)
if how == "exit3":
    sys.exit(3)
raise SystemExit(f"unknown death {how!r}")
