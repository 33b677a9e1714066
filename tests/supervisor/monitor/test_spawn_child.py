"""The monitor starts its child with posix_spawn where it can (issue 44 item 3: no copy of the monitor and no
Python between fork and exec), and the child is the one the fork path makes: its own session, stdin from
/dev/null, stdout and stderr on the pipe, default signals and an empty mask, its cwd, the open-file limit, the
command found on the PATH of its own environment. What posix_spawn cannot do goes the fork path."""

from __future__ import annotations

import json
import os
import resource
import signal
import stat
import subprocess
import sys

import pytest

from rlsup.supervisor.monitor import shim

PROBE = ("import json, os, resource, signal, sys\n"
         "st = {k: v.split() for k, v in (l.split(':', 1) for l in open('/proc/self/status')) if k in ('SigIgn', 'SigBlk')}\n"
         "print(json.dumps({'sid': os.getsid(0), 'pid': os.getpid(), 'cwd': os.getcwd(),"
         " 'stdin': os.readlink('/proc/self/fd/0'), 'ign': st['SigIgn'][0], 'blk': st['SigBlk'][0],"
         " 'nofile': resource.getrlimit(resource.RLIMIT_NOFILE)[0], 'env': os.environ.get('PROBE_ENV')}))\n"
         "print('to stderr', file=sys.stderr)\n")


def _read_all(fd: int) -> bytes:
    out = b""
    while chunk := os.read(fd, 65536):
        out += chunk
    return out


def _spawn(spec: dict) -> tuple[int | None, bytes]:
    r, w = os.pipe2(os.O_CLOEXEC)
    pid = shim._spawn_child(spec, w)
    os.close(w)
    out = _read_all(r)
    os.close(r)
    if pid is not None:
        os.waitpid(pid, 0)
    return pid, out


def test_the_spawned_child_is_the_child_the_fork_path_makes(tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    here = os.getcwd()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a daemon ignores SIGHUP: its components must not
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
    try:
        spec = {"argv": [sys.executable, "-c", PROBE], "env": {**os.environ, "PROBE_ENV": "yes"}, "cwd": str(work),
                "nofile": min(soft, 256), "cgroup": None}
        pid, out = _spawn(spec)
    finally:
        signal.signal(signal.SIGHUP, old)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGUSR2])
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert pid is not None, "posix_spawn was not used"
    first, second = out.decode().splitlines()
    got = json.loads(first)
    assert got["sid"] == got["pid"] == pid  # a session (and process group) of its own
    assert got["cwd"] == str(work) and os.getcwd() == here  # the monitor's own cwd is back
    assert got["stdin"] == "/dev/null"
    assert not int(got["ign"], 16) & (1 << (signal.SIGHUP - 1))  # (Python itself ignores SIGPIPE and SIGXFSZ)
    assert int(got["blk"], 16) == 0
    assert got["nofile"] == min(soft, 256)
    assert got["env"] == "yes"
    assert second == "to stderr"


def test_the_command_is_found_on_the_path_of_its_own_environment(tmp_path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "only-here"
    tool.write_text("#!/bin/sh\necho found\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    assert _lookup_fails_here("only-here")
    pid, out = _spawn({"argv": ["only-here"], "env": {"PATH": f"/nonexistent:{bindir}"}, "cwd": None})
    assert pid is not None and out == b"found\n"


def _lookup_fails_here(name: str) -> bool:
    return shim._lookup(name, dict(os.environ)) is None


@pytest.mark.parametrize("spec", [
    {"argv": ["/nonexistent/cmd"], "env": {}, "cwd": None},  # the fork path says why it cannot start
    {"argv": ["sh", "-c", "true"], "env": {"PATH": "/usr/bin:/bin"}, "cwd": "/nonexistent-dir"},
    {"argv": ["sh", "-c", "true"], "env": {"PATH": "/usr/bin:/bin"}, "cwd": None, "cgroup": "/sys/fs/cgroup/x"},
])
def test_what_posix_spawn_cannot_do_goes_the_fork_path(spec: dict) -> None:
    here = os.getcwd()
    assert _spawn(spec)[0] is None
    assert os.getcwd() == here


def test_a_child_with_a_cgroup_is_born_in_it(tmp_path) -> None:
    from rlsup.supervisor.monitor.process import Cgroups

    cgroups = Cgroups.for_run(tmp_path)
    if cgroups.base is None:
        pytest.skip(f"no usable cgroups here: {cgroups.reason}")
    cg = cgroups.for_attempt("c", 1)
    assert cg is not None
    try:  # the raw clone3 from a single-threaded Python, as the monitor makes it (pytest's worker has threads:
        # the child of a raw clone3 gets no after-fork care and could wait for ever on a lock another thread held)
        r = subprocess.run([sys.executable, "-c", _CLONE_INTO, cg], capture_output=True, text=True, timeout=60)
    finally:
        cgroups.remove_empty()
    assert r.returncode == 0, r.stderr
    joined, out = json.loads(r.stdout.splitlines()[-1])
    assert joined, "the child was not born in its cgroup (clone3 with CLONE_INTO_CGROUP)"
    assert any(line.startswith("0::") and cg.endswith(line[3:]) for line in out.splitlines()), (out, cg)


_CLONE_INTO = """
import json, os, sys
from rlsup.supervisor.monitor import shim
r, w = os.pipe2(os.O_CLOEXEC)
pid, joined = shim._fork_into(sys.argv[1])
if pid == 0:  # only exec: the child of a raw clone3
    os.dup2(w, 1)
    os.execv("/bin/cat", ["cat", "/proc/self/cgroup"])
os.close(w)
out = b""
while chunk := os.read(r, 65536):
    out += chunk
os.waitpid(pid, 0)
print(json.dumps([joined, out.decode()]))
"""


def test_the_record_is_in_place_when_the_start_is_answered_and_a_failed_start_leaves_none(tmp_path) -> None:
    """The record is written while the child execs and renamed into place once it did."""
    from tests.supervisor.monitor.test_shim import _spec, _start

    spec = _spec(tmp_path, "import time; time.sleep(30)")
    p, reply = _start(spec)
    try:
        assert reply["ok"]
        rec = shim.read_record(spec["record"])
        assert rec is not None and rec["pid"] == reply["pid"] and rec["status"] == "running"
    finally:
        os.kill(reply["shim_pid"], signal.SIGUSR1)
        p.wait(30)
    bad = _spec(tmp_path, "")
    bad["argv"] = ["/nonexistent/cmd"]
    bad["record"] = str(tmp_path / "monitors" / "c.2.json")
    p2, reply2 = _start(bad)
    assert reply2["ok"] is False and p2.wait(30) == 1
    left = [n for n in os.listdir(tmp_path / "monitors") if not n.startswith(shim.SPARE_PREFIX)]
    assert left == [], "a failed start left a record or its temporary file"
