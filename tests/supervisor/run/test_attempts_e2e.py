"""Each attempt is judged on its own output (issue 26, item 1), through `rlsup up -d` as users run it.

The sequence that broke rlsup's verdicts: a trainer raises ValueError, is restarted, and its next
attempt is SIGKILLed while loading (the host OOM killer), printing nothing. The second exit used to be
diagnosed from the last 1,000 lines of the component's ring, which held the first attempt's
traceback: `repeated_error` fired and the trainer went fatal instead of being restarted.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.conftest import PATIENCE, PY, SCRIPTS, pid_alive, read_events, rlsup, wait_for, write_config

DEATHS = SCRIPTS / "deaths.py"


def _config(tmp_path: Path, deaths: str, *extra: str) -> Path:
    args = " ".join(extra)
    return write_config(tmp_path, f"""
        components:
          trainer:
            command: {PY} {DEATHS} --count {tmp_path}/count --deaths {deaths} {args}
            restart: {{policy: on-failure, backoff: {{initial: 0.2, max: 0.2}}}}
    """)


def _of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["kind"] == kind and e.get("component") == "trainer"]


def _running(d, attempt: int) -> list[dict]:
    """Wait until attempt ``attempt`` is up (its output says so); the journal then. A fatal first fails at once
    with what the journal says (the old verdict: `repeated_error` from the previous attempt's traceback)."""
    def up() -> bool:
        events = d.events()
        fatal = _of(events, "fatal")
        assert not fatal, f"trainer went fatal: {fatal[-1]['reason']}"
        if not any(e["attempt"] == attempt for e in _of(events, "started")):
            return False
        return f"run {attempt}: up and running" in d.cli("logs", "trainer", "--attempt", str(attempt)).stdout
    wait_for(up, 30, interval=0.2, what=f"attempt {attempt} running")
    return d.events()


def _no_value_error(e: dict) -> None:
    diag = e["diagnosis"]
    assert "ValueError" not in json.dumps(diag), diag
    assert diag["category"] in ("killed", "host_oom"), diag


def test_two_different_deaths_are_restarted_and_each_exit_names_its_own_cause(tmp_path, daemon):
    d = daemon(_config(tmp_path, "raise,kill9"))
    events = _running(d, 3)
    exits = _of(events, "exited")
    assert [e["attempt"] for e in exits] == [1, 2]
    assert "ValueError" in exits[0]["diagnosis"]["summary"]
    assert exits[1]["signal"] == "SIGKILL"
    _no_value_error(exits[1])  # attempt 2 printed nothing: its exit alone speaks, never attempt 1's traceback
    assert not [f for f in _of(events, "flag") if f["type"] in ("repeated_error", "step_crash")]
    assert not _of(events, "fatal")
    assert [e["attempt"] for e in _of(events, "restart_scheduled")] == [2, 3]
    starts = _of(events, "started")
    # Each attempt's output range is on its `started` event, in order.
    assert [s["attempt"] for s in starts] == [1, 2, 3]
    assert starts[0]["log_seq"] <= starts[1]["log_seq"] <= starts[2]["log_seq"]
    assert starts[1]["log_offset"] > starts[0]["log_offset"]
    # The tools that read an attempt read only it.
    assert "ValueError" in d.cli("logs", "trainer", "--attempt", "1").stdout
    two = d.cli("logs", "trainer", "--attempt", "2")
    assert two.returncode == 0 and "ValueError" not in two.stdout and "run 1" not in two.stdout, two.stdout
    rd = json.loads(rlsup("diagnose", str(d.run_dir), "--json").stdout)
    second = [f for f in rd["failures"] if f["component"] == "trainer" and f["attempt"] == 2]
    assert second and "ValueError" not in json.dumps(second[0]["diagnosis"]), second
    report = d.cli("report").stdout
    row2 = next(ln for ln in report.splitlines() if ln.startswith("| 2 |"))
    assert "ValueError" not in row2 and "SIGKILL" in row2, row2


def test_a_third_attempt_that_repeats_the_first_is_not_a_repeat(tmp_path, daemon):
    # raise, kill -9, raise: the ValueErrors are not consecutive (a SIGKILL came between), so no
    # repeated_error and no fatal: attempt 4 runs.
    d = daemon(_config(tmp_path, "raise,kill9,raise"))
    events = _running(d, 4)
    exits = _of(events, "exited")
    assert [e["attempt"] for e in exits] == [1, 2, 3]
    assert "ValueError" in exits[0]["diagnosis"]["summary"] and "ValueError" in exits[2]["diagnosis"]["summary"]
    _no_value_error(exits[1])
    assert not [f for f in _of(events, "flag") if f["type"] == "repeated_error"]
    assert not _of(events, "fatal")


def test_two_different_deaths_across_an_adoption(tmp_path, daemon):
    # Attempt 2 waits for a file before its SIGKILL; meanwhile its supervisor is killed -9 and a new
    # `rlsup up -d` adopts it. The new supervisor's ring holds attempt 1's traceback again (read back
    # from the log): the adopted attempt's exit must still be judged on its own output only.
    go = tmp_path / "go"
    cfg = _config(tmp_path, "raise,kill9", "--wait-file", str(go))
    d = daemon(cfg)
    wait_for(lambda: len(_of(d.events(), "started")) >= 2, 30, what="attempt 2 started")
    first = d.pid
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: not pid_alive(first), PATIENCE, what="the supervisor to die")
    up = rlsup("up", str(cfg), "-d", "--run-dir", str(d.run_dir), cwd=tmp_path)
    assert up.returncode == 0, up.stdout + up.stderr
    adopted = d.wait_event(lambda e: e["kind"] == "adopted" and e["component"] == "trainer", 30, what="adopted")
    assert adopted["attempt"] == 2
    go.write_text("")
    events = _running(d, 3)
    exits = _of(events, "exited")
    assert [e["attempt"] for e in exits] == [1, 2]
    assert exits[1]["signal"] == "SIGKILL"
    _no_value_error(exits[1])
    assert not [f for f in _of(events, "flag") if f["type"] in ("repeated_error", "step_crash")]
    assert not _of(events, "fatal")
    assert "ValueError" not in d.cli("logs", "trainer", "--attempt", "2").stdout
    assert read_events(d.run_dir)  # the journal is whole
