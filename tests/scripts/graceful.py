"""A server that shuts down gracefully on SIGTERM (1.5 s) and counts the SIGTERMs it gets, with two
workers: one in its process group, one that left it (setsid), both graceful the same way.

Prints ``PID up`` when ready and ``PID SIGTERM #N`` for each SIGTERM; exits 0 after its shutdown.
"""
import os
import signal
import subprocess
import sys
import time

got = [0]


def term(*_a):
    got[0] += 1
    print(f"{os.getpid()} SIGTERM #{got[0]}", flush=True)


signal.signal(signal.SIGTERM, term)
workers = []
if len(sys.argv) < 2:
    workers = [subprocess.Popen([sys.executable, __file__, "worker"]),
               subprocess.Popen([sys.executable, __file__, "worker"], start_new_session=True)]
print(f"{os.getpid()} up", flush=True)
while not got[0]:
    time.sleep(0.01)
time.sleep(1.5)  # the graceful part: a second SIGTERM here would mean "force"
for w in workers:
    w.wait()
sys.exit(0)
