"""A root that ignores SIGTERM, with a child that ignores SIGTERM and a grandchild that called setsid.
Writes the pids (root child grandchild) to PIDFILE once all are up, then sleeps."""
import os
import signal
import subprocess
import sys
import time

pidfile = sys.argv[1]
signal.signal(signal.SIGTERM, signal.SIG_IGN)
code = ("import os,signal,subprocess,sys,time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(1)'], start_new_session=True)\n"
        "print(g.pid, flush=True)\n"
        "while True: time.sleep(1)\n")
child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
grand = int(child.stdout.readline())
with open(pidfile + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid} {grand}\n")
os.replace(pidfile + ".tmp", pidfile)
print("tree up", flush=True)
while True:
    time.sleep(1)
