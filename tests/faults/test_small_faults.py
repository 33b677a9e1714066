"""Fault 8 of issue 16, the smaller ones, each against a real daemon:

- ``stop.signal: SIGHUP`` reaches the component (the daemon ignores SIGHUP; its children must not);
- rotations under a flood never split a line across two files, and lose nothing;
- no traceback from ``rlsup bridge </dev/null``, ``rlsup up -d | head``, ``rlsup events | head -2``
  and friends, nor from an ``Infinity`` or a 100,000-deep JSON request (a clean error, and the
  connection still works);
- with ``--skip-checks`` and a busy port, an http readiness probe answered by another process is
  not "ready".

(The stall flag after a SIGSTOP of the supervisor is in test_supervisor_crash.py.)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from rlsup.supervisor.records import protocol
from tests.conftest import SCRIPTS, cli_env, free_port
from tests.faults import harness
from tests.faults.harness import (
    LIVENESS_S,
    NUMBERED,
    assert_no_lost_line,
    assert_no_orphans,
    journal,
    log_files,
)

# The fault matrix's fixtures (not in a conftest.py here: it would shadow tests/conftest.py for
# the `from conftest import ...` of other test modules).
fault_run, token = harness.fault_run, harness.token

# ---------------------------------------------------------------------- SIGHUP as the stop signal

HUP = """
name: hup
components:
  trap:
    command: ["{py}", "-c", "import signal, sys, time\\ndef bye(*a):\\n    print('got SIGHUP', flush=True)\\n    sys.exit(0)\\nsignal.signal(signal.SIGHUP, bye)\\nprint('up', flush=True)\\nwhile True: time.sleep(1)"]
    stop: {signal: SIGHUP, timeout: 30}
  plain:
    command: ["sleep", "100000"]
    stop: {signal: SIGHUP, timeout: 30}
"""


def test_sighup_as_the_stop_signal_reaches_the_component(fault_run, token):
    run = fault_run()
    run.write_config(HUP)
    run.up()
    for n in ("trap", "plain"):
        run.wait_event(lambda e, n=n: e["kind"] == "started" and e["component"] == n, what=f"{n} started")
    log = run.run_dir / "logs" / "trap.log"
    deadline = time.monotonic() + LIVENESS_S
    while not (log.exists() and "up" in log.read_text()):  # its handler is installed
        assert time.monotonic() < deadline, "trap never said it was up"
        time.sleep(0.05)
    for n in ("trap", "plain"):
        r = run.cli("stop", n)
        assert r.returncode == 0, r.stderr
    exits = {n: run.wait_event(lambda e, n=n: e["kind"] == "exited" and e["component"] == n, what=f"{n} exited")
             for n in ("trap", "plain")}
    assert exits["trap"]["exit_code"] == 0, exits["trap"]  # its handler ran
    assert exits["plain"]["signal"] == "SIGHUP", exits["plain"]  # the default action, not SIGKILL 30 s later
    assert "got SIGHUP" in (run.run_dir / "logs" / "trap.log").read_text()
    assert run.down().returncode == 0
    assert_no_orphans(token, run.run_dir)


WORKERS = """
name: graceful
components:
  server:
    command: ["{py}", "%(script)s"]
    stop: {signal: SIGTERM, timeout: 30}
"""


def test_the_stop_signal_reaches_each_process_once(fault_run, token):
    """Many servers treat a second SIGTERM or SIGINT as "force quit, skip the graceful part"; a
    stop must send it once to each process of the tree (the group, the members outside it)."""
    run = fault_run()
    run.write_config(WORKERS % {"script": SCRIPTS / "graceful.py"})
    run.up()
    log = run.run_dir / "logs" / "server.log"
    deadline = time.monotonic() + LIVENESS_S
    while not (log.exists() and log.read_text().count("up") >= 3):  # the root and its two workers
        assert time.monotonic() < deadline, "the workers never came up"
        time.sleep(0.05)
    r = run.cli("stop", "server")
    assert r.returncode == 0, r.stderr
    ex = run.wait_event(lambda e: e["kind"] == "exited" and e["component"] == "server", what="exited")
    run.wait_event(lambda e: e["kind"] == "stopped" and e["component"] == "server", what="stopped")
    # The root waits for both workers before it exits, and its monitor drains the pipe before the
    # exit is recorded: every line the tree printed is in the log by now. (Polled all the same.)
    deadline = time.monotonic() + LIVENESS_S
    while (text := log.read_text()).count("SIGTERM #1") < 3:
        assert time.monotonic() < deadline, f"not every process reported its SIGTERM:\n{text}"
        time.sleep(0.05)
    assert ex["exit_code"] == 0, (ex, text)
    assert text.count("SIGTERM #1") == 3, text
    assert "SIGTERM #2" not in text, f"a process got the stop signal twice:\n{text}"
    assert run.down().returncode == 0
    assert_no_orphans(token, run.run_dir)


# ---------------------------------------------------------------------- rotation under a flood

ROTATE = """
name: rotate
logs: {max_bytes: 65536, backups: 1000}
components:
  flood:
    command: ["{py}", "%(numbered)s", "--copy", "{tmp}/flood.copy", "--count", "40000", "--vary", "--batch", "37"]
