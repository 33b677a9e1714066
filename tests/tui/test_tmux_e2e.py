"""End to end: `rlsup up CONFIG` in a real tmux session, driven with send-keys and read with
capture-pane. Restart a component from the TUI, see it restart, detach with q (training keeps
running), then `rlsup down`; scroll a log by keyboard and copy an excerpt to a file and to
tmux's paste buffer."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import PATIENCE, PY, cli_env, read_events, rlsup, wait_for, write_config

CONFIG = """
name: tmuxe2e
components:
  ticker:
    command: ["{py}", "-u", "-c", "import time\\nfor i in range(1, 100000):\\n    print(f'Step {i}/100000 | reward {i/1e5}', flush=True)\\n    time.sleep(0.1)"]
    progress: {preset: rlsup}
  sleeper:
    command: ["{py}", "-u", "-c", "import time\\nprint('sleeper up', flush=True)\\ntime.sleep(1000)"]
    depends_on: [ticker]
"""


def _cli_has_up_with_tui() -> bool:
    r = subprocess.run([PY, "-m", "rlsup.supervisor.cli", "up", "--help"], capture_output=True, text=True)
    return r.returncode == 0 and "--detach" in r.stdout


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
    pytest.mark.skipif(not _cli_has_up_with_tui(), reason="this rlsup CLI has no daemon mode yet"),
]


class Tmux:
    """One private tmux server (its own socket) with one 200x50 window."""

    def __init__(self) -> None:
        self.sock = f"rlsup-test-{uuid.uuid4().hex[:10]}"

    def __call__(self, *args: str) -> str:
        r = subprocess.run(["tmux", "-L", self.sock, "-f", "/dev/null", *args], capture_output=True, text=True,
                           timeout=10)
        if r.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {r.stderr}")
        return r.stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "t")

    def wait_screen(self, text: str, timeout: float = 30.0) -> str:
        last = ""

        def seen() -> bool:
            nonlocal last
            last = self.screen()
            return text in last

        try:
            wait_for(seen, timeout, interval=0.2, what=f"{text!r} on the screen")
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- screen ---\n{last}") from None
        return last

    def wait_gone(self, text: str, timeout: float = 10.0) -> None:
        last = ""

        def gone() -> bool:
            nonlocal last
            last = self.screen()
            return text not in last

        try:
            wait_for(gone, timeout, interval=0.2, what=f"{text!r} to go away")
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- screen ---\n{last}") from None

    def keys(self, *keys: str) -> None:
        self("send-keys", "-t", "t", *keys)

    def start_up(self, cwd: Path, cfg: Path, run_dir: Path, extra: dict[str, str] | None = None,
                 command: tuple[str, ...] = ("up",)) -> None:
        """`rlsup up CFG` (or ``command`` without CFG) in a 200x50 window; the shell then prints its exit code
        and stays."""
        env = cli_env({"TERM": "xterm-256color"})
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in {**env, **(extra or {})}.items()
                           if k in ("PATH", "RLSUP_GPU_SAMPLER", "HOME", *(extra or {})))
        args = [*command, *([str(cfg)] if command == ("up",) else []), "--run-dir", str(run_dir)]
        cmd = (f"cd {shlex.quote(str(cwd))} && env {exports} {shlex.quote(PY)} -m rlsup.supervisor.cli "
               f"{shlex.join(args)}; echo RLSUP-TUI-EXIT=$?; sleep 600")
        self("new-session", "-d", "-s", "t", "-x", "200", "-y", "50", cmd)
        self("set-option", "-t", "t", "status", "off")
        self("set-option", "-s", "escape-time", "0")  # a lone Escape, not the start of alt+key
        self("set-option", "-g", "window-size", "manual")  # tmux load-buffer from the TUI is a client too
        self("resize-window", "-t", "t", "-x", "200", "-y", "50")

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True, timeout=10)


def test_restart_from_the_tui_then_detach(tmp_path):
    cfg = write_config(tmp_path, CONFIG)
    run_dir = tmp_path / "run"
    tmux = Tmux()
    try:
        tmux.start_up(tmp_path, cfg, run_dir)
        assert tmux("display-message", "-p", "-t", "t", "#{window_width}x#{window_height}").strip() == "200x50"
        tmux.wait_screen("sleeper", 60)
        wait_for(lambda: "running" in tmux.screen() and "sleeper up" in tmux.screen(), 30, 0.2,
                 what="both components running in the TUI")

        tmux.keys("1", "r")
        tmux.wait_screen("Restart ticker?")
        tmux.keys("y")

        def restarted() -> bool:
            return any(e["kind"] == "started" and e["component"] == "ticker" and e.get("attempt") == 2
                       for e in read_events(run_dir))

        wait_for(restarted, 30, 0.2, what="ticker attempt 2 in the journal")
        screen = tmux.wait_screen("2/1")  # att/rst column of the table
        assert "ticker" in screen

        tmux.keys("e")
        tmux.wait_screen("event timeline")
        tmux.wait_screen("(attempt 2)")  # the timeline lists the new start
        tmux.keys("Escape")
        tmux.wait_gone("event timeline")

        tmux.keys("q")
        screen = tmux.wait_screen("RLSUP-TUI-EXIT=0")
        assert "training continues; re-attach with: rlsup attach" in screen
        st = rlsup("status", "--run-dir", str(run_dir))
        assert st.returncode == 0 and "running" in st.stdout, st.stdout + st.stderr
        assert not any(e["kind"] == "run_ended" for e in read_events(run_dir))
    finally:
        tmux.kill()
        down = rlsup("down", "--run-dir", str(run_dir), timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr
    assert any(e["kind"] == "run_ended" for e in read_events(run_dir))


def test_the_tui_takes_the_terminals_size_not_columns_and_lines_left_in_the_environment(tmp_path):
    """COLUMNS/LINES exported by a shell profile (or by readline in the process that started tmux) pinned the
    TUI at 80x24 in a 200x50 window, through every resize: Textual sizes its screen by shutil.get_terminal_size,
    which believes them before the terminal."""
    cfg = write_config(tmp_path, CONFIG)
    run_dir = tmp_path / "run"
    tmux = Tmux()

    def widest() -> int:  # the footer's key bar spans the screen's width
        return max((len(line.rstrip()) for line in tmux.screen().splitlines()), default=0)

    try:
        tmux.start_up(tmp_path, cfg, run_dir, {"COLUMNS": "80", "LINES": "24"})
        tmux.wait_screen("sleeper", 60)
        wait_for(lambda: widest() > 150, 30, 0.2, what="the TUI as wide as its 200-column window")
        tmux("resize-window", "-t", "t", "-x", "120", "-y", "40")
        wait_for(lambda: 100 < widest() <= 120, 30, 0.2, what="the TUI following the window to 120 columns")
        assert len(tmux.screen().splitlines()) == 40
    finally:
        tmux.kill()
        down = rlsup("down", "--run-dir", str(run_dir), timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr


LINES_CONFIG = """
name: tmuxlines
components:
  lines:
    command: ["{py}", "-u", "-c", "import time\\nfor i in range(1, 301):\\n    print(f'line {i:03d} of the numbered log', flush=True)\\ntime.sleep(1000)"]
