"""The platform takes the machine (issue 40, item 1): a SIGTERM delivered to the supervisor itself, not through
`rlsup down`, is a preemption. The Quickstart's demo declares `preempt: {signal: SIGUSR1}` for its trainer: the
trainer is asked to checkpoint, the run waits for that checkpoint, stops in order and ends *preempted*; the
README's plain `rlsup up configs/demo.yaml` then continues from the step checkpointed at preemption, without
asking. Both in the TUI (tmux) and with `-d` (a spot job's command)."""

from __future__ import annotations

import os
import re
import signal

import pytest

from tests.conftest import wait_for
from tests.journeys.conftest import Workdir, needs_tmux, readme_command, wait_gone

pytestmark = [pytest.mark.slow]
NAMES = {"inference", "orchestrator", "trainer"}


def _preempt(w: Workdir) -> int:
    """Wait for the trainer to get past its first periodic checkpoint, SIGTERM the supervisor (as a spot VM's
    shutdown or `docker stop` would); returns the step the run says it stands at once it has ended."""
    log = w.run_dir() / "logs" / "trainer.log"
    wait_for(lambda: int((re.findall(r"^Step (\d+)/", log.read_text(), re.M) or ["0"])[-1]) >= 12, 120, 0.1,
             what="the trainer past step 12")
    pids = w.component_pids()
    os.kill(w.supervisor_pid(), signal.SIGTERM)
    end = w.wait_event(lambda e: e.get("kind") == "run_ended", what="the run's end")
    wait_gone(pids.values())
    assert end["outcome"] == "preempted", end
    kinds = [(e["kind"], e.get("component")) for e in w.events()]
    assert kinds.index(("checkpoint_requested", "trainer")) < kinds.index(("stopping", "trainer")), kinds
    stood = end["checkpoints"]["trainer"]["step"]
    log = (w.run_dir() / "logs" / "trainer.log").read_text()
    assert f"Checkpoint of step {stood} written on SIGUSR1" in log, log[-2000:]
    assert not any(e.get("kind") == "flag" and e.get("type") == "checkpoint_problem" for e in w.events())
    return stood


def _continued_from(w: Workdir, stood: int) -> None:
    run2 = max(i for i, e in enumerate(w.events()) if e["kind"] == "run_started")
    first = w.wait_event(lambda e: e.get("kind") == "started" and e.get("component") == "trainer"
                         and e["seq"] > w.events()[run2]["seq"], what="the trainer started again")
    assert (first.get("resume") or {}).get("step") == stood, first


@needs_tmux()
def test_a_sigterm_to_the_supervisor_under_the_tui_checkpoints_and_plain_up_continues(workdir):
    w = workdir
    up = readme_command("rlsup up configs/demo.yaml")
    tui = w.tmux()
    tui.run(up)
    w.running(NAMES)
    tui.wait(lambda s: "trainer" in s and "running" in s, 60, "the component table")
    stood = _preempt(w)
    tui.wait(lambda s: "run ended" in s and "preemption" in s, 60, "the TUI to say the platform took the machine")

    tui.run(up)  # the same command, no flag: a preempted run is continued without asking
    w.running(NAMES)
    _continued_from(w, stood)
    screen = tui.wait(lambda s: "trainer" in s and "running" in s, 60, "the continued run in the TUI")
    assert "--resume" not in screen and "--fresh" not in screen, screen
    w.sh("rlsup down", check=True)


def test_a_sigterm_to_a_detached_supervisor_checkpoints_and_plain_up_d_continues(workdir):
    w = workdir
    up = readme_command("rlsup up configs/demo.yaml") + " -d"
    w.sh(up, check=True)
    w.running(NAMES)
    stood = _preempt(w)
    status = w.sh("rlsup status").stdout + w.sh("rlsup status").stderr
    assert "preempt" in status, status

    r = w.sh(up, check=True)
    said = r.stdout + r.stderr
    assert re.search(rf"continuing the run .*preempted at step \d+.*trainer at checkpoint step {stood}", said), said
    w.running(NAMES)
    _continued_from(w, stood)
    w.sh("rlsup down", check=True)


def test_a_preempt_signal_the_trainer_does_not_handle_is_named_as_such(workdir):
    """The most common mistake with `preempt:`: a signal the trainer has no handler for. Its default action ends the
    trainer the moment it is sent; the flag says so, instead of asking whether it is the right signal."""
    w = workdir
    up = readme_command("rlsup up configs/demo.yaml") + " -d --set components.trainer.preempt.signal=SIGUSR2"
    w.sh(up, check=True)
    w.running(NAMES)
    log = w.run_dir() / "logs" / "trainer.log"
    wait_for(lambda: int((re.findall(r"^Step (\d+)/", log.read_text(), re.M) or ["0"])[-1]) >= 3, 120, 0.1,
             what="the trainer past step 3")
    os.kill(w.supervisor_pid(), signal.SIGTERM)
    end = w.wait_event(lambda e: e.get("kind") == "run_ended", what="the run's end")
    assert end["outcome"] == "preempted", end
    trainer_exit = [e for e in w.events() if e["kind"] == "exited" and e.get("component") == "trainer"][-1]
    assert trainer_exit.get("signal") == "SIGUSR2", trainer_exit
    flag = next(e for e in w.events() if e["kind"] == "flag" and e.get("type") == "checkpoint_problem")
    assert "had no handler for SIGUSR2" in flag["message"], flag
    assert "set `preempt.signal` to the signal it checkpoints on" in flag["message"], flag
    assert not flag["action"].startswith("stopping it"), flag  # it had ended already
