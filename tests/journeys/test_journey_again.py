"""`--resume` and `--fresh` on runs that completed, failed (fatal) or were stopped, in each mode users
run them: the TUI (tmux), `-d` and `--headless`. A small two-component config keeps it quick: `job`
(exit_on_end) does what the file `mode` says (complete, fail, run), `server` runs until stopped."""

from __future__ import annotations

import re
import signal
import subprocess

import pytest

from tests.conftest import PY, wait_for
from tests.journeys.conftest import PATIENCE, Workdir, needs_tmux

JOB = """\
import sys, time, pathlib
mode = pathlib.Path(sys.argv[1]).read_text().strip()
if mode == "fail":
    print("Traceback (most recent call last):\\nRuntimeError: boom", flush=True)
    sys.exit(1)
for i in range(1, 4 if mode == "complete" else 100000):
    print(f"Step {i}/3" if mode == "complete" else f"Step {i}", flush=True)
    time.sleep(0.05 if mode == "complete" else 0.2)
"""

CONFIG = """\
name: small
components:
  server:
    command: ["{py}", "-c", "import time; print('serving', flush=True); time.sleep(100000)"]
    stop: {{timeout: 5}}
  job:
    command: ["{py}", "-u", "{job}", "{mode}"]
    depends_on: [server]
    progress: {{preset: rlsup}}
    restart: {{policy: never}}
    exit_on_end: true
    stop: {{timeout: 5}}
"""

pytestmark = [pytest.mark.slow]


def _setup(w: Workdir) -> None:
    (w.path / "job.py").write_text(JOB)
    (w.path / "configs" / "small.yaml").write_text(
        CONFIG.format(py=PY, job=w.path / "job.py", mode=w.path / "mode"))


def _mode(w: Workdir, mode: str) -> None:
    (w.path / "mode").write_text(mode)


def _end_a_run(w: Workdir, how: str) -> None:
    """A run in runs/small that ended: completed, fatal or stopped (by `rlsup down`)."""
    if how == "stopped":
        _mode(w, "run")
        w.sh("rlsup up configs/small.yaml -d", check=True)
        w.wait_event(lambda e: e["kind"] == "started" and e["component"] == "job", name="small", what="job started")
        w.sh("rlsup down", check=True)
    else:
        _mode(w, "complete" if how == "completed" else "fail")
        r = w.sh("rlsup up configs/small.yaml --headless")
        assert r.returncode == (0 if how == "completed" else 1), r.stdout + r.stderr
    assert w.events("small")[-1]["kind"] == "run_ended"


def _job_attempts(w: Workdir, name: str = "small") -> list[int]:
    return [e["attempt"] for e in w.events(name) if e["kind"] == "started" and e["component"] == "job"]


class Mode:
    """`rlsup up configs/small.yaml FLAG` in one of the three modes; says what the user saw."""

    def __init__(self, w: Workdir, mode: str):
        self.w, self.mode = w, mode
        self.proc: subprocess.Popen[str] | None = None
        self.tui = w.tmux() if mode == "tui" else None

    def up(self, flag: str) -> None:
        cmd = f"rlsup up configs/small.yaml {flag}"
        if self.mode == "-d":
            self.result = self.w.sh(f"{cmd} -d")
        elif self.mode == "headless":
            self.proc = subprocess.Popen(["bash", "-c", f"{cmd} --headless"], cwd=self.w.path, env=self.w.env,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                         stdin=subprocess.DEVNULL)
        else:
            self.tui.run(cmd)

    def sees_running(self) -> None:
        """The job runs again, and the user is told so (not an empty view, not "stopped")."""
        w = self.w
        wait_for(lambda: "job" in w.component_pids("small"), PATIENCE, 0.1, what="job running")
        if self.mode == "-d":
            assert self.result.returncode == 0 and "in the background" in self.result.stdout, self.result.stderr
        elif self.mode == "tui":
            self.tui.wait(lambda s: re.search(r"job\s.*running", s) and "connecting" not in s, PATIENCE,
                          "job running in the TUI")
        self.stop()

    def sees_ended_at_once(self) -> None:
        """Nothing was left to continue: said at once, with what to do; no view left hanging."""
        if self.mode == "-d":
            r = self.result
            assert r.returncode == 0 and "in the background" not in r.stdout, r.stdout
            assert "ended as soon as it started" in r.stderr and "--fresh" in r.stderr, r.stderr
        elif self.mode == "tui":
            assert self.tui.exit_code() == 0
            screen = self.tui.screen()
            assert "ended as soon as it started" in screen and "--fresh" in screen, screen
        else:
            out, _ = self.proc.communicate(timeout=PATIENCE)
            assert self.proc.returncode == 0 and "run ended" in out, out

    def stop(self) -> None:
        if self.mode == "headless":
            self.proc.send_signal(signal.SIGINT)
            self.proc.communicate(timeout=PATIENCE)
        else:
            if self.tui is not None:
                self.tui.keys("q")  # detach: training goes on
                assert self.tui.exit_code() == 0
                assert "job" in self.w.component_pids("small")
            self.w.sh("rlsup down", check=True)


