"""Issue 43 item 2: a component's output never takes over the user's terminal.

A run (``up -d``) whose components print the escape sequences that matter: a full reset (``ESC c``), OSC
52 (the clipboard), OSC 0/2 (the title), the alternate screen, bracketed paste, CSI cursor moves and a
screen clear, the C1 CSI, and backspace overstrike (``SAFE`` shown as ``EVIL``); one reports a flag
carrying them and one dies with them in its exception. ``rlsup logs`` (and ``-f``), ``events``, ``why``,
``report`` and ``diagnose`` write to a real pseudo-terminal: what reaches it holds no control character
but tab and newline (the carriage returns of the tty's own newline translation aside), and the
sequences are shown as text (``^[c``). Piped, and with ``--raw``, the text is as it was. In tmux, the
lines before ``rlsup logs`` are still on the pane afterwards, its title is unchanged, no alternate
screen, no paste buffer set. The log file keeps every byte.
"""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import PY, cli_env
from tests.faults import harness
from tests.faults.harness import LIVENESS_S

fault_run, token = harness.fault_run, harness.token

EVIL_LINES = [
    "MARK-BEFORE",
    "reset:\x1bc:after-reset",
    "clipboard:\x1b]52;c;cHduZWQ=\x07:after-osc52",
    "title:\x1b]0;PWNED-TITLE\x07\x1b]2;PWNED-TITLE2\x1b\\:after-title",
    "altscreen:\x1b[?1049h:after-alt",
    "paste:\x1b[?2004h:after-paste",
    "cursor:\x1b[2J\x1b[H\x1b[5A\x1b[10D:after-cursor",
    "c1:\u009b2J:after-c1",
    "charset:\x1b(0:after-charset",
    "overstrike:SAFE\b\b\b\bEVIL",
    "bell:\x07:after-bell",
    "rlsup-flag: evil_flag: reset \x1bc and SAFE\b\b\b\bEVIL in a flag",
    "MARK-END",
]
EVIL_PY = f"""
import sys, time
for line in {EVIL_LINES!r}:
    sys.stdout.write(line + "\\n")
sys.stdout.flush()
time.sleep(100000)
"""
CRASH_PY = r"""
import sys
sys.stderr.write('Traceback (most recent call last):\n  File "/app/train.py", line 3, in <module>\n'
                 'ValueError: bad batch \x1bc\x1b]2;TRACE-TITLE\x07 SAFE\b\b\b\bEVIL\n')
sys.exit(1)
"""
CONFIG = """
name: evil
components:
  evil:
    command: ["{py}", "{tmp}/evil.py"]
    stop: {timeout: 5}
  crash:
    command: ["{py}", "{tmp}/crash.py"]
    restart: {policy: never}
"""
# What a terminal must never receive from rlsup: every C0 control but tab and newline (a lone CR: the
# tty turns "\n" into "\r\n" itself), DEL, and the C1 controls (UTF-8 encoded).
FORBIDDEN = re.compile(rb"[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f]|\r(?!\n)|\xc2[\x80-\x9f]")


def _in_pty(argv: list[str], env: dict[str, str], cwd: Path, *, until: bytes | None = None) -> bytes:
    """Run ``argv`` with stdout and stderr on a new pseudo-terminal; everything it wrote there. With
    ``until``: interrupt it (SIGINT) once that text has arrived (a follower)."""
    master, slave = pty.openpty()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env, cwd=cwd,
                         start_new_session=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + LIVENESS_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the other side is closed
                    break
                if not chunk:
                    break
                out += chunk
            if until is not None and until in out and p.poll() is None:
                p.send_signal(signal.SIGINT)
                until = None
            if p.poll() is not None and not ready:
                break
        else:
            raise AssertionError(f"{argv} did not end; wrote {out[-2000:]!r}")
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(10)
        os.close(master)
    return out


@pytest.fixture
def evil_run(fault_run):
    run = fault_run()
    (run.tmp / "evil.py").write_text(EVIL_PY)
    (run.tmp / "crash.py").write_text(CRASH_PY)
    run.write_config(CONFIG)
    run.up("--skip-checks")
    run.wait_event(lambda e: e["kind"] == "flag" and e.get("type") == "evil_flag", what="the evil flag")
    run.wait_event(lambda e: e["kind"] == "fatal" and e["component"] == "crash", what="crash fatal")
    deadline = time.monotonic() + LIVENESS_S
    while b"MARK-END" not in (run.run_dir / "logs" / "evil.log").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    yield run
    run.down()


def _rlsup(run, *args: str) -> list[str]:
    return [PY, "-m", "rlsup.supervisor.cli", *args, "--run-dir", str(run.run_dir)]


