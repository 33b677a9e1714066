"""An idle run costs (almost) nothing: the supervisor wakes only when something is due.

Counted, not timed: the supervisor's voluntary context switches (each one a wake-up after a wait)
over a window in which nothing happens. The work behind them (``detectors.next_tick``: a tick only
when a sample, a stall deadline or a position write is due; directory watches on the loop's inotify
descriptor instead of a thread per directory) has unit tests; this is the whole process as run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.conftest import wait_for, write_config

WINDOW_S = 10.0


def _switches(pid: int) -> dict[str, int]:
    """Voluntary context switches per thread (name: count) of process ``pid``."""
    out: dict[str, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    out[f"{tid} {name}"] = int(line.split()[1])
        except OSError:
            pass
    return out


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_an_idle_run_with_watched_directories_sleeps(tmp_path, headless):
    work = tmp_path / "work"
    (work / "rollouts").mkdir(parents=True)
    (work / "checkpoints").mkdir()
    cfg = write_config(tmp_path, f"""
        components:
          trainer:
            command: ["{{py}}", "-c", "import time; time.sleep(600)"]
            watch: [{{path: "{work}/rollouts", pattern: 'step_(?P<step>\\d+)'}}]
            resume: {{checkpoints: "{work}/checkpoints", layout: prime-rl, args: ["--resume-step", "{{step}}"]}}
          orchestrator:
            command: ["{{py}}", "-c", "import time; time.sleep(600)"]
            watch: [{{path: "{work}/rollouts"}}]
          inference:
            command: ["{{py}}", "-c", "import time; time.sleep(600)"]
    """)
    h = headless(cfg)
    wait_for(lambda: sum(e["kind"] == "ready" for e in h.events()) == 3, what="three components ready")
    time.sleep(3.0)  # start-up work done (the first samples, the state written)
    threads = _threads(h.proc.pid)
    a = _switches(h.proc.pid)
    time.sleep(WINDOW_S)
    b = _switches(h.proc.pid)
    per_thread = {t: b[t] - a.get(t, 0) for t in b}
    woke = sum(per_thread.values())
    # Due in the window: two resources samples (every 5 s) and one host sample (every 10 s while no
    # client looks), each a wake-up or two; a tick every second would be 10 more, a thread per watched
    # directory checking a stop flag every 100 ms 300 more.
    assert woke <= 12, per_thread
    # Threads: the loop, the host/GPU sampler, the pool for blocking work and the directory scanner,
    # however many directories are watched.
    assert threads <= 5, threads
    (work / "rollouts" / "step_3").mkdir()  # and a change is still seen at once
    wait_for(lambda: _status_step(tmp_path) == 3, timeout=10, what="the new rollouts step in state.json")


def _status_step(tmp_path: Path) -> int | None:
    import json

    try:
        st = json.loads((tmp_path / "run" / "state.json").read_text())
    except (OSError, ValueError):
        return None
    w = (st["components"]["trainer"].get("watch") or {})
    return next((v.get("step") for v in w.values()), None)