@pytest.mark.parametrize("mode", [pytest.param("tui", marks=needs_tmux()), "-d", "headless"])
@pytest.mark.parametrize("ended", ["completed", "fatal", "stopped"])
def test_resume_and_fresh_on_an_ended_run(workdir, mode, ended):
    w = workdir
    _setup(w)
    _end_a_run(w, ended)
    before = _job_attempts(w)
    _mode(w, "run")
    m = Mode(w, mode)
    m.up("--resume")
    if ended == "completed":
        m.sees_ended_at_once()
        assert _job_attempts(w) == before  # what completed stays completed
    else:
        m.sees_running()
        assert _job_attempts(w) == [*before, before[-1] + 1]
        assert [e for e in w.events("small") if e["kind"] == "run_started"][-1]["how"] == "resumed"
    assert not w.processes()

    m = Mode(w, mode)
    m.up("--fresh")
    m.sees_running()
    assert (w.path / "runs" / "small.1" / "events.jsonl").exists()
    assert _job_attempts(w) == [1]
    assert not w.processes()


@needs_tmux()
@pytest.mark.parametrize("ended", ["completed", "fatal"])
def test_the_question_on_an_ended_run_answered_r(workdir, ended):
    """`rlsup up CONFIG` at a terminal on an ended run asks; `r` continues it. On a completed run that
    ended the new supervisor at once and left the TUI on "connecting" forever; now it says so. On a
    fatal run the failed component runs again, in the TUI."""
    w = workdir
    _setup(w)
    _end_a_run(w, ended)
    _mode(w, "run")
    tui = w.tmux()
    tui.run("rlsup up configs/small.yaml")
    tui.wait_text("[r/f/q]")
    tui.keys("r", "Enter")
    if ended == "completed":
        assert tui.exit_code() == 0
        assert "ended as soon as it started" in tui.screen()
    else:
        tui.wait(lambda s: re.search(r"job\s.*running", s) and "connecting" not in s, what="job running in the TUI")
        tui.keys("q")
        assert tui.exit_code() == 0
        w.sh("rlsup down", check=True)
    assert not w.processes()


def test_a_shell_that_exported_rlsup_run_dir_is_not_taken_for_part_of_the_run(workdir):
    """`--run-dir`'s default is $RLSUP_RUN_DIR, so users export it. A shell (and the `rlsup` clients
    it starts) carrying it is not a leftover of the run: `up -d` is not ended by the supervisor it
    starts, and `down` ends the run's processes, not the user's shell."""
    w = workdir
    _setup(w)
    _mode(w, "run")
    run_dir = w.run_dir("small")
    r = w.sh("rlsup up configs/small.yaml -d; echo up-exited=$?; "
             "for i in $(seq 150); do rlsup status | grep -Eq '^job +running' && break; sleep 0.2; done; "
             "rlsup status >/dev/null; echo status-exited=$?; "
             "rlsup down; echo down-exited=$?; echo the shell lives on",
             env={"RLSUP_RUN_DIR": str(run_dir)}, timeout=120)
    out = r.stdout
    assert "up-exited=0" in out and "in the background" in out, out + r.stderr
    assert "status-exited=0" in out and "down-exited=0" in out, out + r.stderr
    assert "the shell lives on" in out and r.returncode == 0, out + r.stderr
    assert _job_attempts(w) == [1]
    assert w.processes() == []
