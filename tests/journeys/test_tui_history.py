"""Journey: a component writes 12,000+ lines; the user detaches with `q`, re-attaches with
`rlsup attach`, presses Home and reads line 1, and `/` finds a line only the log file holds; then
the same on the ended run (read-only), after `rlsup down`. Real `rlsup up` in real tmux, keys sent
with send-keys, the screen read with capture-pane."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import PY, cli_env, rlsup, wait_for, write_config
from tests.journeys.conftest import PATIENCE

N = 12_500
CONFIG = """
name: deeplog
components:
  writer:
    command: ["{py}", "-u", "-c", "import sys, time\\nfor i in range(1, {n} + 1):\\n    sys.stdout.write(f'row {{i:06d}} of the writer\\\\n')\\nsys.stdout.flush()\\nprint('writer done', flush=True)\\ntime.sleep(3600)"]
"""

# The pane's title row following its live lines (" 1 writer  running  follow  older lines on disk (Home)"); the
# component table's row of the same component has no "follow", the footer's is "f follow".
LIVE_TITLE = re.compile(r"^ 1 writer  \S+  follow(  |$)", re.M)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


class Tmux:
    """A private tmux server (own socket), one 120x40 window running a shell command."""

    def __init__(self) -> None:
        self.sock = f"rlsup-journey-{uuid.uuid4().hex[:10]}"

    def __call__(self, *args: str) -> str:
        r = subprocess.run(["tmux", "-L", self.sock, "-f", "/dev/null", *args], capture_output=True, text=True,
                           timeout=10)
        if r.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {r.stderr}")
        return r.stdout

    def run(self, cwd: Path, argv: list[str]) -> None:
        env = cli_env({"TERM": "xterm-256color"})
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if k in ("PATH", "RLSUP_GPU_SAMPLER", "HOME"))
        cmd = (f"cd {shlex.quote(str(cwd))} && env {exports} {' '.join(map(shlex.quote, argv))}; "
               "echo RLSUP-EXIT=$?; sleep 600")
        self("new-session", "-d", "-s", "t", "-x", "120", "-y", "40", cmd)
        self("set-option", "-t", "t", "status", "off")
        self("set-option", "-s", "escape-time", "0")

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "t")

    def wait_screen(self, text: str, timeout: float = PATIENCE) -> str:
        return self.wait_until(lambda screen: text in screen, f"{text!r} on the screen", timeout)

    def wait_until(self, pred: Callable[[str], bool], what: str, timeout: float = PATIENCE) -> str:
        """The first screen ``pred`` holds for (the last one seen in the error otherwise)."""
        last = ""

        def seen() -> bool:
            nonlocal last
            last = self.screen()
            return pred(last)

        try:
            wait_for(seen, timeout, interval=0.2, what=what)
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- screen ---\n{last}") from None
        return last

    def keys(self, *keys: str) -> None:
        self("send-keys", "-t", "t", *keys)

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True, timeout=10)


def _reach_line_one_and_search(tmux: Tmux) -> None:
    tmux.wait_screen("writer")
    tmux.wait_screen(f"row {N:06d}")
    screen = tmux.wait_screen("older lines on disk (Home)")  # the pane says older lines exist
    assert "row 000001 " not in screen
    tmux.keys("1", "Enter", "Home")
    screen = tmux.wait_screen("row 000001 of the writer")
    assert "FROM DISK: lines 1–" in screen, screen
    tmux.keys("End")
    # Back on the live lines, following: the pane's title says so (the footer's "f follow" is always
    # there, so the word alone proves nothing), and the window read from disk is gone. The search
    # below then starts from the live lines and must reach into the file.
    tmux.wait_until(lambda s: "FROM DISK" not in s and "writer done" in s and LIVE_TITLE.search(s) is not None,
                    "the pane back on its live lines, following")
    tmux.keys("/")
    tmux.wait_screen("search the selected log")
    tmux.keys("-l", "row 000077 ")
    tmux.keys("Enter")
    screen = tmux.wait_screen("row 000077 of the writer")
    assert "FROM DISK" in screen, screen


def test_reattach_home_reaches_line_one_and_search_finds_old_lines(tmp_path):
    cfg = write_config(tmp_path, CONFIG.format(py=PY, n=N))
    run_dir = tmp_path / "run"
    cli = [PY, "-m", "rlsup.supervisor.cli"]
    tmux = Tmux()
    try:
        tmux.run(tmp_path, [*cli, "up", str(cfg), "--run-dir", str(run_dir)])
        tmux.wait_screen("writer done")
        tmux.keys("q")  # detach: training goes on
        tmux.wait_screen("RLSUP-EXIT=0")
        tmux.kill()

        tmux = Tmux()
        tmux.run(tmp_path, [*cli, "attach", "--run-dir", str(run_dir)])
        _reach_line_one_and_search(tmux)
        tmux.keys("q")
        tmux.wait_screen("RLSUP-EXIT=0")
        tmux.kill()

        # The ended run, read-only: the same depth.
        r = rlsup("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
        assert r.returncode == 0, r.stdout + r.stderr
        tmux = Tmux()
        tmux.run(tmp_path, [*cli, "attach", "--run-dir", str(run_dir)])
        _reach_line_one_and_search(tmux)
        tmux.keys("q")
        tmux.wait_screen("RLSUP-EXIT=0")
    finally:
        tmux.kill()
        rlsup("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=90)
