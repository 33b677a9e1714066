"""Many children ending at once: the supervisor reaps them all and stays responsive.

Found at the end of a 1,000-component benchmark run: the supervisor hung for good, its 1,000 monitors
zombies. It had a SIGCHLD handler, so each child's exit wrote a byte to asyncio's wakeup socket; a
thousand at once filled it, and CPython's C signal handler then queues a "pending call" under a lock that
is not signal-safe, taken while the main thread held it (its stack: sem_wait under three nested signal
frames in PyThread_acquire_lock_timed). The supervisor now handles no SIGCHLD at all: the monitors are
reaped when their pidfds say they ended, anything else each tick.
"""

from __future__ import annotations

import json
import os
import signal

from tests.conftest import PY, wait_for, write_config

N = 150


def _catches(pid: int, signum: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    return bool(mask >> (signum - 1) & 1)


def _zombies_of(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] == "Z" and int(fields[1]) == pid:
                out.append(int(name))
    return out


def test_a_hundred_and_fifty_children_ending_at_once_are_reaped_and_the_supervisor_answers(tmp_path, daemon):
    go = tmp_path / "go"
    wait = f"import os, time\\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)\\n"
    comps = "".join(f'\n  c{i}:\n    command: ["{PY}", "-c", "{wait}"]\n    restart: {{policy: never}}'
                    for i in range(N))
    keep = f'\n  keep:\n    command: ["{PY}", "-c", "import time; time.sleep(600)"]'  # the run goes on
    cfg = write_config(tmp_path, "name: many\ncomponents:" + comps + keep)
    d = daemon(cfg)
    wait_for(lambda: sum(e["kind"] == "started" for e in d.events()) == N + 1, 120, 0.2, what=f"{N} started")
    assert not _catches(d.pid, signal.SIGCHLD)  # no byte on asyncio's wakeup socket per child exit
    go.touch()  # every component exits at once, then its monitor
    wait_for(lambda: sum(e["kind"] == "exited" for e in d.events()) == N, 120, 0.2, what=f"{N} exits")
    st = d.cli("status", "--json", timeout=30)
    assert st.returncode == 0, st.stdout + st.stderr
    states = {name: c["state"] for name, c in json.loads(st.stdout)["components"].items()}
    assert states.pop("keep") == "running"
    assert set(states.values()) == {"completed"}
    wait_for(lambda: not _zombies_of(d.pid), 60, 0.2, what="every monitor reaped")
