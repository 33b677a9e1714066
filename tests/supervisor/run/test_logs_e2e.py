"""Log capture end to end: a 1M-line flood lands on disk byte for byte; terminal noise is normalised."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import SCRIPTS, write_config


def test_flood_every_line_on_disk(tmp_path, headless):
    n = 1_000_000
    cfg = write_config(tmp_path, f"""
        components:
          flood:
            command: ["{{py}}", "{{scripts}}/flood.py", "{n}"]
            progress: {{pattern: 'Step (?P<step>\\d+)/(?P<total>\\d+) \\| loss (?P<loss>[\\d.]+)'}}
    """)
    h = headless(cfg)
    assert h.wait(120) == 0
    expected = subprocess.run([sys.executable, str(SCRIPTS / "flood.py"), str(n)], capture_output=True).stdout
    got = (h.run_dir / "logs" / "flood.log").read_bytes()
    assert len(got) == len(expected) and got == expected
    exited = [e for e in h.events() if e["kind"] == "exited"][0]
    assert exited["step"] == 1000


def test_ansi_cr_long_lines_and_bad_utf8(tmp_path, headless):
    cfg = write_config(tmp_path, """
        components:
          noisy:
            command: ["{py}", "{scripts}/ansi.py"]
            logs: {line_cap: 1000}
    """)
    h = headless(cfg, "--logs")
    assert h.wait() == 0
    raw = (h.run_dir / "logs" / "noisy.log").read_bytes()
    assert b"\x1b[32mgreen" in raw and b"\xff\xfe" in raw and b"\r 25%" in raw  # byte-exact on disk
    shown = [line.split(" | ", 1)[1] for line in h.output.splitlines() if line.startswith("noisy ") and " | " in line]
    assert shown[0] == "green plain done"
    assert shown[1] == "100%|##########| 100/100"
    assert shown[2] == "bad \ufffd\ufffd bytes"
    assert shown[3] == "L" * 1000 + " …[truncated 19000 chars]"
    assert shown[4] == "wide 你好 ✓"
    assert "\x1b" not in h.output


def test_an_exit_seen_late_still_counts_the_whole_output(tmp_path, headless):
    """The supervisor was stopped (SIGSTOP, a swap storm) while a component flooded and exited: on waking
    it must read everything the monitor wrote before judging the exit (the last step is a success,
    not a false success at whatever step it had read up to), and state.json must end at the last step."""
    import json
    import os
    import signal

    from tests.conftest import wait_for

    n = 300_000
    cfg = write_config(tmp_path, f"""
        components:
          flood:
            command: ["sh", "-c", "sleep 1; exec {{py}} {{scripts}}/flood.py {n}"]
            progress: {{pattern: 'Step (?P<step>\\d+)/(?P<total>\\d+) \\| loss (?P<loss>[\\d.]+)'}}
    """)
    h = headless(cfg)
    started = h.wait_event(lambda e: e["kind"] == "started", what="started")
    sup = int(json.loads((h.run_dir / "rlsup.lock").read_text())["pid"])
    os.kill(sup, signal.SIGSTOP)
    try:
        record = h.run_dir / "monitors" / "flood.1.json"
        wait_for(lambda: record.exists() and json.loads(record.read_text())["status"] == "exited", 60,
                 what="the flood to end while the supervisor is stopped")
        assert started["pid"] and (h.run_dir / "logs" / "flood.log").stat().st_size > 20 << 20
    finally:
        os.kill(sup, signal.SIGCONT)
    assert h.wait(120) == 0
    ev = h.events()
    exited = [e for e in ev if e["kind"] == "exited"]
    assert len(exited) == 1 and exited[0]["step"] == n // 1000
    assert not any(e["kind"] == "flag" and e["type"] == "false_success" for e in ev)
    assert json.loads((h.run_dir / "state.json").read_text())["components"]["flood"]["step"] == n // 1000
