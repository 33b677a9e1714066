"""Journeys of the demo as the README tells users to run it: the Quickstart in the TUI (tmux),
the daemon commands of "Training that outlives your terminal", and a supervisor `kill -9`ed with
its components holding their ports, then taken over and stopped."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import wait_for
from tests.journeys.conftest import (
    PATIENCE,
    Workdir,
    end_the_run_from_the_tui,
    needs_tmux,
    readme_command,
    wait_gone,
)

pytestmark = [pytest.mark.slow]


def _running(w: Workdir, names=("inference", "orchestrator", "trainer"), timeout: float = PATIENCE) -> dict[str, int]:
    """Wait until every component of the demo has a running attempt; their pids."""
    return wait_for(lambda: (lambda p: p if set(names) <= set(p) else None)(w.component_pids()), timeout, 0.1,
                    what=f"{', '.join(names)} running")


def _trainer_step(w: Workdir, at_least: int, timeout: float = PATIENCE) -> None:
    def seen():
        r = w.sh("rlsup status --json")
        if r.returncode != 0:
            return False
        step = json.loads(r.stdout)["components"]["trainer"].get("step")
        return step is not None and step >= at_least

    wait_for(seen, timeout, 0.3, what=f"trainer at step {at_least}")


@needs_tmux()
def test_quickstart_in_the_tui_then_stop_and_continue(workdir):
    """`rlsup up configs/demo.yaml` (the Quickstart, TUI in tmux): the table fills, the log shows no
    NumPy warning; `Q` stops the run; `rlsup up configs/demo.yaml --resume` (TUI) brings every component
    back running (issue 27 item 1: it came back with every component `stopped`)."""
    w = workdir
    up = readme_command("rlsup up configs/demo.yaml")
    assert up == "rlsup up configs/demo.yaml"
    tui = w.tmux()
    tui.run(up)
    first = _running(w)
    tui.wait(lambda s: "inference" in s and "trainer" in s and "running" in s, what="the component table")
    trainer_log = (w.run_dir() / "logs" / "trainer.log")
    wait_for(lambda: trainer_log.exists() and trainer_log.stat().st_size > 0, PATIENCE, what="trainer output")
    assert "NumPy" not in trainer_log.read_text(errors="replace").splitlines()[0]
    end_the_run_from_the_tui(tui, w, first.values())

    tui.run(f"{up} --resume")
    again = _running(w)
    assert not set(again.values()) & set(first.values())
    screen = tui.wait(lambda s: "trainer" in s and "stopped" not in s and "running" in s,
                      what="resumed components running in the TUI")
    assert "connecting" not in screen
    # The monitors' records say "running" a moment before the supervisor journals `started`: wait for it
    # (read at once, the newest `started` could still be the first run's: a CI run saw attempt 1).
    ended_seq = max(e["seq"] for e in w.events() if e["kind"] == "run_ended")
    started = w.wait_event(lambda e: e["kind"] == "started" and e["component"] == "trainer" and e["seq"] > ended_seq,
                           what="the resumed trainer's started")
    assert started["attempt"] == 2
    tui.keys("q")
    assert tui.exit_code() == 0
    assert set(w.component_pids().values()) == set(again.values())  # detaching left training running
    assert w.sh(readme_command("rlsup down")).returncode == 0
    assert not w.processes()


def test_the_daemon_commands_of_the_readme(workdir):
    """The block "Daily commands", command by command as written (only the checkpoint step of `rlsup
    resume trainer --step 120` is one this short run has); then its `rlsup up configs/demo.yaml --resume`,
    with `-d`, on the stopped run continues it (issue 27 item 1)."""
    w = workdir
    up = w.sh(readme_command("rlsup up configs/demo.yaml -d"), check=True)
    assert "in the background" in up.stdout
    assert "NumPy" not in up.stdout + up.stderr
    pids = _running(w)
    _trainer_step(w, 12)
    status = w.sh(readme_command("rlsup status"), check=True)
    assert re.search(r"trainer\s+running", status.stdout), status.stdout
    logs = w.sh(readme_command("rlsup logs trainer"), check=True)
    assert "Step" in logs.stdout or "step" in logs.stdout
    why = w.sh(readme_command("rlsup why trainer"), check=True)
    assert "attempt 1" in why.stdout and "trainer" in why.stdout, why.stdout
    diagnose = w.sh(readme_command("rlsup diagnose runs/demo"), check=True)
    assert diagnose.stdout.strip(), diagnose.stderr
    r = w.sh(readme_command("rlsup restart orchestrator"), check=True)
    assert "orchestrator" in r.stdout
    w.wait_event(lambda e: e["kind"] == "started" and e["component"] == "orchestrator" and e["attempt"] == 2,
                 what="orchestrator attempt 2")
    # The README's step (120) is one of a long run; this one resumes from its newest checkpoint: the
    # trainer keeps three, so an older one (step 10) can be pruned by the time a loaded machine runs this.
    def newest_checkpoint():
        r = w.sh("rlsup status --json")
        return r.returncode == 0 and (json.loads(r.stdout)["components"]["trainer"].get("checkpoint") or {}).get("step")

    step = wait_for(newest_checkpoint, PATIENCE, 0.3, what="a trainer checkpoint")
    resume = readme_command("rlsup resume trainer --step")
    resume = re.sub(r"--step \d+", f"--step {step}", resume)
    w.sh(resume, check=True)
    ev = w.wait_event(lambda e: e["kind"] == "started" and e["component"] == "trainer" and e["attempt"] == 2,
                      what="trainer resumed")
    assert (ev.get("resume") or {}).get("step") == step
    before = w.supervisor_pid()
    inference = w.component_pids()["inference"]
    w.sh(readme_command("rlsup restart-supervisor"), check=True)
    assert w.supervisor_pid() != before and w.component_pids()["inference"] == inference == pids["inference"]
    down = w.sh(readme_command("rlsup down"), check=True)
    assert "no process of the run is left" in down.stdout
    assert not w.processes()

    cont = w.sh(f"{readme_command('rlsup up configs/demo.yaml --resume')} -d", check=True)
    assert "in the background" in cont.stdout, cont.stdout + cont.stderr
    _running(w)
    assert w.sh("rlsup down", check=True).returncode == 0
    assert not w.processes()


@needs_tmux()
def test_kill_9_of_the_supervisor_then_take_over_and_stop(workdir):
    """`kill -9` of the demo's supervisor while the inference server holds its port: `rlsup status`
    says the supervisor is gone and how to take over (item 4); `rlsup up configs/demo.yaml` (TUI) and
    `rlsup up configs/demo.yaml -d`, without flags, adopt the same pids (item 2: both were refused by
    up's own port check); `rlsup down` on such a run, a component dead meanwhile, leaves no process
    (item 3: it said "no supervisor is running")."""
    import os
    import signal

    w = workdir
    w.sh(readme_command("rlsup up configs/demo.yaml -d"), check=True)
    pids = _running(w)
    w.wait_event(lambda e: e["kind"] == "ready" and e["component"] == "inference", what="inference ready")
    sup = w.supervisor_pid()
    os.kill(sup, signal.SIGKILL)
    wait_gone([sup])
    status = w.sh(readme_command("rlsup status"))
    out = status.stdout
    assert status.returncode == 0 and "gone" in out and ", up " not in out.splitlines()[0], out
    assert f"inference pid {pids['inference']}" in out
    take_over = next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("take it over"))
    assert take_over == "rlsup up configs/demo.yaml --run-dir runs/demo"  # pastes here (test_teardown runs one)

    tui = w.tmux()
    tui.run(readme_command("rlsup up configs/demo.yaml"))  # as the README says, no flag
    tui.wait(lambda s: str(pids["inference"]) in s and "running" in s, what="the TUI on the adopted run")
    assert {e["component"]: e["pid"] for e in w.events() if e["kind"] == "adopted"} == pids
    tui.keys("q")
    assert tui.exit_code() == 0

    sup = w.supervisor_pid()
    os.kill(sup, signal.SIGKILL)
    wait_gone([sup])
    n = len(w.events())
    d = w.sh(readme_command("rlsup up configs/demo.yaml -d"))
    assert d.returncode == 0 and "in the background" in d.stdout, d.stdout + d.stderr
    adopted = {e["component"]: e["pid"] for e in w.events()[n:] if e["kind"] == "adopted"}
    assert adopted == pids
    assert f"took over: inference pid {pids['inference']}" in d.stdout

    sup = w.supervisor_pid()
    os.kill(sup, signal.SIGKILL)
    os.kill(pids["orchestrator"], signal.SIGKILL)  # dies while no supervisor watches: its monitor lingers
    wait_gone([sup, pids["orchestrator"]])
    down = w.sh(readme_command("rlsup down"))
    assert down.returncode == 0, down.stdout + down.stderr
    assert not w.processes()
    from rlsup.supervisor.monitor.process import is_monitor_of, records

    assert not [r for _, r in records(w.run_dir() / "monitors") if is_monitor_of(r, w.run_dir())]
    last = w.events()[-1]
    assert last["kind"] == "run_ended" and "rlsup down" in last["reason"]
    assert "stopped" in w.sh("rlsup status").stdout
