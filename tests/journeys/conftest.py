"""The journey suite's shared pieces: the README's own commands, a working directory laid out as
the README assumes (``configs/demo.yaml``, runs under ``./runs``), real tmux for the TUI mode, and a
teardown that leaves no process behind.

Journeys run what users type, in the modes they use: the TUI in tmux, ``-d``, ``--headless``, over
SSH. Where the README has the command, it is read from README.md (:func:`readme_command`), so the
README cannot drift from what works. Only the environment is ours: a free port for the demo
(``RLSUP_DEMO_PORT``), a short run (``RLSUP_DEMO_STEPS``) and no GPU sampling.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import PY, cli_env, free_port, pid_alive, read_events, wait_for

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# The ceiling of every wait of a journey: waits are on state, so an idle machine never waits this long,
# and a loaded one (a load average of 10 on 2 cores) only makes a journey slower, never a failure.
PATIENCE = 120.0


def pytest_collection_modifyitems(items):
    """A journey chains many waits: it gets ten minutes (pyproject's 120 s is for one step of it)."""
    for item in items:
        if ROOT / "tests" / "journeys" in item.path.parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(600))

# ---------------------------------------------------------------------- the README's commands


def readme_code_blocks(lang: str = "sh") -> list[str]:
    """Every fenced code block of README.md in ``lang``."""
    return re.findall(rf"^```{lang}\n(.*?)^```", README.read_text(), flags=re.M | re.S)


def readme_lines() -> list[str]:
    """Every command line of the README's sh blocks, its trailing comment removed."""
    out = []
    for block in readme_code_blocks("sh"):
        for line in block.splitlines():
            cmd = re.split(r"\s{2,}#", line, maxsplit=1)[0].strip()
            if cmd and not cmd.startswith("#"):
                out.append(cmd)
    return out


def readme_command(prefix: str, *, contains: str = "") -> str:
    """The README's command that starts with ``prefix`` (the last ``&&`` part of a line counts: the
    Quickstart's `... && rlsup up configs/demo.yaml`). Fails if the README has no such command."""
    for line in readme_lines():
        for part in [p.strip() for p in line.split("&&")]:
            if part.startswith(prefix) and contains in part:
                return part
    raise AssertionError(f"README.md has no command starting with {prefix!r}"
                         + (f" containing {contains!r}" if contains else ""))


# ---------------------------------------------------------------------- a user's working directory


class Workdir:
    """A directory laid out as the README assumes: ``configs/`` of the repo, runs under ``./runs``.
    Commands run there through bash, as typed, with the venv's ``rlsup`` first on PATH."""

    def __init__(self, base: Path, steps: int = 2000):
        self.path = base
        shutil.copytree(ROOT / "configs", base / "configs", ignore=shutil.ignore_patterns("presets"))
        self.port = free_port()
        self.env = cli_env({"RLSUP_DEMO_PORT": str(self.port), "RLSUP_DEMO_STEPS": str(steps),
                            "TERM": "xterm-256color"})
        self.tmuxes: list[Tmux] = []

    def sh(self, command: str, *, timeout: float = 120.0, env: dict | None = None,
           check: bool = False) -> subprocess.CompletedProcess:
        """``command`` through bash in this directory, output captured, no terminal, no stdin."""
        r = subprocess.run(["bash", "-c", command], cwd=self.path, env={**self.env, **(env or {})},
                           capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and r.returncode != 0:
            raise AssertionError(f"`{command}` exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        return r

    def run_dir(self, name: str = "demo") -> Path:
        return self.path / "runs" / name

    def events(self, name: str = "demo") -> list[dict]:
        return read_events(self.run_dir(name))

    def supervisor_pid(self, name: str = "demo") -> int:
        return int(json.loads((self.run_dir(name) / "rlsup.lock").read_text())["pid"])

    def wait_event(self, pred, *, name: str = "demo", timeout: float = PATIENCE, what: str = "event") -> dict:
        return wait_for(lambda: next((e for e in self.events(name) if pred(e)), None), timeout, 0.1, what=what)

    def component_pids(self, name: str = "demo") -> dict[str, int]:
        """component -> pid of the current attempt, from the monitors' records."""
        out = {}
        for p in sorted((self.run_dir(name) / "monitors").glob("*.json")):
            try:
                rec = json.loads(p.read_bytes().rstrip(b"\0 \n") or b"{}")
            except ValueError:
                continue
            if rec.get("status") == "running":
                out[rec["component"]] = rec["pid"]
        return out

    def running(self, names: set[str], name: str = "demo") -> dict[str, int]:
        """Wait until every one of ``names`` has a running attempt; component -> pid."""
        return wait_for(lambda: (lambda p: p if names <= set(p) else None)(self.component_pids(name)),
                        90, 0.1, what=f"{', '.join(sorted(names))} running")

    def tmux(self) -> Tmux:
        t = Tmux(self)
        self.tmuxes.append(t)
        return t

    def processes(self) -> list[int]:
        """Every live process of every run under ./runs: marked with it, or its supervisor."""
        from rlsup.supervisor.monitor.process import find_marked

        pids = []
        runs = self.path / "runs"
        for d in sorted(runs.iterdir()) if runs.is_dir() else []:
            pids += [p.pid for p in find_marked(str(d))]
            try:
                pid = int(json.loads((d / "rlsup.lock").read_text())["pid"])
            except (OSError, ValueError, KeyError):
                continue
            from rlsup.supervisor.rundir.layout import RunPaths, is_locked

            if is_locked(RunPaths(d)) and pid_alive(pid):
                pids.append(pid)
        return pids

    def cleanup(self) -> None:
        for t in self.tmuxes:
            t.kill()
        runs = self.path / "runs"
        for d in sorted(runs.iterdir()) if runs.is_dir() else []:
            from rlsup.supervisor.rundir.layout import RunPaths, is_locked

            if is_locked(RunPaths(d)):
                with _quiet():
                    self.sh(f"rlsup down --run-dir {shlex.quote(str(d))}", timeout=60)
        for pid in self.processes():
            with _quiet():
                os.kill(pid, signal.SIGKILL)
        # Monitors whose components are gone stay for a supervisor to read their records: end them too.
        from rlsup.supervisor.monitor.process import is_monitor_of, records

        for d in sorted(runs.iterdir()) if runs.is_dir() else []:
            for _, rec in records(d / "monitors"):
                if is_monitor_of(rec, d):
                    with _quiet():
                        os.kill(int(rec["shim_pid"]), signal.SIGKILL)


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], (OSError, subprocess.SubprocessError, AssertionError))