"""


def test_rotation_under_a_flood_never_splits_a_line(fault_run, token):
    run = fault_run()
    run.write_config(ROTATE % {"numbered": NUMBERED})
    proc = run.headless()
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    files = [p for p in log_files(run.run_dir, "flood") if p.exists()]
    assert len(files) > 100, f"only {len(files)} files: the flood did not rotate as much as meant"
    for p in files:
        data = p.read_bytes()
        assert data.endswith(b"\n"), f"{p.name} ends inside a line: {data[-80:]!r}"
        assert len(data) <= 65536, f"{p.name} is {len(data)} bytes, over max_bytes"
    assert assert_no_lost_line(run.run_dir, "flood", Path(run.tmp) / "flood.copy") == {1: 40000}
    journal(run.run_dir)
    assert_no_orphans(token, run.run_dir)


# ---------------------------------------------------------------------- no tracebacks

# Enough events to fill a pipe: each distinct ``rlsup-flag:`` line a component prints is a flag event.
MANY = """
name: many
components:
  chatty:
    command: ["{py}", "-c", "for i in range(1500): print(f'rlsup-flag: f{i}: a flag to fill the journal with', flush=True)\\nimport time; time.sleep(100000)"]
  keep:
    command: ["sleep", "100000"]
"""


def _shell(run, pipeline: str, timeout: float = LIVENESS_S) -> subprocess.CompletedProcess:
    cmd = pipeline.replace("RLSUP", f"{sys.executable} -m rlsup.supervisor.cli").replace("RUN", str(run.run_dir))
    return subprocess.run(["bash", "-c", f"set -o pipefail; {cmd}"], capture_output=True, text=True,
                          env=cli_env(run.env), cwd=run.tmp, timeout=timeout)


def test_closed_pipes_and_empty_stdin_give_no_traceback(fault_run, token):
    run = fault_run()
    cfg = run.write_config(MANY)
    up = _shell(run, f"RLSUP up {cfg} -d --run-dir RUN | head -1")
    assert "Traceback" not in up.stderr and "Error" not in up.stderr, up.stderr
    assert up.stdout.startswith("rlsup: supervising many"), up.stdout
    run.wait_status(lambda s: "f1499" in json.dumps(s["components"]["chatty"]["flags"]), what="1,500 flags")
    ev = run.cli("events")
    assert len(ev.stdout) > 2 * 65536, f"too little output ({len(ev.stdout)} bytes) to fill a pipe"
    for pipeline in ("RLSUP events --run-dir RUN | head -2", "RLSUP status --run-dir RUN | head -1",
                     "RLSUP logs chatty -n 1500 --run-dir RUN | head -1", "RLSUP bridge --run-dir RUN < /dev/null",
                     "RLSUP report --run-dir RUN | head -1", "RLSUP events --json --run-dir RUN | head -c 10"):
        r = _shell(run, pipeline)
        assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, f"{pipeline}:\n{r.stderr}"
        if "bridge" in pipeline:
            assert r.returncode == 0, r.stderr
    # A follower whose reader is already gone (its history cannot even be written) stops at once
    # instead of following for no one.
    for args in (["events", "-f"], ["logs", "chatty", "-n", "1500", "-f"]):
        r, w = os.pipe()
        os.close(r)
        try:
            p = subprocess.run([sys.executable, "-m", "rlsup.supervisor.cli", *args, "--run-dir", str(run.run_dir)],
                               stdout=w, stderr=subprocess.PIPE, text=True, env=cli_env(run.env), timeout=30)
        finally:
            os.close(w)
        assert p.returncode == 0 and "Traceback" not in p.stderr, (args, p.stderr)
    assert run.status()["components"]["keep"]["state"] == "running"
    down = _shell(run, "RLSUP down --run-dir RUN | head -1")
    assert "Traceback" not in down.stderr, down.stderr
    assert_no_orphans(token, run.run_dir)


def _request(sock: socket.socket, raw: bytes) -> dict:
    sock.sendall(raw)
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(65536)
        assert chunk, "the supervisor closed the connection instead of answering"
        buf += chunk
    return json.loads(buf)


def test_hostile_json_requests_get_clean_errors(fault_run, token):
    run = fault_run()
    run.write_config("name: js\ncomponents:\n  keep:\n    command: [\"sleep\", \"100000\"]\n")
    run.up()
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(str(run.run_dir / "rlsup.sock"))
    assert _request(s, protocol.encode({"id": 1, "op": "hello", "version": protocol.VERSION}))["ok"]
    for raw in (b'{"id": 2, "op": "ping", "x": Infinity}\n', b'{"id": 3, "op": "ping", "x": NaN}\n',
                b'{"id": 4, "op": "ping", "x": -Infinity}\n', b"[" * 100_000 + b"\n",
                b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"\n", b"\xff\xfe{}\n",
                b'{"id": 5, "op": "snapshot", "lines": "many"}\n', b'{"id": 6, "op": "logs"}\n'):
        reply = _request(s, raw)
        assert reply["ok"] is False and reply["error"], reply
    assert _request(s, b'{"id": 7, "op": "ping"}\n') == {"id": 7, "ok": True}
    s.close()
    assert run.status()["components"]["keep"]["state"] == "running"
    assert "Traceback" not in (run.run_dir / "supervisor.log").read_text()
    assert run.down().returncode == 0
    assert_no_orphans(token, run.run_dir)


# ---------------------------------------------------------------------- a busy port is not "ready"

BUSY = """
name: busy
components:
  impostor_target:
    command: ["sleep", "100000"]
    ready: {http: "http://127.0.0.1:%(busy)d/health", timeout: 2}
    restart: {policy: never}
  honest:
    command: ["{py}", "%(server)s", "%(own)d", "{tmp}/never"]
    ready: {http: "http://127.0.0.1:%(own)d/health", timeout: 60}
