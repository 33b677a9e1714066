"""Fault 3 of issue 16: a grandchild that double-forks, calls setsid and clears its environment
survives no stop path, and ``down`` reports exactly what it could not end.

Each stop path runs twice: with a cgroup v2 per attempt (where the machine allows it) and with the
fallback, the monitor as child subreaper (``RLSUP_CGROUPS=off``). One component's escapee keeps
the monitor's pipe open (a careless daemon), the other's closes its descriptors (a proper one).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from tests.faults import harness
from tests.faults.harness import (
    ESCAPEE,
    LIVENESS_S,
    NUMBERED,
    alive,
    assert_no_lost_line,
    assert_no_orphans,
    cgroups_usable,
    journal,
    processes_with,
)

# The fault matrix's fixtures (not in a conftest.py here: it would shadow tests/conftest.py for
# the `from conftest import ...` of other test modules).
fault_run, token = harness.fault_run, harness.token

CONFIG = """
name: esc
components:
  careless:
    command: ["{py}", "%(escapee)s", "%(token)s", "{tmp}/careless.pid", "--keep-fds"]
    stop: {signal: SIGTERM, timeout: 1}
  proper:
    command: ["{py}", "%(escapee)s", "%(token)s", "{tmp}/proper.pid"]
    stop: {signal: SIGTERM, timeout: 1}
  writer:
    command: ["{py}", "%(numbered)s", "--copy", "{tmp}/writer.copy", "--rate", "2000"]
    stop: {signal: SIGTERM, timeout: 1}