def test_what_reaches_a_terminal_shows_control_sequences_and_obeys_none(evil_run) -> None:
    run = evil_run
    env = cli_env(run.env)
    seen = {
        "logs": _in_pty(_rlsup(run, "logs", "evil", "-n", "100"), env, run.tmp),
        "logs -f": _in_pty(_rlsup(run, "logs", "evil", "-n", "100", "-f"), env, run.tmp, until=b"MARK-END"),
        "logs crash": _in_pty(_rlsup(run, "logs", "crash"), env, run.tmp),
        "logs --attempt": _in_pty(_rlsup(run, "logs", "crash", "--attempt", "1"), env, run.tmp),
        "events": _in_pty(_rlsup(run, "events"), env, run.tmp),
        "why": _in_pty(_rlsup(run, "why", "crash"), env, run.tmp),
        "report": _in_pty(_rlsup(run, "report"), env, run.tmp),
        "diagnose": _in_pty([PY, "-m", "rlsup.supervisor.cli", "diagnose", str(run.run_dir / "logs" / "crash.log")],
                            env, run.tmp),
        "diagnose run": _in_pty([PY, "-m", "rlsup.supervisor.cli", "diagnose", str(run.run_dir)], env, run.tmp),
        "status": _in_pty(_rlsup(run, "status"), env, run.tmp),
    }
    for what, out in seen.items():
        bad = FORBIDDEN.search(out)
        assert bad is None, f"`rlsup {what}` wrote {bad.group()!r} to the terminal: ...{out[max(0, bad.start() - 80):bad.end() + 40]!r}"
    for what in ("logs", "logs -f"):
        out = seen[what]
        assert b"reset:^[c:after-reset" in out and b"overstrike:SAFE^H^H^H^HEVIL" in out, (what, out[-3000:])
        assert b"c1:<U+009B>2J:after-c1" in out and b"charset:^[(0:after-charset" in out, (what, out[-3000:])
        assert b"MARK-BEFORE" in out and b"MARK-END" in out
    assert b"SAFE^H^H^H^HEVIL" in seen["logs crash"] and b"SAFE^H^H^H^HEVIL" in seen["logs --attempt"]
    assert b"reset ^[c and SAFE^H^H^H^HEVIL in a flag" in seen["events"], seen["events"][-3000:]
    for what in ("why", "report", "diagnose", "diagnose run"):
        assert b"bad batch" in seen[what], (what, seen[what][-3000:])

    # --raw on a terminal, and any pipe: the text as it is (what `less -R` or a script wants).
    raw = _in_pty(_rlsup(run, "logs", "evil", "-n", "100", "--raw"), env, run.tmp)
    assert b"reset:\x1bc:after-reset" in raw and b"SAFE\b\b\b\bEVIL" in raw
    piped = run.cli("logs", "evil", "-n", "100")
    assert "reset:\x1bc:after-reset" in piped.stdout and "SAFE\b\b\b\bEVIL" in piped.stdout
    assert "bad batch \x1bc" in run.cli("events", "--json").stdout or "bad batch" in run.cli("events").stdout
    # The log file keeps every byte the component wrote.
    assert (run.run_dir / "logs" / "evil.log").read_bytes() == "".join(x + "\n" for x in EVIL_LINES).encode()


def _tmux(sock: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, timeout=30).stdout


def test_in_tmux_the_pane_keeps_its_history_title_and_screen(evil_run) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (.ci/run installs it): the pty test above still checks every byte")
    run = evil_run
    sock = f"rlsup-test-{uuid.uuid4().hex[:8]}"
    env = cli_env(run.env)
    env.pop("TMUX", None)
    script = run.tmp / "show.sh"
    script.write_text(f"echo EARLIER-LINE-1; echo EARLIER-LINE-2; {' '.join(_rlsup(run, 'logs', 'evil', '-n', '100'))}; "
                      "echo AFTER-LOGS; exec sleep 100000\n")
    subprocess.run(["tmux", "-L", sock, "-f", "/dev/null", "new-session", "-d", "-x", "200", "-y", "60",
                    "sh", str(script)], env=env, check=True, timeout=30)
    try:
        _tmux(sock, "set-option", "-g", "set-clipboard", "on")
        deadline = time.monotonic() + LIVENESS_S
        pane = ""
        while "AFTER-LOGS" not in pane:
            assert time.monotonic() < deadline, f"rlsup logs never finished in tmux; pane:\n{pane}"
            time.sleep(0.2)
            pane = _tmux(sock, "capture-pane", "-p", "-S", "-200")
        assert "EARLIER-LINE-1" in pane and "EARLIER-LINE-2" in pane, f"the pane was reset:\n{pane}"
        assert "overstrike:SAFE^H^H^H^HEVIL" in pane and "MARK-END" in pane, pane
        assert "PWNED" not in _tmux(sock, "display-message", "-p", "#{pane_title}")
        assert _tmux(sock, "display-message", "-p", "#{alternate_on}").strip() == "0"
        assert _tmux(sock, "list-buffers").strip() == "", "OSC 52 set a paste buffer"
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True, timeout=30)