"""


def test_scroll_a_log_by_keyboard_and_copy_an_excerpt(tmp_path):
    """The keys a user in tmux over SSH has: select, zoom, g/j/k/G to scroll, copy mode, the
    excerpt written to a file and put in tmux's paste buffer (what OSC 52 does not reach)."""
    cfg = write_config(tmp_path, LINES_CONFIG)
    run_dir = tmp_path / "run"
    # A short path the dialog's field shows whole (a pytest-xdist worker's tmp_path is longer than the field).
    out = Path("/tmp") / f"rlsup-excerpt-{uuid.uuid4().hex[:8]}.log"
    tmux = Tmux()
    try:
        tmux.start_up(tmp_path, cfg, run_dir)
        assert tmux("display-message", "-p", "-t", "t", "#{window_width}x#{window_height}").strip() == "200x50"
        tmux.wait_screen("line 300 of the numbered log", 60)

        tmux.keys("1")
        tmux.keys("z")  # zoomed: the arrows and j/k scroll the log
        tmux.keys("g")
        screen = tmux.wait_screen("line 001 of the numbered log")
        assert "paused" in screen and "line 300" not in screen
        # The first row is the marker of attempt 1 (its `started` event says where its output begins).
        assert "── attempt 1 ·" in screen.split("line 001 of")[0]
        tmux.keys("j", "j", "j", "j")
        screen = tmux.wait_screen("line 004 of the numbered log")
        wait_for(lambda: "line 003 of" not in tmux.screen(), PATIENCE, 0.1, what="line 3 scrolled away")
        tmux.keys("k")
        tmux.wait_screen("line 003 of the numbered log")
        tmux.keys("G")
        screen = tmux.wait_screen("line 300 of the numbered log")
        assert "follow" in screen

        tmux.keys("g")
        tmux.wait_screen("line 001 of the numbered log")
        rows = [r for r in tmux.screen().splitlines() if r.startswith("line ")]
        last = rows[-1].split()[1]  # copy mode starts on the last line in view
        tmux.keys("c")
        tmux.wait_screen("COPY 1 line")
        tmux.keys("k", "k")
        tmux.wait_screen("COPY 3 lines")
        tmux.keys("s")
        tmux.wait_screen("Write 3 line(s) of lines to:")
        tmux.wait_screen("rlsup-lines-")  # the default path, in the focused input
        tmux.keys("C-u")
        tmux.wait_gone("rlsup-lines-")  # as a user would: see the field empty, then type
        tmux("send-keys", "-t", "t", "-l", str(out))
        tmux.wait_screen(out.name)
        tmux.keys("Enter")
        try:
            wait_for(lambda: out.exists() and out.read_text().count("\n") == 3, PATIENCE, 0.1, what="the excerpt file")
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- screen ---\n{tmux.screen()}\n--- files ---\n"
                                 f"{sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob('*'))}") from None
        n = int(last)
        expected = [f"line {i:03d} of the numbered log" for i in (n - 2, n - 1, n)]
        assert out.read_text().splitlines() == expected
        on_disk = (run_dir / "logs" / "lines.log").read_text().splitlines()
        assert on_disk[n - 3:n] == expected  # the very lines the component wrote

        tmux.keys("c")
        tmux.wait_screen("COPY 1 line")
        tmux.keys("k")
        tmux.keys("y")

        def buffered() -> bool:
            r = subprocess.run(["tmux", "-L", tmux.sock, "show-buffer"], capture_output=True, text=True, timeout=10)
            return r.returncode == 0 and r.stdout.splitlines() == expected[1:]

        wait_for(buffered, PATIENCE, 0.1, what="the excerpt in tmux's paste buffer")
        tmux.wait_gone("COPY")

        tmux.keys("q")
        screen = tmux.wait_screen("RLSUP-TUI-EXIT=0")
        assert "training continues" in screen
    finally:
        tmux.kill()
        out.unlink(missing_ok=True)
        down = rlsup("down", "--run-dir", str(run_dir), timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr


@pytest.mark.parametrize("opened", ["before the end", "after the end"])
def test_a_tui_on_an_ended_run_comes_back_when_the_run_is_resumed(tmp_path, opened):
    """`rlsup up CONFIG` in tmux, then `rlsup down` from another shell (or `rlsup attach` opened after it): the
    TUI says the run ended, read-only. Then `rlsup up CONFIG -d --resume` from that shell: the TUI attaches to
    the new supervisor by itself, its command keys work again (it stayed "run ended · read-only" while the
    resumed run trained)."""
    cfg = write_config(tmp_path, CONFIG)
    run_dir = tmp_path / "run"
    tmux = Tmux()
    try:
        if opened == "before the end":
            tmux.start_up(tmp_path, cfg, run_dir)
            wait_for(lambda: "running" in tmux.screen() and "sleeper up" in tmux.screen(), 60, 0.2,
                     what="both components running in the TUI")
        else:
            up = rlsup("up", str(cfg), "--run-dir", str(run_dir), "-d", timeout=60)
            assert up.returncode == 0, up.stdout + up.stderr
            wait_for(lambda: "sleeper up" in (run_dir / "logs" / "sleeper.log").read_text()
                     if (run_dir / "logs" / "sleeper.log").exists() else False, 60, 0.2, what="the sleeper up")
        down = rlsup("down", "--run-dir", str(run_dir), timeout=60)
        assert down.returncode == 0, down.stdout + down.stderr
        if opened == "after the end":
            tmux.start_up(tmp_path, cfg, run_dir, command=("attach",))  # read from the run dir
        tmux.wait_screen("run ended · read-only", 30)

        up = rlsup("up", str(cfg), "--run-dir", str(run_dir), "-d", "--resume", timeout=60)
        assert up.returncode == 0, up.stdout + up.stderr
        tmux.wait_screen("● attached", 60)  # (it looks every 2 s)
        tmux.wait_gone("run ended")
        tmux.wait_screen("2/0", 30)  # the att/rst column: the resumed run's second attempt of each
        tmux.keys("1", "r")
        tmux.wait_screen("Restart ticker?")  # not "r: not possible" (an ended run is read-only)
        tmux.keys("y")
        wait_for(lambda: any(e["kind"] == "started" and e["component"] == "ticker" and e.get("attempt") == 3
                             for e in read_events(run_dir)), 30, 0.2, what="ticker attempt 3 in the journal")
        tmux.keys("q")
        tmux.wait_screen("RLSUP-TUI-EXIT=0")
    finally:
        tmux.kill()
        down = rlsup("down", "--run-dir", str(run_dir), timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr
