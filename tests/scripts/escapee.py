"""A component that leaves an escapee behind: a grandchild that double-forks, calls setsid, clears
its environment (so no RLSUP_* marker is left) and ignores SIGTERM, SIGINT and SIGHUP.

    escapee.py TOKEN PIDFILE [--keep-fds] [--then-exit]

The escapee's command line carries TOKEN (the only way a test can find it again) and it writes its
pid to PIDFILE.<attempt> ($RLSUP_ATTEMPT). With --keep-fds it keeps the component's stdout (the monitor's pipe) open, as a
careless daemon does; otherwise it redirects its descriptors to /dev/null. The component itself
prints the escapee's pid and then sleeps (or exits 0 with --then-exit).
"""
import os
import sys
import time

token, pidfile = sys.argv[1], f"{sys.argv[2]}.{os.environ.get('RLSUP_ATTEMPT', '0')}"
keep_fds = "--keep-fds" in sys.argv
then_exit = "--then-exit" in sys.argv

ESCAPEE = (
    "import signal, time\n"
    "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
    "    signal.signal(s, signal.SIG_IGN)\n"
    "while True:\n"
    "    time.sleep(3600)\n"
)

r, w = os.pipe()
if os.fork() == 0:  # first fork: leaves the component's process group and session
    os.close(r)
    os.setsid()
    if os.fork() == 0:  # second fork: the daemon proper, re-parented once its parent exits
        if not keep_fds:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
        pid = str(os.getpid())
        with open(pidfile + ".tmp", "w") as f:
            f.write(pid)
        os.replace(pidfile + ".tmp", pidfile)
        os.write(w, pid.encode())
        os.close(w)
        os.execve(sys.executable, [sys.executable, "-S", "-c", ESCAPEE, token], {})
    os._exit(0)
os.close(w)
os.wait()
pid = os.read(r, 32).decode()
print(f"escapee {pid} is out", flush=True)
if then_exit:
    sys.exit(0)
while True:
    time.sleep(3600)
