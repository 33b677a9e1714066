"""Processes that hang in named functions, for the stacks tests (tests/supervisor/run/test_stacks_e2e.py).

    hangs.py launcher N   start N ranks (RANK=0..N-1, as torchrun does) and wait for them
    hangs.py rank         rank 1 hangs in load_batch, every other rank in all_reduce
    hangs.py thread       a worker thread "loader" hangs in wait_for_path; the main thread joins it
    hangs.py main         the main thread hangs in serve_requests
Each prints "Step 1" first (a step for rlsup's progress, then none: a stall).
"""

import os
import subprocess
import sys
import threading
import time


def all_reduce():
    while True:
        time.sleep(0.2)


def load_batch():
    while True:
        time.sleep(0.2)


def wait_for_path():
    while True:
        time.sleep(0.2)


def serve_requests():
    while True:
        time.sleep(0.2)


def launcher(n):
    ranks = [subprocess.Popen([sys.executable, __file__, "rank"], env={**os.environ, "RANK": str(r)}) for r in range(n)]
    for p in ranks:
        p.wait()


def main():
    mode = sys.argv[1]
    if mode == "launcher":
        launcher(int(sys.argv[2]))
        return
    print("Step 1", flush=True)
    if mode == "rank":
        (load_batch if os.environ["RANK"] == "1" else all_reduce)()
    elif mode == "thread":
        t = threading.Thread(target=wait_for_path, name="loader", daemon=True)
        t.start()
        t.join()
    else:
        serve_requests()


if __name__ == "__main__":
    main()
