"""`rlsup down` on a run whose supervisor is gone (issue 27 item 3), and `rlsup status` on it (item 4):
real daemon, real monitors, `kill -9` of the supervisor."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from rlsup.supervisor.monitor.process import is_monitor_of, records
from tests.conftest import PY, cli_env, kinds, pid_alive, rlsup, wait_for, write_config

CFG = """
name: strand
components:
  server:
    command: ["{py}", "-c", "import time; print('up', flush=True); time.sleep(100000)"]
    stop: {timeout: 5}
  stubborn:
    # Ignores SIGTERM: down must go on to SIGKILL after its stop timeout.
    command: ["{py}", "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(100000)"]
    depends_on: [server]
    stop: {timeout: 1}
  doomed:
    command: ["{py}", "-c", "import time; print('up', flush=True); time.sleep(100000)"]
    depends_on: [server]
"""


def _strand(tmp_path, daemon):
    d = daemon(write_config(tmp_path, CFG))
    # stubborn and doomed both start once the server is ready, in either order: wait for all three.
    wait_for(lambda: {e["component"] for e in d.events() if e["kind"] == "started"} >= {"server", "stubborn", "doomed"},
             what="all started")
    pids = {e["component"]: e["pid"] for e in d.events() if e["kind"] == "started"}
    sup = d.pid
    os.kill(sup, signal.SIGKILL)
    wait_for(lambda: not pid_alive(sup), what="supervisor gone")
    return d, pids, sup


def test_down_ends_every_process_of_a_run_without_supervisor(tmp_path, daemon):
    d, pids, sup = _strand(tmp_path, daemon)
    os.kill(pids["doomed"], signal.SIGKILL)  # died meanwhile: only its monitor is left
    wait_for(lambda: not pid_alive(pids["doomed"]), what="doomed gone")
    monitors = [r["shim_pid"] for _, r in records(d.run_dir / "monitors")]
    # A process that is not the run's, though a stale record could name its pid: never signalled.
    bystander = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])
    try:
        stale = d.run_dir / "monitors" / "ghost.1.json"
        stale.write_text(json.dumps({"protocol": 1, "component": "ghost", "attempt": 1, "shim_pid": bystander.pid,
                                     "pid": bystander.pid, "run_dir": str(d.run_dir), "started": time.time()}))
        r = d.cli("down", timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "no process of the run is left" in r.stdout
        assert bystander.poll() is None
    finally:
        bystander.kill()
    for pid in [*pids.values(), *monitors]:
        assert not pid_alive(pid), pid
    assert not [r for _, r in records(d.run_dir / "monitors") if is_monitor_of(r, d.run_dir)]
    ev = d.events()
    tail = ev[max(i for i, e in enumerate(ev) if e["kind"] == "run_started"):]
    assert kinds(tail, "stubborn")[-3:] == ["stopping", "exited", "stopped"]
    assert [e for e in tail if e["kind"] == "exited" and e["component"] == "stubborn"][0]["signal"] == "SIGKILL"
    doomed = [e for e in tail if e["kind"] == "exited" and e["component"] == "doomed"][-1]
    assert doomed["signal"] == "SIGKILL" and doomed["diagnosis"] is not None
    assert ev[-1]["kind"] == "run_ended" and f"supervisor pid {sup}" in ev[-1]["reason"]
    # Once ended, it is an ended run like any other: `up` asks about it, `status` says how it ended.
    st = d.cli("status")
    assert "stopped" in st.stdout and "rlsup down" in st.stderr
    again = d.cli("down")
    assert again.returncode == 1 and "nothing to stop" in again.stderr


def test_status_of_a_run_whose_supervisor_died(tmp_path, daemon):
    d, pids, sup = _strand(tmp_path, daemon)
    os.kill(pids["doomed"], signal.SIGKILL)
    wait_for(lambda: not pid_alive(pids["doomed"]), what="doomed gone")
    r = d.cli("status")
    out = r.stdout
    assert r.returncode == 0
    head = out.splitlines()[0]
    assert "NO SUPERVISOR" in head and f"pid {sup}" in head and ", up " not in head, out
    assert "is gone since about" in out
    assert f"server pid {pids['server']}" in out and f"stubborn pid {pids['stubborn']}" in out
    assert "doomed (pid" in out and "ended meanwhile (killed by SIGKILL)" in out
    take_over = next(ln.split(": ", 1)[1] for ln in out.splitlines() if ln.startswith("take it over"))
    assert take_over == "rlsup up run.yaml --run-dir run"  # relative to where the user is: pastes there
    js = json.loads(d.cli("status", "--json").stdout)
    gone = js["run"]["supervisor_gone"]
    assert gone["pid"] == sup and gone["take_over"] == take_over
    assert js["components"]["doomed"]["state"] == "unknown" and js["components"]["server"]["rate"] is None
    # The command it printed takes the run over (same pids), preflight and all.
    r = subprocess.run(["bash", "-c", take_over + " -d"], capture_output=True, text=True, timeout=60,
                       env=cli_env(), cwd=d.config.parent)
    assert r.returncode == 0, r.stderr
    adopted = {e["component"]: e["pid"] for e in d.events() if e["kind"] == "adopted"}
    assert adopted["server"] == pids["server"] and adopted["stubborn"] == pids["stubborn"]
    assert rlsup("down", "--run-dir", str(d.run_dir), timeout=60).returncode == 0
