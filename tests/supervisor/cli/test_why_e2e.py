"""`rlsup why NAME [--attempt N]`: one field answers why an attempt was started (issue 26, item 2).

Real processes under a real supervisor started with `rlsup up -d`, asked with the real CLI while the run
goes on and after it ended: a restart by an exit, by a user command, by a dependency (restart_with) and
by a probe each leave a typed `cause` on `started`, and the chain leads to the event that triggered it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import PY, SCRIPTS, read_events, rlsup, wait_for, write_config

DEATHS = SCRIPTS / "deaths.py"


def _starts(run_dir: Path, name: str) -> list[dict]:
    return [e for e in read_events(run_dir) if e["kind"] == "started" and e["component"] == name]


def _why(d, *args: str) -> dict:
    r = d.cli("why", *args, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_why_by_exit_then_by_user_on_a_live_and_an_ended_run(tmp_path, daemon):
    cfg = write_config(tmp_path, f"""
        components:
          trainer:
            command: {PY} {DEATHS} --count {tmp_path}/count --deaths raise
            restart: {{policy: on-failure, backoff: {{initial: 0.2, max: 0.2}}}}
    """)
    d = daemon(cfg)
    wait_for(lambda: len(_starts(d.run_dir, "trainer")) >= 2, 30, what="attempt 2")
    x = _why(d, "trainer")  # the latest attempt: 2, started because attempt 1 exited
    assert x["attempt"] == 2 and x["cause"]["by"] == "exit" and "ValueError" in x["cause"]["reason"]
    assert x["chain"][0]["kind"] == "exited" and x["chain"][0]["attempt"] == 1
    assert x["chain"][0]["seq"] == x["cause"]["seq"]
    first = _why(d, "trainer", "--attempt", "1")
    assert first["cause"]["by"] == "run" and first["exited"]["attempt"] == 1
    assert first["then"]["kind"] == "restart_scheduled" and first["then"]["cause"]["by"] == "exit"
    text = d.cli("why", "trainer").stdout
    assert "trainer attempt 2" in text and "why:      exit: exit 1: ValueError: bad batch shape" in text, text

    assert d.cli("restart", "trainer").returncode == 0
    wait_for(lambda: len(_starts(d.run_dir, "trainer")) >= 3, 30, what="attempt 3")
    x3 = _why(d, "trainer", "--attempt", "3")
    assert x3["cause"]["by"] == "user" and "rlsup restart trainer" in x3["cause"]["reason"]
    assert x3["chain"][0]["kind"] == "command" and x3["chain"][0]["command"] == "restart"
    x2 = _why(d, "trainer", "--attempt", "2")  # how attempt 2 ended: stopped for the user's restart
    assert x2["stopping"]["cause"]["by"] == "user" and x2["next_attempt"] == 3

    assert d.cli("down", timeout=60).returncode == 0
    ended = _why(d, "trainer", "--attempt", "3")  # an ended run: the same answer, from the journal
    assert ended["cause"]["by"] == "user" and ended["stopping"]["cause"]["by"] == "shutdown"
    text = d.cli("why", "trainer", "--attempt", "3").stdout
    assert "because user: `rlsup restart trainer`" not in text or "why:      user" in text
    assert "why:      user: `rlsup restart trainer`" in text and "because shutdown" in text, text
    bad = d.cli("why", "trainer", "--attempt", "9")
    assert bad.returncode == 1 and "no start of attempt 9" in bad.stderr


def test_why_by_a_dependency_restart_with(tmp_path, daemon):
    cfg = write_config(tmp_path, """
        components:
          inference:
            command: sleep 100000
          orchestrator:
            command: sleep 100000
            depends_on: [inference]
            restart_with: [inference]
    """)
    d = daemon(cfg)
    wait_for(lambda: _starts(d.run_dir, "orchestrator"), 30, what="orchestrator started")
    x1 = _why(d, "orchestrator")
    assert x1["cause"]["by"] == "run" and x1["chain"][0]["kind"] == "run_started"
    assert d.cli("restart", "inference").returncode == 0
    wait_for(lambda: len(_starts(d.run_dir, "orchestrator")) >= 2, 30, what="orchestrator attempt 2")
    x = _why(d, "orchestrator", "--attempt", "2")
    assert x["cause"]["by"] == "dependency" and x["cause"]["component"] == "inference"
    # The chain leads to the command that restarted the leader.
    assert x["chain"][0]["kind"] == "command" and x["chain"][0]["component"] == "inference"


def test_why_by_a_probe(tmp_path, daemon):
    cfg = write_config(tmp_path, f"""
        components:
          server:
            command: sleep 100000
            ready: {{file: {tmp_path}/never-there, timeout: 1}}
            restart: {{backoff: {{initial: 0.2, max: 0.2}}}}
    """)
    d = daemon(cfg)
    wait_for(lambda: len(_starts(d.run_dir, "server")) >= 2, 30, what="a restart after the readiness timeout")
    x = _why(d, "server", "--attempt", "2")
    assert x["cause"]["by"] == "probe" and "not ready within 1s" in x["cause"]["reason"]
    assert x["chain"][0]["kind"] == "stopping" and x["chain"][0]["cause"]["by"] == "probe"
    assert rlsup("why", "--help").stdout.count("--attempt") >= 1