"""

TRACKING = [pytest.param("cgroup", id="cgroup"), pytest.param("subreaper", id="subreaper")]


def _env(tracking: str) -> dict[str, str]:
    if tracking == "cgroup":
        why = cgroups_usable()
        if why:
            pytest.skip(f"cgroup v2 tracking is not available here ({why}); the subreaper variant still runs")
        return {"RLSUP_CGROUPS": "auto"}
    return {"RLSUP_CGROUPS": "off"}


def _start(fault_run, token: str, tracking: str, *, headless: bool = False):
    run = fault_run(env=_env(tracking))
    run.write_config(CONFIG % {"escapee": ESCAPEE, "numbered": NUMBERED, "token": token})
    if headless:
        run.headless()
    else:
        run.up()
    first = run.wait_event(lambda e: e["kind"] == "run_started", what="run_started")
    for name in ("careless", "proper", "writer"):
        run.wait_event(lambda e, n=name: e["kind"] == "started" and e["component"] == n, what=f"{name} started")
    copy = Path(run.tmp) / "writer.copy"
    deadline = time.monotonic() + LIVENESS_S
    while not copy.exists() or not copy.stat().st_size:
        assert time.monotonic() < deadline, "the writer never wrote"
        time.sleep(0.05)
    if tracking == "cgroup":
        assert first["tracking"].startswith("cgroup v2"), first["tracking"]
    else:
        assert "subreaper" in first["tracking"], first["tracking"]
    return run


def _escapees(run, attempt: int = 1) -> dict[str, int]:
    out = {}
    for name in ("careless", "proper"):
        pidfile = Path(run.tmp) / f"{name}.pid.{attempt}"
        deadline = time.monotonic() + LIVENESS_S
        while not pidfile.exists():
            assert time.monotonic() < deadline, f"{name} attempt {attempt} never let its escapee out"
            time.sleep(0.05)
        pid = int(pidfile.read_text())
        while b"-S\0-c\0" not in open(f"/proc/{pid}/cmdline", "rb").read():  # its pid file precedes its exec
            assert time.monotonic() < deadline and alive(pid), f"{name}'s escapee never exec'd"
            time.sleep(0.02)
        env = open(f"/proc/{pid}/environ", "rb").read()
        assert b"RLSUP_" not in env, "the escapee was meant to have no rlsup marker"
        assert os.getsid(pid) != os.getsid(os.getpid())
        out[name] = pid
    return out


def _check_after(run, token: str) -> None:
    assert_no_orphans(token, run.run_dir)
    journal(run.run_dir)
    assert_no_lost_line(run.run_dir, "writer", Path(run.tmp) / "writer.copy")


@pytest.mark.parametrize("tracking", TRACKING)
def test_down_ends_escapees_and_says_so(fault_run, token, tracking):
    run = _start(fault_run, token, tracking)
    pids = _escapees(run)
    down = run.down()
    assert down.returncode == 0, down.stdout + down.stderr
    assert "no process of the run is left" in down.stdout
    assert not any(alive(p) for p in pids.values())
    _check_after(run, token)


@pytest.mark.parametrize("tracking", TRACKING)
def test_ctrl_c_of_headless_ends_escapees(fault_run, token, tracking):
    run = _start(fault_run, token, tracking, headless=True)
    pids = _escapees(run)
    proc = run.headless_proc
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    out, _ = proc.communicate(timeout=LIVENESS_S)
    assert proc.returncode == 0, out
    assert "Traceback" not in out
    assert not any(alive(p) for p in pids.values())
    _check_after(run, token)


@pytest.mark.parametrize("tracking", TRACKING)
def test_sigterm_to_the_daemon_ends_escapees(fault_run, token, tracking):
    run = _start(fault_run, token, tracking)
    pids = _escapees(run)
    sup = run.pid
    os.kill(sup, signal.SIGTERM)
    deadline = time.monotonic() + LIVENESS_S
    while alive(sup):
        assert time.monotonic() < deadline, "the daemon did not end after SIGTERM"
        time.sleep(0.1)
    assert not any(alive(p) for p in pids.values())
    ended = run.events()[-1]
    assert ended["kind"] == "run_ended" and ended["left"] == [], ended
    _check_after(run, token)


@pytest.mark.parametrize("tracking", TRACKING)
def test_sigkill_of_the_daemon_then_up_and_down_ends_escapees(fault_run, token, tracking):
    run = _start(fault_run, token, tracking)
    pids = _escapees(run)
    sup = run.pid
    os.kill(sup, signal.SIGKILL)
    deadline = time.monotonic() + LIVENESS_S
    while alive(sup):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)  # deliberate: the escapees outlive their supervisor for a while
    assert all(alive(p) for p in pids.values()), "the components' escapees do not depend on the supervisor"
    seq = run.events()[-1]["seq"]
    run.up()
    for name in ("careless", "proper", "writer"):
        run.wait_event(lambda e, n=name: e["kind"] == "adopted" and e["component"] == n, since=seq,
                       what=f"{name} adopted")
    assert run.status()["components"]["writer"]["state"] == "running"
    down = run.down()
    assert down.returncode == 0, down.stdout + down.stderr
    assert "no process of the run is left" in down.stdout
    assert not any(alive(p) for p in pids.values())
    _check_after(run, token)


@pytest.mark.parametrize("tracking", TRACKING)
def test_each_restart_ends_the_previous_attempts_escapees(fault_run, token, tracking):
    run = _start(fault_run, token, tracking)
    before = _escapees(run, 1)
    for attempt in (2, 3):
        for name in ("careless", "proper"):
            r = run.cli("restart", name)
            assert r.returncode == 0, r.stderr
        now = _escapees(run, attempt)
        deadline = time.monotonic() + LIVENESS_S
        while any(alive(p) for p in before.values()):
            assert time.monotonic() < deadline, f"escapees of attempt {attempt - 1} outlived their restart"
            time.sleep(0.1)
        # Exactly one escapee per component is alive: the current attempt's.
        live = sorted(pid for pid, cmd in processes_with(token) if "-S -c" in cmd)
        assert live == sorted(now.values()), (live, now)
        before = now
    down = run.down()
    assert down.returncode == 0, down.stdout + down.stderr
    _check_after(run, token)


@pytest.mark.parametrize("tracking", TRACKING)
def test_a_run_dir_deleted_while_the_supervisor_is_dead_ends_the_run(fault_run, token, tracking):
    """The supervisor is killed and then its run dir deleted (``rm -rf`` of a scratch directory): no
    supervisor will ever take the monitors over, so each ends its attempt's tree, escapees included,
    and exits instead of waiting for ever."""
    run = _start(fault_run, token, tracking)
    pids = _escapees(run)
    sup = run.pid
    os.kill(sup, signal.SIGKILL)
    deadline = time.monotonic() + LIVENESS_S
    while alive(sup):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert all(alive(p) for p in pids.values()), "the components' escapees do not depend on the supervisor"
    shutil.rmtree(run.run_dir)
    assert_no_orphans(token, run.run_dir)  # no component, escapee, monitor or zygote; no cgroup member
    assert not any(alive(p) for p in pids.values())


# ---------------------------------------------------------------------- what cannot be ended is named

FREEZER = Path("/sys/fs/cgroup/freezer")


def _freeze(pid: int, where: Path) -> None:
    where.mkdir(exist_ok=True)
    (where / "cgroup.procs").write_text(str(pid))
    (where / "freezer.state").write_text("FROZEN")
    deadline = time.monotonic() + 10
    while (where / "freezer.state").read_text().strip() != "FROZEN":
        assert time.monotonic() < deadline, "the freezer never froze"
        time.sleep(0.05)


def _thaw(where: Path) -> None:
    if where.exists():
        try:
            (where / "freezer.state").write_text("THAWED")
        except OSError:
            pass


@pytest.mark.parametrize("tracking", TRACKING)
def test_down_names_the_process_it_could_not_end(fault_run, token, tracking, tmp_path):
    """A process SIGKILL cannot end (frozen by a cgroup v1 freezer: the kill stays pending) is named by
    ``down``, which exits 1; once thawed it dies of the pending SIGKILL and nothing is left."""
    if os.geteuid() != 0 or not (FREEZER / "cgroup.procs").exists():
        pytest.skip("needs root and a cgroup v1 freezer hierarchy (to make a process SIGKILL cannot end)")
    run = _start(fault_run, token, tracking)
    pids = _escapees(run)
    frozen = FREEZER / f"rlsupfault-{token}"
    try:
        _freeze(pids["proper"], frozen)
        down = run.down(timeout=120)
        out = down.stdout + down.stderr
        assert down.returncode == 1, out
        assert f"pid {pids['proper']}" in out, out
        assert "no process of the run is left" not in out
        assert not alive(pids["careless"])
        ended = [e for e in run.events() if e["kind"] == "run_ended"][-1]
        assert [w for w in ended["left"] if w.split(" (")[0] == f"pid {pids['proper']}"], ended
        _thaw(frozen)
        deadline = time.monotonic() + LIVENESS_S
        while alive(pids["proper"]):
            assert time.monotonic() < deadline, "the thawed escapee did not die of its pending SIGKILL"
            time.sleep(0.1)
        # With the stubborn process gone, nothing else of the run is left either.
        assert_no_orphans(token, run.run_dir)
        journal(run.run_dir)
    finally:
        # Whatever happened: nothing stays frozen, and the freezer cgroup goes once it is empty.
        _thaw(frozen)
        with contextlib.suppress(OSError):
            os.kill(pids["proper"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while frozen.exists() and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                frozen.rmdir()
            time.sleep(0.1)
