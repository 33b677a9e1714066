"""The per-component monitor: byte-exact log with rotation at line boundaries, a disk that fails or
stalls, and a real monitor process (record, exit, an escaped grandchild, finish)."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

from rlsup.supervisor.monitor import shim
from rlsup.supervisor.monitor.shim import LogFile, Pump
from tests.conftest import PATIENCE, pid_alive, wait_for


def test_rotation_is_byte_exact_and_never_splits_a_line(tmp_path):
    log = LogFile(str(tmp_path / "c.log"), max_bytes=1000, backups=3)
    lines = [f"{i:04d} {'y' * (i % 90)}\n".encode() for i in range(400)]
    data = b"".join(lines)
    for i in range(0, len(data), 333):  # chunks that cut lines anywhere
        log.write(data[i:i + 333])
    log.close()
    files = [tmp_path / "c.log.3", tmp_path / "c.log.2", tmp_path / "c.log.1", tmp_path / "c.log"]
    assert not (tmp_path / "c.log.4").exists()
    kept = b"".join(f.read_bytes() for f in files)
    assert data.endswith(kept)
    for f in files:
        body = f.read_bytes()
        assert len(body) <= 1000 and body.endswith(b"\n")  # each file holds whole lines only


def test_a_line_longer_than_a_file_is_split_but_nothing_is_lost(tmp_path):
    log = LogFile(str(tmp_path / "c.log"), max_bytes=100, backups=10)
    data = b"short\n" + b"L" * 450 + b"\nend\n"
    log.write(data)
    log.close()
    files = sorted(tmp_path.glob("c.log*"), key=lambda p: -int(p.suffix[1:]) if p.suffix[1:].isdigit() else 0)
    assert b"".join(f.read_bytes() for f in files) == data


def _pipe() -> tuple[int, int]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    return r, w


def test_pump_reports_a_full_disk_once_counts_what_it_drops_and_says_so_later(tmp_path):
    log = LogFile(str(tmp_path / "x.log"), 1 << 30, 0)
    real_fd = log.fd
    log.fd = os.open("/dev/full", os.O_WRONLY)  # every write fails with ENOSPC
    states: list[tuple] = []
    r, w = _pipe()
    pump = Pump(r, log, lambda err, lost: states.append((err, lost)))
    for _ in range(100):
        os.write(w, b"x" * 1000)
        pump.pump()
    assert states == [(states[0][0], 1000)] and states[0][0].startswith("ENOSPC") and pump.lost == 100_000
    os.close(log.fd)
    log.fd = real_fd  # the disk has room again
    os.write(w, b"after\n")
    pump.pump()
    assert states[-1] == (None, 100_000)
    data = (tmp_path / "x.log").read_bytes()
    assert b"[rlsup: 100000 bytes of output were lost while the log could not be written]" in data
    assert data.endswith(b"after\n")


def test_a_stalled_disk_never_blocks_the_child(tmp_path, monkeypatch):
    monkeypatch.setattr(shim, "GUARD_S", 0.05)
    monkeypatch.setattr(shim, "STALL_S", 0.05)
    log = LogFile(str(tmp_path / "y.log"), 1 << 30, 0)
    block = threading.Event()
    orig = log.write
    calls = {"n": 0}

    def slow_write(data: bytes) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            block.wait(20)  # the first write hangs, as on a hung network disk
        orig(data)

    log.write = slow_write  # type: ignore[method-assign]
    r, w = _pipe()
    pump = Pump(r, log, lambda e, lost: None, max_pending=3 << 20)
    pump.start()
    os.write(w, b"first\n")
    t = threading.Thread(target=pump.pump)  # the monitor's thread, stuck in the write
    t.start()
    wait_for(lambda: calls["n"] >= 1, PATIENCE, what="the monitor's thread to be stuck in its first write")
    # The child writes 4 MiB more than the pipe holds; with nobody draining it would block here.
    os.set_blocking(w, False)
    sent, stream = 0, bytearray()
    deadline = time.monotonic() + 10
    while sent < 5 << 20 and time.monotonic() < deadline:
        block_ = f"{sent:012d}\n".encode() * 1024
        try:
            n = os.write(w, block_)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        stream += block_[:n]
        sent += n
    assert sent >= 5 << 20, f"the child was blocked ({sent} bytes written)"
    block.set()
    t.join(10)
    pump.pump()
    data = (tmp_path / "y.log").read_bytes()
    assert data.startswith(b"first\n")
    assert pump.lost > 0 and b"bytes of output were lost" in data  # beyond max_pending: dropped, counted
    marker = re.search(rb"\n\[rlsup: (\d+) bytes of output were lost while the log could not be written\]\n", data)
    assert marker is not None and int(marker.group(1)) == pump.lost
    # Every byte the child wrote is on disk or counted as lost, and what is on disk kept its order.
    body = data[:marker.start()] + data[marker.end():]
    assert len(body) + pump.lost == sent + len(b"first\n")
    kept_first = min(len(body) - 6, (3 << 20) - shim.READ_SIZE)  # before the backlog fills: an exact prefix
    assert body[6:6 + kept_first] == bytes(stream[:kept_first])
    pump.close()


def _spec(tmp_path, code: str, **kw) -> dict:
    (tmp_path / "logs").mkdir(exist_ok=True)
    (tmp_path / "monitors").mkdir(exist_ok=True)
    return {"component": "c", "attempt": 1, "run_dir": str(tmp_path), "argv": [sys.executable, "-c", code],
            "env": dict(os.environ), "cwd": str(tmp_path),
            "log": {"path": str(tmp_path / "logs" / "c.log"), "max_bytes": 1 << 20, "backups": 2},
            "record": str(tmp_path / "monitors" / "c.1.json"), "cgroup": None, **kw}


def _start(spec: dict) -> tuple[subprocess.Popen, dict]:
    p = subprocess.Popen([sys.executable, "-I", "-S", shim.__file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         start_new_session=True)
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(json.dumps(spec).encode())
    p.stdin.close()
    return p, json.loads(p.stdout.readline())


def test_monitor_records_the_exit_keeps_the_escapee_then_ends_it_on_finish(tmp_path):
    code = ("import os, sys, time\n"
            "for i in range(20000): print(i)\n"
            "if os.fork() == 0:\n"  # a grandchild that double-forks, calls setsid and clears its environment
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        os.execve('/bin/sleep', ['sleep', '300'], {})\n"
            "    os._exit(0)\n"
            "time.sleep(0.3)\n"
            "sys.exit(3)\n")
    spec = _spec(tmp_path, code)
    p, reply = _start(spec)
    assert reply["ok"] and reply["pid"] > 0
    rec = wait_for(lambda: (r := shim.read_record(spec["record"])) and r["status"] == "exited" and r, 20)
    assert rec["exit_code"] == 3 and rec["signal"] is None and rec["log_end"]["offset"] > 0
    lines = (tmp_path / "logs" / "c.log").read_text().split()
    assert lines == [str(i) for i in range(20000)]
    escapee = [q for q in shim.descendants(reply["shim_pid"])]
    assert escapee, "the escaped grandchild re-parents to the monitor (its subreaper)"
    os.kill(reply["shim_pid"], signal.SIGUSR1)  # finish
    p.wait(PATIENCE)
    assert not os.path.exists(spec["record"])
    wait_for(lambda: not any(pid_alive(q) for q in escapee), PATIENCE, what="the escapee to be ended")


def test_monitor_survives_terminal_signals_and_reports_a_missing_command(tmp_path):
    spec = _spec(tmp_path, "import time; time.sleep(30)")
    p, reply = _start(spec)
    for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
        os.kill(reply["shim_pid"], s)
    time.sleep(0.3)  # deliberate: none of the signals may end the monitor in this window
    assert p.poll() is None and shim.read_record(spec["record"])["status"] == "running"
    os.kill(reply["shim_pid"], signal.SIGUSR1)
    p.wait(PATIENCE)
    bad = _spec(tmp_path, "")
    bad["argv"] = ["/nonexistent/cmd"]
    bad["record"] = str(tmp_path / "monitors" / "c.2.json")
    p2, reply2 = _start(bad)
    assert reply2 == {**reply2, "ok": False, "type": "FileNotFoundError"}
    assert p2.wait(PATIENCE) == 1 and not os.path.exists(bad["record"])


def test_child_gets_default_signal_dispositions(tmp_path):
    # A daemon ignores SIGHUP; its components must not inherit that (stop.signal: SIGHUP would never work).
    spec = _spec(tmp_path, "import signal; print(signal.getsignal(signal.SIGHUP) == signal.SIG_DFL)")
    p, reply = _start(spec)
    wait_for(lambda: (r := shim.read_record(spec["record"])) and r["status"] == "exited", PATIENCE)
    os.kill(reply["shim_pid"], signal.SIGUSR1)
    p.wait(PATIENCE)
    assert (tmp_path / "logs" / "c.log").read_text().strip() == "True"


def test_a_monitor_whose_run_dir_is_gone_ends_its_tree_and_exits(tmp_path):
    spec = _spec(tmp_path, "import time; time.sleep(300)")
    p, reply = _start(spec)
    assert p.poll() is None
    import shutil

    shutil.rmtree(tmp_path / "monitors")  # the run dir deleted: no supervisor will ever read the record
    p.wait(PATIENCE)  # the guard notices within a second and the monitor finishes
    wait_for(lambda: not pid_alive(reply["pid"]), PATIENCE, what="its child to be ended")


def test_pump_keeps_what_a_read_only_disk_refuses_and_writes_it_once_it_is_back(tmp_path, monkeypatch):
    """Issue 43: while the log refuses with EROFS (or EIO) the newest HOLD_MAX bytes wait in memory and
    older ones are counted as lost; once writes work, the marker, then what waited, then the rest, in order."""
    monkeypatch.setattr(shim, "HOLD_MAX", 5000)
    log = LogFile(str(tmp_path / "z.log"), 1 << 30, 0)
    real_append = log._append
    refusing = {"on": True}

    def append(data):
        if refusing["on"]:
            raise OSError(errno.EROFS, "Read-only file system")
        real_append(data)

    monkeypatch.setattr(log, "_append", append)
    states: list[tuple] = []
    r, w = _pipe()
    pump = Pump(r, log, lambda err, lost: states.append((err, lost)))
    os.write(w, b"before\n")
    refusing["on"] = False
    pump.pump()
    refusing["on"] = True
    for i in range(10):
        os.write(w, b"%04d" % i + b"x" * 995 + b"\n")
        pump.pump()
    assert states[-1][0].startswith("EROFS") and pump.held_bytes <= 5000 and pump.lost == 10_000 - pump.held_bytes
    refusing["on"] = False
    os.write(w, b"after\n")
    pump.pump()
    data = (tmp_path / "z.log").read_bytes()
    assert data.startswith(b"before\n") and data.endswith(b"after\n")
    assert b"[rlsup: 5000 bytes of output were lost while the log could not be written]" in data
    kept = data.split(b"written]\n", 1)[1]
    assert kept == b"".join(b"%04d" % i + b"x" * 995 + b"\n" for i in range(5, 10)) + b"after\n"
    assert states[-1] == (None, 5000)


def test_an_exited_child_is_seen_without_being_reaped(tmp_path):
    """The monitor learns its child's exit but leaves it a zombie until the record holds it: meanwhile the
    kernel keeps the status, where the supervisor reads it (process.proc_state)."""
    from rlsup.supervisor.monitor.process import proc_state

    pid = os.fork()
    if pid == 0:
        os._exit(3)
    deadline = time.monotonic() + 30
    while shim.exit_status(pid) is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert shim.exit_status(pid) == 3 << 8  # looked at twice: still there, not reaped
    assert proc_state(pid) == ("Z", 3 << 8)
    assert shim.exit_fields(proc_state(pid)[1]) == {"exit_code": 3, "signal": None}
    assert os.waitpid(pid, 0) == (pid, 3 << 8)
    assert proc_state(pid) == ("", None)


def test_descendants_are_found_without_a_pass_over_proc(monkeypatch):
    """Each monitor finishing looked for its tree in all of /proc: thousands of monitors at once made that
    quadratic (issue 44 item 2). Its own children files are read instead, where the kernel has them."""
    if not shim.HAS_CHILDREN_FILE:
        import pytest

        pytest.skip("no /proc/PID/task/TID/children on this kernel")
    p = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"], start_new_session=True)
    try:
        grandchildren = wait_for(lambda: (shim.children_of(p.pid) or None) if len(shim.children_of(p.pid) or []) == 2
                                 else None, PATIENCE, what="the shell's two sleeps")

        def no_pass() -> dict[int, list[int]]:
            raise AssertionError("a pass over /proc")

        monkeypatch.setattr(shim, "_children_map", no_pass)
        found = shim.descendants(os.getpid())
        assert p.pid in found and set(grandchildren) <= set(found)
        # the kept child is not reaped, and no pass either (what earlier tests of this worker left may be)
        assert p.pid not in [pid for pid, _ in shim.reap_children(keep=p.pid)]
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def test_many_chatty_monitors_on_few_cores_rest_longer_between_reads():
    assert shim.rest_for(3, 2) == shim.REST_S  # an RL stack: output reaches clients within ~0.1 s
    assert shim.rest_for(200, 2) == 0.4 and shim.rest_for(200, 16) == shim.REST_S
    assert shim.rest_for(1000, 2) == shim.REST_MAX_S and shim.rest_for(10_000, 1) == shim.REST_MAX_S
    assert shim.rest_for(1000, 0) == shim.REST_MAX_S  # (no core count: one)


def _wakeups(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))


def test_a_monitor_told_to_rest_longer_wakes_that_much_less_and_loses_nothing(tmp_path):
    """Two monitors side by side on the same chatty child (a line every 10 ms for 2.5 s), one with the rest
    a run of a thousand components gets: it wakes a fraction as often (each wakeup of a Python process is what
    a thousand of them cost), and its log is as whole."""
    code = "import time\nfor i in range(250):\n    print(i, flush=True)\n    time.sleep(0.01)\n"
    runs = {}
    for name, rest in (("short", None), ("long", shim.REST_MAX_S)):
        d = tmp_path / name
        d.mkdir()
        spec = _spec(d, code, **({"rest_s": rest} if rest else {}))
        runs[name] = (spec, *_start(spec))
    started = {name: _wakeups(reply["shim_pid"]) for name, (_s, _p, reply) in runs.items()}  # its start's own
    ended = {}
    for name, (spec, _p, reply) in runs.items():
        wait_for(lambda rec=spec["record"]: (r := shim.read_record(rec)) and r["status"] == "exited", 30)
        ended[name] = _wakeups(reply["shim_pid"]) - started[name]
        os.kill(reply["shim_pid"], signal.SIGUSR1)
    for name, (_s, p, _r) in runs.items():
        p.wait(PATIENCE)
        assert (tmp_path / name / "logs" / "c.log").read_text().split() == [str(i) for i in range(250)]
    assert ended["long"] * 2 < ended["short"], ended  # (each count has its exit's few besides the rests)
