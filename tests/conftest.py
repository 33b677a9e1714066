"""Shared fixtures: run rlsup as a real process against small configs written per test."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    text = textwrap.dedent(text).replace("{py}", PY).replace("{scripts}", str(SCRIPTS))
    p = tmp_path / name
    p.write_text(text)
    return p


def read_events(run_dir: Path) -> list[dict]:
    p = run_dir / "events.jsonl"
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def kinds(events: list[dict], component: str | None = None) -> list[str]:
    return [e["kind"] for e in events if component is None or e.get("component") == component]


def wait_for(pred, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Headless:
    """`rlsup up CONFIG --headless` as a real child process."""

    def __init__(self, config: Path, run_dir: Path, *extra: str, env: dict | None = None):
        self.run_dir = run_dir
        e = dict(os.environ)
        e.update(env or {})
        e.setdefault("RLSUP_GPU_SAMPLER", "none")
        # As in an activated venv (the README's commands): `python` is the interpreter running the tests.
        e["PATH"] = os.path.dirname(PY) + os.pathsep + e.get("PATH", "")
        self.proc = subprocess.Popen(
            [PY, "-m", "rlsup.supervisor.cli", "up", str(config), "--headless", "--run-dir", str(run_dir), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e, cwd=config.parent,
        )
        self.output = ""

    def events(self) -> list[dict]:
        return read_events(self.run_dir)

    def wait_event(self, pred, timeout: float = 20.0, what: str = "event") -> dict:
        def find():
            for e in self.events():
                if pred(e):
                    return e
            if self.proc.poll() is not None:
                raise AssertionError(f"supervisor exited ({self.proc.returncode}) before {what}:\n{self.read()}")
            return None

        return wait_for(find, timeout, what=what)

    def wait(self, timeout: float = 60.0) -> int:
        try:
            rc = self.proc.wait(timeout)
        finally:
            self.read()
        return rc

    def read(self) -> str:
        if self.proc.poll() is not None and self.proc.stdout and not self.proc.stdout.closed:
            self.output += self.proc.stdout.read()
            self.proc.stdout.close()
        return self.output

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)


@pytest.fixture
def headless(tmp_path):
    started: list[Headless] = []

    def start(config: Path, *extra: str, env: dict | None = None) -> Headless:
        h = Headless(config, tmp_path / "run", *extra, env=env)
        started.append(h)
        return h

    yield start
    for h in started:
        if h.proc.poll() is None:
            h.proc.send_signal(signal.SIGTERM)
            try:
                h.proc.wait(30)
            except subprocess.TimeoutExpired:
                h.proc.kill()
        h.read()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is not alive for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False
