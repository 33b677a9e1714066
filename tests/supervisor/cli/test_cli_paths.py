"""Small things on the paths users take (issue 27 items 9 and 11): `attach --plain` prints each event
once, `rlsup logs` without NAME says which names there are, hints carry every option that made them
work, an ended run's status does not read as live, a fleet pod that ended says when, and the install
brings numpy (torch's NumPy warning was the demo's first line)."""

from __future__ import annotations

import shlex
import signal
import subprocess
from pathlib import Path

from tests.conftest import PY, cli_env, rlsup, wait_for, write_config

ROOT = Path(__file__).resolve().parents[3]

QUICK = """
name: quick
components:
  a:
    command: ["{py}", "-c", "print('hello from a')"]
  b:
    command: ["{py}", "-c", "print('hello from b')"]
    depends_on: {a: completed}
"""


def _ended_run(tmp_path) -> Path:
    cfg = write_config(tmp_path, QUICK)
    run_dir = tmp_path / "runs" / "quick"
    r = rlsup("up", str(cfg), "--headless", "--run-dir", str(run_dir), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    return run_dir


LIVE = """
name: live
components:
  a:
    command: ["{py}", "-c", "import time; print('up', flush=True); time.sleep(1000)"]
  b:
    command: ["{py}", "-c", "import time; print('up', flush=True); time.sleep(1000)"]
    depends_on: [a]
"""


def test_attach_plain_prints_each_event_once(tmp_path, daemon):
    d = daemon(write_config(tmp_path, LIVE))
    d.wait_event(lambda e: e["kind"] == "started" and e["component"] == "b", what="b started")
    out = tmp_path / "attach.out"
    with open(out, "w") as f:
        p = subprocess.Popen([PY, "-m", "rlsup.supervisor.cli", "attach", "--plain", "--run-dir", str(d.run_dir)],
                             stdout=f, stderr=subprocess.PIPE, text=True, env=cli_env(), stdin=subprocess.DEVNULL)
    wait_for(lambda: " b " in out.read_text() and "started" in out.read_text(), 30, what="events")
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    lines = [ln for ln in out.read_text().splitlines() if ln.strip()]
    assert any("run live" in ln for ln in lines), lines
    assert len(lines) == len(set(lines)), lines  # each event once (it printed every one twice)
    assert "Re-attach with: rlsup attach" in err


def test_attach_plain_on_an_ended_run_prints_its_journal(tmp_path):
    run_dir = _ended_run(tmp_path)
    r = rlsup("attach", "--plain", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert any("run quick" in ln for ln in lines) and any("completed" in ln for ln in lines), r.stdout
    assert len(lines) == len(set(lines)), r.stdout
    assert "this run has ended at" in r.stderr


def test_logs_without_a_name_lists_the_components(tmp_path):
    _ended_run(tmp_path)
    r = rlsup("logs", cwd=tmp_path)
    assert r.returncode == 2
    assert "a, b" in r.stderr and "rlsup logs b -n 20" in r.stderr, r.stderr
    assert "error: the following arguments are required" not in r.stderr
    r = rlsup(*shlex.split(r.stderr.split("for example: ", 1)[1].strip())[1:], cwd=tmp_path)  # pasted as printed
    assert r.returncode == 0 and "hello from b" in r.stdout


def test_an_ended_run_does_not_read_as_live(tmp_path):
    from rlsup.supervisor.render.status import format_status

    run_dir = _ended_run(tmp_path)
    r = rlsup("status", "--run-dir", str(run_dir), cwd=tmp_path)
    head = r.stdout.splitlines()[0]
    assert "ended, no supervisor" in head and "supervisor pid" not in head, r.stdout
    live = format_status({"run": {"name": "x", "pid": 7, "host": "h", "uptime_s": 3.0}, "components": {}})
    assert "supervisor pid 7 on h, up 3.0s" in live


def test_the_continue_command_of_status_pastes_from_anywhere(tmp_path):
    """`rlsup status` ends with the command that continues the run; pasted as printed in another
    directory it continues *this* run (it said `rlsup up CONFIG --resume`, which made a new run dir
    under the working directory)."""
    run_dir = _ended_run(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = rlsup("status", "--run-dir", str(run_dir), cwd=elsewhere)
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("to go on from its checkpoints: "))
    resume = line.split(": ", 1)[1].split(";")[0]
    again = subprocess.run(["bash", "-c", resume], cwd=elsewhere, env=cli_env(), capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
    assert again.returncode == 0 and "ended as soon as it started" in again.stderr, again.stdout + again.stderr
    assert not (elsewhere / "runs").exists()


def test_hints_carry_every_option_quoted():
    from rlsup.supervisor.client.fleet import PodSpec
    from rlsup.supervisor.client.ssh import attach_command

    hint = attach_command("root@pod:2222", run_dir="/w/runs/my run", identity="~/.ssh/k 1",
                          remote_cmd="/w/.venv/bin/python -m rlsup.supervisor.cli")
    argv = shlex.split(hint)
    assert argv[:3] == ["rlsup", "attach", "root@pod:2222"]
    assert argv[argv.index("--run-dir") + 1] == "/w/runs/my run"
    assert argv[argv.index("-i") + 1] == "~/.ssh/k 1"
    assert argv[argv.index("--remote-cmd") + 1] == "/w/.venv/bin/python -m rlsup.supervisor.cli"
    pod = PodSpec(host="gpu-1", user="root", port=2222, run_dir="/w/runs/a", label="a")
    assert shlex.split(pod.attach_hint(identity="/k", remote_cmd="/v/rlsup")) == [
        "rlsup", "attach", "root@gpu-1:2222", "--run-dir", "/w/runs/a", "-i", "/k", "--remote-cmd", "/v/rlsup"]


def test_fleet_cli_takes_an_identity():
    r = rlsup("fleet", "--help")
    assert "-i FILE, --identity FILE" in r.stdout


def test_an_ended_pod_says_when_it_ended_in_the_fleet_table():
    from rlsup.tui.fleet import pod_cells

    note = "ended at 2026-11-22 10:37:08: trainer fatal: boom (exit code 1)"
    pod = {"label": "a", "connected": True, "connection": "ended", "error": None, "components": {},
           "run": {"name": "r"}, "gpus": [], "ended": {"note": note}}
    assert str(pod_cells(pod, False)["conn"]).startswith("ended at 2026-11-22 10:37:08")


PORTY = """
name: porty
components:
  server:
    command: ["{py}", "-c", "print('served and done')"]
    ready: {http: "http://127.0.0.1:PORT/health", timeout: 5}
"""


def test_up_fresh_refused_by_the_preflight_leaves_the_ended_run_where_it_was(tmp_path):
    """`up --fresh` whose fast checks fail (the port is held by someone else) starts nothing and
    moves nothing: the ended run stays in its run dir, and no "starting a new run" is said."""
    import socket

    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", 0))
    port = holder.getsockname()[1]
    holder.close()
    cfg = write_config(tmp_path, PORTY.replace("PORT", str(port)))
    run_dir = tmp_path / "runs" / "porty"
    r = rlsup("up", str(cfg), "--headless", "--run-dir", str(run_dir), cwd=tmp_path)
    assert (run_dir / "events.jsonl").exists(), r.stdout + r.stderr
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", port))
    holder.listen()
    try:
        r = rlsup("up", str(cfg), "-d", "--fresh", "--run-dir", str(run_dir), cwd=tmp_path)
    finally:
        holder.close()
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert f"port {port}" in out and "already in use" in out, out
    assert "starting a new run" not in out and "kept as" not in out, out
    assert (run_dir / "events.jsonl").exists() and not (run_dir.parent / "porty.1").exists()