@pytest.fixture
def workdir(tmp_path):
    w = Workdir(tmp_path)
    yield w
    w.cleanup()


# ---------------------------------------------------------------------- real tmux


class Tmux:
    """One private tmux server (its own socket) running one command in a 160x45 window; the shell
    prints ``JOURNEY-EXIT=<code>`` when the command ends and stays, so the last screen can be read."""

    def __init__(self, workdir: Workdir):
        self.workdir = workdir
        self.sock = f"rlsup-journey-{uuid.uuid4().hex[:10]}"
        self.started = False

    def __call__(self, *args: str) -> str:
        r = subprocess.run(["tmux", "-L", self.sock, "-f", "/dev/null", *args], capture_output=True, text=True,
                           timeout=10)
        if r.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {r.stderr}")
        return r.stdout

    def run(self, command: str, *, env: dict | None = None) -> None:
        """Type-free start of ``command`` (as a user would type it) in the window's shell."""
        environ = {**self.workdir.env, **(env or {})}
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in environ.items()
                           if k in ("PATH", "HOME", "TERM") or k.startswith("RLSUP_"))
        line = (f"cd {shlex.quote(str(self.workdir.path))} && export {exports} && {command}; "
                f"echo JOURNEY-EXIT=$?; sleep 600")
        if self.started:
            # A fresh server on a fresh socket: killing the last session makes the old server exit,
            # and a new session asked of it meanwhile fails ("server exited unexpectedly").
            self.kill()
            self.sock = f"rlsup-journey-{uuid.uuid4().hex[:10]}"
        self("new-session", "-d", "-s", "j", "-x", "160", "-y", "45", "bash", "-c", line)
        self.started = True
        self("set-option", "-t", "j", "status", "off")
        self("set-option", "-s", "escape-time", "0")
        self("set-option", "-g", "window-size", "manual")
        self("resize-window", "-t", "j", "-x", "160", "-y", "45")

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "j")

    def wait(self, pred, timeout: float = PATIENCE, what: str = "screen") -> str:
        last = ""

        def ok() -> bool:
            nonlocal last
            last = self.screen()
            return bool(pred(last))

        try:
            wait_for(ok, timeout, 0.2, what=what)
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- screen ---\n{last}") from None
        return last

    def wait_text(self, text: str, timeout: float = PATIENCE) -> str:
        return self.wait(lambda s: text in s, timeout, what=f"{text!r} on the screen")

    def exit_code(self, timeout: float = PATIENCE) -> int:
        s = self.wait(lambda s: "JOURNEY-EXIT=" in s, timeout, what="the command to end")
        return int(re.search(r"JOURNEY-EXIT=(\d+)", s).group(1))

    def keys(self, *keys: str) -> None:
        self("send-keys", "-t", "j", *keys)

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True, timeout=10)


def needs_tmux() -> pytest.MarkDecorator:
    return pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def wait_gone(pids, timeout: float = PATIENCE) -> None:
    wait_for(lambda: not [p for p in pids if pid_alive(p)], timeout, 0.1, what=f"pids {sorted(pids)} to end")


def end_the_run_from_the_tui(tui: Tmux, w: Workdir, pids) -> None:
    """`Q` then `y` in the TUI: it exits 0, the run's components are gone and its end is journaled."""
    tui.keys("Q")
    tui.wait_text("end the run?", 10)
    tui.keys("y")
    assert tui.exit_code(60) == 0
    wait_gone(pids)
    # The supervisor journals the run's end just after its last component is gone.
    wait_for(lambda: w.events()[-1]["kind"] == "run_ended", 30, what="run_ended in the journal")


def table_row(screen: str, name: str) -> str:
    """The component table's row of ``name`` on a TUI screen."""
    for line in screen.splitlines():
        if re.search(rf"(^|[\s│┃|]){re.escape(name)}\s", line) and ("running" in line or "stopped" in line
                                                                    or "starting" in line or "pending" in line):
            return line
    return ""


__all__ = ["PATIENCE", "PY", "README", "Tmux", "Workdir", "end_the_run_from_the_tui", "needs_tmux", "readme_command", "table_row", "time", "wait_for",
           "wait_gone"]
