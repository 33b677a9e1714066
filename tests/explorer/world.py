"""The real run a sequence acts on: the demo stack (configs/demo-chaos.yaml) under ``rlsup up -d``, with
``rlsup attach --plain`` clients attached, every process of the run marked with a token (as
tests/faults/harness.py does), so that "nothing of the run is left" is checked by walking ``/proc``.

Each action waits on state before it acts (a component fault waits for the component to run) and
returns what it did, in words, for the sequence's log. Nothing here asserts; tests/explorer/checks.py
does, from what the run wrote and what its clients printed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.conftest import PY, cli_env, free_port
from tests.explorer.sequence import Action, Sequence
from tests.faults.harness import TOKEN_VAR, alive, processes_with

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "demo-chaos.yaml"
CEILING_S = 90.0  # generous: 2 cores shared with other work; waits are on state, never asserted as times
STUCK_S = 20.0  # a trainer this long without a new step is not coming to the step an action waits for


def wait(pred: Any, timeout: float = CEILING_S, interval: float = 0.2) -> Any:
    """``pred()`` once it is truthy, or None after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(interval)


class Follower:
    """A text follower of the run as a process (``rlsup attach --plain`` unless told which), its output read
    as it comes. It carries no token: a client is not part of the run (a follower left over is a failure of
    its own, checked apart)."""

    def __init__(self, run_dir: Path, cwd: Path | None = None, *args: str) -> None:
        env = cli_env()
        env.pop(TOKEN_VAR, None)
        self.proc = subprocess.Popen([PY, "-m", "rlsup.supervisor.cli", *(args or ("attach", "--plain")),
                                      "--run-dir", str(run_dir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env, cwd=cwd, stdin=subprocess.DEVNULL)
        self.out = ""
        self.killed = False  # by the harness (a client dropped): its output simply stops
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.out += line

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def reconnects(self) -> int:
        return self.out.count("rlsup: reconnected")

    @property
    def attached(self) -> bool:
        """It followed a live supervisor (one started while no supervisor held the run dir prints the
        journal, says "this run has ... no supervisor ..." and ends: a look at a run, not a client of it)."""
        return "rlsup: this run has " not in self.out

    def kill(self) -> None:
        self.killed = True
        if self.running:
            self.proc.kill()
        self.finish()

    def finish(self, timeout: float = 30.0) -> int | None:
        """Wait for it to end by itself (up to ``timeout``); its exit code, None if it is still running."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._reader.join(10)
        return rc


class World:
    def __init__(self, tmp: Path, seq: Sequence, token: str, disk: Path | None) -> None:
        self.tmp = tmp
        self.seq = seq
        self.token = token
        self.disk = disk  # a tmpfs the run dir lives on (disk_full), or None
        self.run_dir = (disk or tmp) / "run"
        self.config = tmp / CONFIG.name
        shutil.copy(CONFIG, self.config)
        self.env = {TOKEN_VAR: token, "RLSUP_DEMO_PORT": str(free_port()), **seq.env()}
        self.followers: list[Follower] = []
        # promises seen broken while acting: a client still following after the run ended (before it was
        # resumed), a preemption that did not end the run preempted or was not continued from its checkpoint
        self.broken: list[str] = []
        self.harmed: list[str] = []  # the faults that reached a process of the run ("kill9 trainer", "disk_full")
        self.log: list[str] = []
        self.t0 = time.monotonic()

    # ------------------------------------------------------------------ looking

    def say(self, what: str) -> None:
        self.log.append(f"{time.monotonic() - self.t0:7.1f}s {what}")

    def cli(self, *args: str, timeout: float = CEILING_S, run_dir: bool = True) -> subprocess.CompletedProcess:
        where = ("--run-dir", str(self.run_dir)) if run_dir else ()
        try:
            return subprocess.run([PY, "-m", "rlsup.supervisor.cli", *args, *where],
                                  capture_output=True, text=True, cwd=self.tmp, env=cli_env(self.env), timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            return subprocess.CompletedProcess(e.cmd, -1, str(e.stdout or ""), f"timed out after {timeout:g}s")

    def events(self) -> list[dict[str, Any]]:
        from rlsup.supervisor.rundir.journal import read_records

        p = self.run_dir / "events.jsonl"
        return [r.to_dict() for r in read_records(p)] if p.exists() else []

    def supervisor_pid(self) -> int | None:
        from rlsup.supervisor.rundir.layout import RunPaths, is_locked, read_owner

        paths = RunPaths(self.run_dir)
        if not is_locked(paths):
            return None
        pid = int((read_owner(paths) or {}).get("pid") or 0)
        return pid if pid and alive(pid) else None

    def ended(self) -> bool:
        """The journal's latest run event is ``run_ended`` (the run is over until it is resumed)."""
        last = next((e["kind"] for e in reversed(self.events()) if e["kind"] in ("run_started", "run_ended")), None)
        return last == "run_ended"

    def live(self) -> bool:
        return self.supervisor_pid() is not None and not self.ended()

    def processes(self, component: str) -> tuple[int, int] | None:
        """(pid, monitor pid) of the component's running attempt, from its monitor's record."""
        from rlsup.supervisor.monitor.process import records

        best = None
        for _, rec in records(self.run_dir / "monitors"):
            if rec["component"] == component and rec.get("status") == "running" and alive(int(rec["pid"])):
                if best is None or rec["attempt"] > best["attempt"]:
                    best = rec
        return (int(best["pid"]), int(best["shim_pid"])) if best else None

    def state(self) -> dict[str, Any]:
        try:
            return json.loads((self.run_dir / "state.json").read_text())
        except (OSError, ValueError):
            return {}

    def step(self) -> int:
        return int(((self.state().get("components") or {}).get("trainer") or {}).get("step") or 0)

    # ------------------------------------------------------------------ starting and ending

    def up(self, *extra: str) -> subprocess.CompletedProcess:
        # On the small tmpfs `up`'s preflight refuses ("only 0.1 GB free"): there, and only there, skip it.
        skip = ("--skip-checks",) if self.disk is not None else ()
        r = self.cli("up", str(self.config), "-d", *extra, *skip)
        self.say(f"rlsup up -d {' '.join(extra)} -> {r.returncode}")
        return r

    def attach(self) -> None:
        """A client attached to the run, where it is live and none is (one that found no supervisor when it
        started, the run being taken over, never attached: see :attr:`Follower.attached`)."""
        if self.live() and not any(f.running for f in self.followers):
            self.followers.append(Follower(self.run_dir, self.tmp))

    def down(self) -> subprocess.CompletedProcess:
        r = self.cli("down")
        self.say(f"rlsup down -> {r.returncode}: {(r.stdout + r.stderr).strip().splitlines()[-1:]}")
        return r

    def still_following(self, after: str) -> list[str]:
        """The clients (not dropped by the harness) still following ``CEILING_S`` after ``after``: each ends with
        the run it follows."""
        return [f"client {n} (attach --plain) still following {CEILING_S:g}s after {after}: "
                f"{f.out.strip().splitlines()[-3:]}"
                for n, f in enumerate(self.followers, 1) if not f.killed and f.finish(CEILING_S) is None]

    def teardown(self) -> None:
        """Whatever happened: free the disk, end the followers, SIGKILL every process with the token."""
        from tests.faults.harness import FaultRun

        self.free_disk()
        for f in self.followers:
            if f.running:
                f.kill()
        FaultRun(self.tmp, self.run_dir, self.token).kill_everything()

    # ------------------------------------------------------------------ the disk

    def fill_disk(self) -> None:
        assert self.disk is not None
        fd = os.open(self.disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            with contextlib.suppress(OSError):
                os.posix_fallocate(fd, 0, shutil.disk_usage(self.disk).free)
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * 4096):  # what fallocate left (tmpfs rounds to pages)
                    pass
        finally:
            os.close(fd)

    def free_disk(self) -> None:
        if self.disk is not None:
            with contextlib.suppress(OSError):
                (self.disk / "filler").unlink()

    # ------------------------------------------------------------------ acting

    def do(self, action: Action) -> str:
        if action.at:
            self._wait_step(action.at)
        said: str = getattr(self, f"_do_{action.kind}")(action)
        self.attach()  # a client stays attached throughout
        return said

    def _wait_step(self, at: float, stuck: float = STUCK_S, ceiling: float = CEILING_S) -> None:
        """Until the trainer reached step ``at``; or the run is not live; or the trainer made no progress for
        ``stuck`` seconds (it was stopped, it hangs, what it waits for is down): what comes next comes then."""
        seen = [self.step(), time.monotonic()]

        def there() -> bool:
            step = self.step()
            if step != seen[0]:
                seen[:] = [step, time.monotonic()]
            return step >= at or not self.live() or time.monotonic() - seen[1] > stuck

        wait(there, ceiling, 0.5)

    def _target(self, component: str) -> tuple[int, int] | None:
        """Wait for ``component`` to run (the run may end first: no wait then, or it may not come back)."""
        got = wait(lambda: "over" if not self.live() else self.processes(component), CEILING_S)
        return None if got == "over" else got

    def _signal_component(self, action: Action, sig: int, monitor: bool = False) -> str:
        assert action.target is not None
        procs = self._target(action.target)
        if procs is None:
            return f"skipped: {action.target} not running"
        pid = procs[1] if monitor else procs[0]
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
            self.harmed.append(f"{'monitor of ' if monitor else ''}{action.target} ({signal.Signals(sig).name})")
        return f"pid {pid}"

    def _do_kill9(self, action: Action) -> str:
        return self._signal_component(action, signal.SIGKILL)

    def _do_kill9_monitor(self, action: Action) -> str:
        return self._signal_component(action, signal.SIGKILL, monitor=True)

    def _do_sigstop(self, action: Action, monitor: bool = False) -> str:
        said = self._signal_component(action, signal.SIGSTOP, monitor)
        if said.startswith("pid "):
            time.sleep(action.arg or 1)  # the fault's length, not a wait for anything
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(said.split()[1]), signal.SIGCONT)
        return said

    def _do_sigstop_monitor(self, action: Action) -> str:
        return self._do_sigstop(action, monitor=True)

    def _do_kill9_supervisor(self, action: Action) -> str:
        pid = self.supervisor_pid()
        if pid is None:
            return "skipped: no supervisor"
        os.kill(pid, signal.SIGKILL)
        wait(lambda: not alive(pid), 30, 0.05)
        r = self.up()  # the take-over
        return f"pid {pid} killed; take-over: up -d -> {r.returncode} {(r.stdout + r.stderr).strip()[-300:]}"

    def _do_sigstop_supervisor(self, action: Action) -> str:
        pid = self.supervisor_pid()
        if pid is None:
            return "skipped: no supervisor"
        os.kill(pid, signal.SIGSTOP)
        time.sleep(action.arg or 1)
        os.kill(pid, signal.SIGCONT)
        return f"pid {pid}"

    def _do_disk_full(self, action: Action) -> str:
        self.harmed.append("the disk full")
        self.fill_disk()
        try:
            time.sleep(action.arg or 1)
            r = self.cli("status", timeout=CEILING_S)
            return f"status on the full disk -> {r.returncode}"
        finally:
            self.free_disk()

    def _do_client_drop(self, action: Action) -> str:
        live = [f for f in self.followers if f.running]
        if not live:
            return "skipped: no client attached"
        live[-1].kill()
        return f"client pid {live[-1].proc.pid} killed, a new one attached"

    def _command(self, *args: str) -> str:
        if self.supervisor_pid() is None:
            return "skipped: no supervisor"
        r = self.cli(*args)
        return f"-> {r.returncode}: {(r.stdout + r.stderr).strip()[-300:]}"

    def _do_restart(self, action: Action) -> str:
        return self._command("restart", action.target or "")

    def _do_stop(self, action: Action) -> str:
        return self._command("stop", action.target or "")

    def _do_start(self, action: Action) -> str:
        return self._command("start", action.target or "")

    def _do_resume(self, action: Action) -> str:
        return self._command("resume", action.target or "")

    def _do_restart_supervisor(self, action: Action) -> str:
        return self._command("restart-supervisor")

    def _do_down_resume(self, action: Action) -> str:
        r = self.down()
        self.broken += self.still_following("`rlsup down` ended the run")
        up = self.up("--resume")
        return f"down -> {r.returncode}; up --resume -> {up.returncode} {(up.stdout + up.stderr).strip()[-300:]}"

    def _do_preempt(self, action: Action) -> str:
        """The platform takes the machine: SIGTERM to the supervisor itself (a spot VM's shutdown, `docker stop`).
        The run checkpoints the trainer (`preempt:`), ends `preempted` with no process left and every client
        ended with it; the README's plain `rlsup up CONFIG -d` then continues the trainer from where it stood."""
        pid = self.supervisor_pid()
        if pid is None or self.ended():
            return "skipped: no live run"
        comps = (self.state().get("components") or {}).items()
        settled = {n for n, c in comps if c.get("state") in ("completed", "fatal")}  # the run may be ending
        os.kill(pid, signal.SIGTERM)
        self.harmed.append("preempted")
        if not wait(lambda: not alive(pid), 3 * CEILING_S, 0.1):
            self.broken.append(f"the supervisor (pid {pid}) still runs {3 * CEILING_S:g}s after a SIGTERM")
            return f"pid {pid}: did not end"
        end = next((e for e in reversed(self.events()) if e["kind"] == "run_ended"), {})
        if end.get("outcome") != "preempted" and not settled:
            self.broken.append(f"a SIGTERM to the supervisor of a live run ended it {end.get('outcome')!r}, not "
                               f"'preempted': {end}")
        left = wait(lambda: not processes_with(self.token), CEILING_S, 0.2)
        if not left:
            self.broken.append(f"processes of the run outlived its preemption: {processes_with(self.token)}")
        self.broken += self.still_following("the run ended preempted")
        stood = ((end.get("checkpoints") or {}).get("trainer") or {}).get("step")
        since = end.get("seq", 0)
        up = self.up()  # the README's command as it is, no flag: a preempted run is continued
        said = f"pid {pid} ended {end.get('outcome')} (trainer at {stood}); up -d -> {up.returncode}"
        if up.returncode != 0 or "continuing the run" not in up.stdout + up.stderr:
            self.broken.append(f"plain `rlsup up -d` after a preemption did not continue the run (exit "
                               f"{up.returncode}): {(up.stdout + up.stderr).strip()[-500:]}")
            return said
        if stood is not None and "trainer" not in settled:
            first = wait(lambda: next((e for e in self.events() if e["seq"] > since and e["kind"] == "started"
                                       and e.get("component") == "trainer"), None), CEILING_S)
            if first is not None and (first.get("resume") or {}).get("step") != stood:
                self.broken.append(f"the trainer stood at step {stood} when the run was preempted, but the "
                                   f"continued run started it with resume {first.get('resume')}")
        return said

    def finish(self) -> str:
        """The sequence's end "finish": let the run end by itself (it may not: a hang, a stopped trainer)."""
        self._wait_step(float("inf"), stuck=2 * STUCK_S, ceiling=2 * CEILING_S)
        return "ended by itself" if not self.live() else f"still live (trainer at step {self.step()})"


__all__ = ["World", "Follower", "wait"]
