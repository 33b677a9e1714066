"""`rlsup up -d` and the CLI clients against a real daemon: status, logs, restart, events, down."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil

from rlsup.supervisor.monitor.process import find_marked
from rlsup.supervisor.rundir.layout import RunPaths, is_locked
from tests.conftest import PY, cli_env, pid_alive, read_events, rlsup, wait_for, write_config

TICKER = """
name: dtest
components:
  ticker:
    command: ["{py}", "-u", "-c", "import time\\nfor i in range(1, 100000):\\n    print(f'Step {i}/100000 | reward {i/1e5}', flush=True)\\n    time.sleep(0.05)"]
    progress: {preset: rlsup}
  sleeper:
    command: ["{py}", "-c", "import time; time.sleep(1000)"]
    depends_on: [ticker]
"""


def test_up_detached_then_clients(tmp_path, daemon):
    cfg = write_config(tmp_path, TICKER)
    d = daemon(cfg)
    assert "attach" in d.up.stdout and str(d.run_dir.name) in d.up.stdout
    paths = RunPaths(d.run_dir)
    assert oct(os.stat(d.run_dir).st_mode & 0o777) == "0o700"
    assert oct(os.stat(paths.sock).st_mode & 0o777) == "0o600"
    d.wait_event(lambda e: e["kind"] == "started" and e["component"] == "sleeper", what="sleeper started")
    wait_for(lambda: "Step" in d.cli("logs", "ticker", "-n", "3").stdout, what="ticker output")

    st = d.cli("status")
    assert st.returncode == 0, st.stderr
    assert "ticker" in st.stdout and "running" in st.stdout and "sleeper" in st.stdout

    js = json.loads(d.cli("status", "--json").stdout)
    assert set(js) >= {"run", "components", "gpus"}
    assert js["components"]["ticker"]["state"] == "running"
    assert js["components"]["ticker"]["attempt"] == 1
    wait_for(lambda: (json.loads(d.cli("status", "--json").stdout)["components"]["ticker"]["step"] or 0) > 3,
             what="progress in status")
    ticks = json.loads(d.cli("status", "--json").stdout)["run"]["ticks"]  # the supervisor's own lag (issue 44.2)
    assert ticks["count"] > 0 and ticks["late_max_ms"] >= ticks["late_p90_ms"] >= ticks["late_p50_ms"] >= 0

    logs = d.cli("logs", "ticker", "-n", "5")
    assert logs.returncode == 0
    lines = logs.stdout.splitlines()
    assert len(lines) == 5 and all(line.startswith("Step ") for line in lines)

    r = d.cli("restart", "sleeper")
    assert r.returncode == 0 and "restarting sleeper" in r.stdout
    d.wait_event(lambda e: e["kind"] == "started" and e["component"] == "sleeper" and e["attempt"] == 2,
                 what="sleeper attempt 2")
    cmd = next(e for e in d.events() if e["kind"] == "command")
    assert cmd["command"] == "restart" and cmd["by"] == "user" and cmd["client"] == "rlsup restart"

    bad = d.cli("restart", "nope")
    assert bad.returncode == 1 and "no component 'nope'" in bad.stderr

    ev = d.cli("events")
    assert ev.returncode == 0 and "started pid" in ev.stdout and "command restart" in ev.stdout

    st = d.cli("stop", "sleeper")
    assert st.returncode == 0
    d.wait_event(lambda e: e["kind"] == "stopped" and e["component"] == "sleeper", what="sleeper stopped")
    assert d.cli("stop", "sleeper").returncode == 1  # already stopped: refused, says why
    assert d.cli("start", "sleeper").returncode == 0
    d.wait_event(lambda e: e["kind"] == "started" and e["component"] == "sleeper" and e["attempt"] == 3,
                 what="sleeper attempt 3")

    pids = [p.pid for p in find_marked(str(d.run_dir))]
    sup_pid = d.pid
    assert pids
    down = d.cli("down", timeout=60)
    assert down.returncode == 0, down.stderr
    assert "no process of the run is left" in down.stdout
    assert not is_locked(paths)
    assert not pid_alive(sup_pid)
    assert not any(pid_alive(p) for p in pids)
    assert find_marked(str(d.run_dir)) == []
    assert read_events(d.run_dir)[-1]["kind"] == "run_ended"
    # Afterwards the run can still be read: its final state, clearly marked as ended.
    gone = d.cli("status")
    assert gone.returncode == 0, gone.stderr
    assert "no supervisor owns" in gone.stderr and "ended at" in gone.stderr
    assert "stopped by user (rlsup down)" in gone.stderr and "sleeper" in gone.stdout
    assert "run ended: stopped by user (rlsup down)" in gone.stdout


def test_discovery_under_runs_and_no_supervisor(tmp_path, daemon):
    r = rlsup("status", cwd=tmp_path)
    assert r.returncode == 1 and "no supervisor is running" in r.stderr and "rlsup up CONFIG" in r.stderr
    cfg = write_config(tmp_path, TICKER)
    d = daemon(cfg, run_dir=tmp_path / "runs" / "dtest")
    r = rlsup("status", cwd=tmp_path)  # no --run-dir: the single live run under ./runs
    assert r.returncode == 0 and "ticker" in r.stdout
    assert "rlsup attach\n" in d.up.stdout  # discovery finds it, so the hint needs no --run-dir


def test_daemon_outlives_its_terminal(tmp_path):
    """Start `rlsup up -d` from a shell in its own session that then exits (and is hung up)."""
    cfg = write_config(tmp_path, TICKER)
    run_dir = tmp_path / "run"
    script = f"{PY} -m rlsup.supervisor.cli up {cfg} -d --run-dir {run_dir}; echo launched"
    term = subprocess.Popen(["setsid", "sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=cli_env(), cwd=tmp_path)
    out, _ = term.communicate(timeout=60)
    assert "launched" in out
    owner = json.loads((run_dir / "rlsup.lock").read_text())["pid"]
    try:
        _check_survives(term, owner, run_dir)
    finally:
        if pid_alive(owner):
            os.kill(owner, signal.SIGKILL)
        for p in find_marked(str(run_dir)):
            p.kill()


def _check_survives(term: subprocess.Popen, owner: int, run_dir) -> None:
    # The launching session is gone; hang up whatever might still be in it, as a closing terminal would.
    try:
        os.killpg(term.pid, signal.SIGHUP)
    except ProcessLookupError:
        pass
    time.sleep(0.5)  # deliberate: nothing may happen to the daemon in this window
    assert pid_alive(owner)
    sup = psutil.Process(owner)
    assert os.getsid(owner) == owner  # own session: no controlling terminal to lose
    assert sup.terminal() is None
    os.kill(owner, signal.SIGHUP)  # a stray hangup is ignored by the daemon
    time.sleep(0.3)  # deliberate: the stray hangup must change nothing
    assert pid_alive(owner)
    r = rlsup("down", "--run-dir", str(run_dir), timeout=60)
    assert r.returncode == 0, r.stderr
    assert not pid_alive(owner)


def test_up_attaches_instead_of_starting_a_second(tmp_path, daemon):
    cfg = write_config(tmp_path, TICKER)
    d = daemon(cfg)
    pid = d.pid
    again = rlsup("up", str(cfg), "-d", "--run-dir", str(d.run_dir), cwd=tmp_path)
    assert again.returncode == 0
    assert "already running" in again.stderr and str(pid) in again.stderr
    assert d.pid == pid
    # Without -d and without a terminal it follows the event stream as text; end it with SIGINT.
    follow = subprocess.Popen([PY, "-m", "rlsup.supervisor.cli", "up", str(cfg), "--run-dir", str(d.run_dir)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=tmp_path)
    # SIGINT once the replay is on screen (the handler is installed before the session starts).
    out_lines: list[str] = []
    reader = threading.Thread(target=lambda: out_lines.extend(follow.stdout), daemon=True)
    reader.start()
    wait_for(lambda: any("run dtest started" in x for x in out_lines), 30, what="the timeline replayed")
    follow.send_signal(signal.SIGINT)
    assert follow.wait(20) == 0
    reader.join(20)
    out, err = "".join(out_lines), follow.stderr.read()
    assert "run dtest started" in out  # the timeline so far was replayed
    assert "training continues" in err and "rlsup attach" in err
    assert d.pid == pid and pid_alive(pid)


def test_a_killed_supervisor_is_replaced_and_its_components_adopted(tmp_path, daemon):
    cfg = write_config(tmp_path, TICKER)
    d = daemon(cfg)
    started = {n: d.wait_event(lambda e, n=n: e["kind"] == "started" and e["component"] == n, what=f"{n} started")
               for n in ("ticker", "sleeper")}
    old = d.pid
    os.kill(old, signal.SIGKILL)  # the supervisor dies hard; its components do not notice
    wait_for(lambda: not pid_alive(old), what="supervisor gone")
    log = d.run_dir / "logs" / "ticker.log"
    size = log.stat().st_size
    wait_for(lambda: log.stat().st_size > size + 20, what="the ticker to go on writing with no supervisor")
    assert all(pid_alive(e["pid"]) for e in started.values())
    # the user edits the sleeper's command while no supervisor runs: the adopted attempt runs the old one
    cfg.write_text(cfg.read_text().replace("time.sleep(1000)", "time.sleep(999)"))
    d2 = daemon(cfg, run_dir=d.run_dir)
    assert d2.pid != old
    for n, e in started.items():
        adopted = d2.wait_event(lambda x, n=n: x["kind"] == "adopted" and x["component"] == n, what=f"{n} adopted")
        assert adopted["pid"] == e["pid"] and adopted["attempt"] == e["attempt"]
        assert adopted["config_changed"] is (n == "sleeper")
    said = ("sleeper: the config as read now (the file, a ${VAR}) asks another command, cwd or env than this attempt "
            "runs: its next start runs it")
    assert said in d2.up.stdout and "ticker: the config" not in d2.up.stdout, d2.up.stdout
    assert not any(e["kind"] == "leftovers" for e in d2.events())
    st = d2.cli("status", "--json")
    comps = json.loads(st.stdout)["components"]
    assert comps["ticker"]["pid"] == started["ticker"]["pid"] and comps["ticker"]["state"] == "running"
    assert comps["ticker"]["uptime_s"] >= 0.5


def test_help_teaches():
    for args in (["--help"], ["up", "--help"], ["attach", "--help"], ["logs", "--help"], ["down", "--help"]):
        r = subprocess.run([PY, "-m", "rlsup.supervisor.cli", *args], capture_output=True, text=True)
        assert r.returncode == 0 and "usage:" in r.stdout
    top = subprocess.run([PY, "-m", "rlsup.supervisor.cli", "--help"], capture_output=True, text=True).stdout
    for cmd in ("up", "attach", "status", "logs", "events", "restart", "resume", "down", "bridge"):
        assert cmd in top
    assert sys.executable


def test_up_refuses_a_broken_config_unless_told(tmp_path):
    cfg = write_config(tmp_path, """
        name: broken
        components:
          a:
            command: definitely-not-a-command-xyz --flag
          b:
            command: ["{py}", "-c", "pass"]
            cwd: /nonexistent/dir
    """)
    run_dir = tmp_path / "run"
    for mode in (["-d"], ["--headless"]):
        r = rlsup("up", str(cfg), *mode, "--run-dir", str(run_dir), cwd=tmp_path)
        assert r.returncode == 1
        assert "definitely-not-a-command-xyz" in r.stderr and "/nonexistent/dir" in r.stderr
        assert "--skip-checks" in r.stderr
        assert not (run_dir / "events.jsonl").exists()  # nothing was started
    r = rlsup("up", str(cfg), "--headless", "--skip-checks", "--run-dir", str(run_dir), cwd=tmp_path)
    assert r.returncode == 1  # it ran, and the missing command was fatal
    assert any(e["kind"] == "fatal" for e in read_events(run_dir))
