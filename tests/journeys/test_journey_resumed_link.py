"""The README's path through a resumed run whose link drops (issue 38, the first bug): the Quickstart in
the TUI (tmux), `Q` ends the run, `rlsup up configs/demo.yaml --resume` continues it in the TUI, then
`rlsup restart-supervisor` and a `kill -9` of the supervisor taken over with `rlsup up configs/demo.yaml -d`.
The TUI said `■ run ended` after the first drop and never reconnected while training went on: its session
kept the first run's `run_ended`, replayed from the journal, through the later `run_started`."""

from __future__ import annotations

import os
import signal

import pytest

from tests.journeys.conftest import (
    Tmux,
    Workdir,
    end_the_run_from_the_tui,
    needs_tmux,
    readme_command,
    wait_gone,
)

pytestmark = [pytest.mark.slow]
NAMES = {"inference", "orchestrator", "trainer"}


def _reattached(tui: Tmux, w: Workdir, old_pid: int, how: str) -> None:
    """The TUI is attached again, to a new supervisor; it never said the run ended meanwhile."""
    def back(screen: str) -> bool:
        assert "run ended" not in screen, f"the TUI says the live run ended after {how}:\n{screen}"
        return "● attached" in screen and w.supervisor_pid() != old_pid

    tui.wait(back, 90, f"the TUI attached again after {how}")


@needs_tmux()
def test_the_tui_on_a_resumed_run_rides_through_a_supervisor_restart_and_a_take_over(workdir):
    w = workdir
    up = readme_command("rlsup up configs/demo.yaml")
    tui = w.tmux()
    tui.run(up)
    first = w.running(NAMES)
    tui.wait(lambda s: "trainer" in s and "running" in s, 60, "the component table")
    end_the_run_from_the_tui(tui, w, first.values())

    tui.run(f"{up} --resume")  # the documented way to continue it
    pids = w.running(NAMES)
    tui.wait(lambda s: "trainer" in s and "running" in s and "● attached" in s, 60, "the resumed run in the TUI")

    sup = w.supervisor_pid()
    w.sh(readme_command("rlsup restart-supervisor"), check=True)
    _reattached(tui, w, sup, "restart-supervisor")

    sup = w.supervisor_pid()
    os.kill(sup, signal.SIGKILL)
    wait_gone([sup])
    w.sh(readme_command("rlsup up configs/demo.yaml -d"), check=True)  # the take-over
    _reattached(tui, w, sup, "kill -9 and a take-over")
    assert w.component_pids() == pids  # training went on, untouched

    tui.keys("q")
    screen = tui.wait(lambda s: "JOURNEY-EXIT=" in s, 30, "the TUI to detach")
    assert "training continues; re-attach with" in screen and "the run has ended" not in screen, screen
    assert w.sh(readme_command("rlsup down")).returncode == 0
    assert not w.processes()