"""


def test_a_busy_port_answered_by_another_process_is_not_ready(fault_run, token):
    busy, own = free_port(), free_port()
    other = subprocess.Popen([sys.executable, str(SCRIPTS / "http_server.py"), str(busy), "/nonexistent"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert "serving" in other.stdout.readline()
        run = fault_run()
        run.write_config(BUSY % {"busy": busy, "own": own, "server": SCRIPTS / "http_server.py"})
        run.up("--skip-checks")
        run.wait_event(lambda e: e["kind"] == "ready" and e["component"] == "honest", what="honest ready")
        fatal = run.wait_event(lambda e: e["kind"] == "fatal" and e["component"] == "impostor_target",
                               what="impostor_target not ready in time")
        events = run.events()
        assert not [e for e in events if e["kind"] == "ready" and e["component"] == "impostor_target"]
        assert "not from a process of impostor_target" in json.dumps(events), fatal
        assert run.down().returncode == 0
        assert_no_orphans(token, run.run_dir)
    finally:
        other.kill()
        other.wait()


def test_numbered_line_check_can_fail(tmp_path):
    """The invariant helper itself: a dropped, a repeated and a changed line are each caught."""
    import pytest

    run_dir = tmp_path / "r"
    (run_dir / "logs").mkdir(parents=True)
    good = b"".join(b"a1 %09d xx\n" % i for i in range(1, 101))
    copy = tmp_path / "copy"
    copy.write_bytes(good)
    for bad in (good.replace(b"a1 000000050 xx\n", b""), good.replace(b"a1 000000050 xx\n", b"a1 000000050 xx\n" * 2),
                good.replace(b"a1 000000050 xx\n", b"a1 000000050 xy\n")):
        (run_dir / "logs" / "c.log").write_bytes(bad)
        with pytest.raises(AssertionError):
            assert_no_lost_line(run_dir, "c", copy)
    (run_dir / "logs" / "c.log").write_bytes(good)
    assert assert_no_lost_line(run_dir, "c", copy) == {1: 100}
