"""Starting the supervisor as a daemon (``rlsup up --headless`` in its own session, no terminal, output appended
to ``<run_dir>/supervisor.log``), and finding the run a client command means."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..client.session import Client, NotRunning
from ..records.events import RunEnded, RunStarted
from ..render.status import display_path
from ..rundir.layout import SUPERVISOR_LOG, RunPaths, is_locked, read_owner

READY_TIMEOUT_S = 60.0
ENDING_TIMEOUT_S = 300.0  # a run that ends at once still stops what it started (stop timeouts)


class NoRun(Exception):
    """No live supervisor for the run a client command asked about (exit 1)."""


class AmbiguousRun(Exception):
    """Several live runs and no ``--run-dir`` to choose (exit 2)."""


def live_runs(base: Path) -> list[Path]:
    return sorted(d for d in base.iterdir() if d.is_dir() and is_locked(RunPaths(d))) if base.is_dir() else []


def resolve_run_dir(arg: str | None, *, ended_ok: bool = False) -> Path:
    """The run dir a client command talks to: ``--run-dir``, else ``$RLSUP_RUN_DIR``, else the
    single live run under ``./runs`` (with ``ended_ok``: else the most recently active run there)."""
    if arg:
        return Path(arg).expanduser().absolute()
    if env := os.environ.get("RLSUP_RUN_DIR"):
        return Path(env)
    base = Path.cwd() / "runs"
    runs = live_runs(base)
    # without a live run: the run dir whose journal was written last
    journals = sorted(base.glob("*/events.jsonl"), key=lambda p: p.stat().st_mtime) if not runs and base.is_dir() else []
    latest = journals[-1].parent if journals else None
    if latest is not None and ended_ok:
        print(f"rlsup: no live run under {display_path(base)}; showing the most recently active one, "
              f"{display_path(latest)}", file=sys.stderr)
        return latest
    if not runs:
        raise NoRun(f"no supervisor is running under {display_path(base)}; start one with `rlsup up CONFIG`, "
                    "or pass --run-dir DIR" + (_ended_note(RunPaths(latest), name_it=True) if latest else ""))
    if len(runs) > 1:
        names = "\n".join(f"  --run-dir {display_path(r)}" for r in runs)
        raise AmbiguousRun(f"{len(runs)} runs are live under {display_path(base)}; choose one:\n{names}")
    return runs[0]


def stranded_runs(base: Path) -> list[Path]:
    """Run dirs under ``base`` that no supervisor owns but that may still have processes: live
    monitors of the run, or a journal whose last run never ended (its supervisor died)."""
    from ..monitor.process import is_monitor_of, records
    from ..rundir.replay import read_run

    if not base.is_dir():
        return []
    out = []
    for d in sorted(base.iterdir()):
        paths = RunPaths(d)
        if not d.is_dir() or not paths.events.exists() or is_locked(paths):
            continue
        if any(is_monitor_of(r, paths.root) for _, r in records(paths.monitors)):
            out.append(d)
            continue
        try:
            start, end = read_run(paths).last_run
        except OSError:
            continue
        if start is not None and end is None:
            out.append(d)
    return out


def require_live(run_dir: Path) -> RunPaths:
    paths = RunPaths(run_dir)
    if not is_locked(paths):
        if not paths.events.exists():
            raise NoRun(f"no supervisor is running for {display_path(run_dir)} (not a run directory); "
                        "start one with `rlsup up CONFIG`")
        raise NoRun(f"no supervisor is running for {display_path(run_dir)}" + _ended_note(paths))
    return paths


def _ended_note(paths: RunPaths, *, name_it: bool = False) -> str:
    """How the run in ``paths`` ended, from the journal's last event, and where to look."""
    from ..rundir.journal import last_event

    if not paths.events.exists():
        return ""
    shown = display_path(paths.root)
    if (end := last_event(paths.events)) is not None and end.get("kind") == RunEnded.kind:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(end.get("ts", 0)))
        how = f"ended {when}: {end.get('reason')} (exit code {end.get('exit_code')})"
    else:
        how = "its supervisor is gone without ending it (killed?); `rlsup up CONFIG` takes the run dir over"
    which = f"the last run here ({shown})" if name_it else "the run"
    return f"; {which} {how}. See `rlsup events --run-dir {shown}` or `rlsup report --run-dir {shown}`"


def spawn(config: str, run_dir: Path, extra: list[str], *, env: dict[str, str] | None = None,
          cwd: str | None = None) -> subprocess.Popen[bytes]:
    """Start the daemon (in ``env`` and ``cwd``, by default this process's); raises ``rundir.UnsafeRunDir``
    (before starting anything) for a run dir another user could influence."""
    paths = RunPaths(run_dir)
    paths.create()
    log = os.open(paths.root / SUPERVISOR_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW,
                  0o600)
    argv = [sys.executable, "-m", "rlsup.supervisor.cli", "up", str(Path(config).absolute()),
            "--run-dir", str(run_dir), "--headless", "--daemon-child", "--skip-checks", *extra]
    try:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                close_fds=True, env=dict(os.environ if env is None else env, PYTHONUNBUFFERED="1"),
                                cwd=cwd)
    finally:
        os.close(log)


class HeldInterrupt:
    """Ctrl-C while ``up`` starts a supervisor, held (a flag) until ``check`` or ``release`` acts on it: Python
    3.11's ``asyncio.run`` swallows a cancellation that lands as ``wait_for`` completes, losing the Ctrl-C."""

    def __init__(self) -> None:
        self.got = False
        self._old: Any = None
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, lambda _signum, _frame: setattr(self, "got", True))

    def check(self) -> None:
        if self.got:
            raise KeyboardInterrupt

    def release(self, *, check: bool = True) -> None:
        """The usual handler back; raises KeyboardInterrupt if a Ctrl-C came while held."""
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            self._old = None
        if check:
            self.check()


def started_with(pid: int, host: str | None) -> tuple[dict[str, str] | None, str | None]:
    """The environment and working directory the supervisor ``pid`` on ``host`` was started with, where it is an
    rlsup process of this host (None for what cannot be read)."""
    import psutil

    with contextlib.suppress(psutil.Error, OSError):
        p = psutil.Process(pid)
        if host == socket.gethostname() and any("rlsup" in a for a in p.cmdline()):
            return p.environ(), p.cwd()
    return None, None


def wait_ready(proc: subprocess.Popen[bytes], run_dir: Path, check: Callable[[], None] = lambda: None) -> str | None:
    """Wait until the daemon answers on its socket. None when it does; else why not. ``check`` is
    called between tries (a held Ctrl-C raises there)."""
    paths = RunPaths(run_dir)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        check()
        if proc.poll() is not None:
            if is_locked(paths):
                return None  # lost a start race: another supervisor owns the run; attach to it
            return f"the supervisor exited with code {proc.returncode} before it was ready"
        if paths.sock.exists() and asyncio.run(_hello(paths.sock, 2.0)) is not None:
            return None
        time.sleep(0.05)
    return f"the supervisor did not answer on {paths.sock} within {READY_TIMEOUT_S:g}s"


async def _hello(sock: Path, timeout: float) -> dict[str, Any] | None:
    """The supervisor's hello on ``sock``; None when it does not answer within ``timeout``."""
    try:
        c = await Client.open_unix(sock, name="up", timeout=timeout)
    except (NotRunning, OSError, asyncio.TimeoutError):
        return None
    try:
        return dict(c.server or {})
    finally:
        await c.close()


def ended_at_once(proc: subprocess.Popen[bytes], run_dir: Path) -> dict[str, Any] | None:
    """The ``run_ended`` event of a daemon that ended its run as it started; None while it supervises (its
    hello's ``ending`` says so: it answers only after its first evaluation of the run)."""
    paths = RunPaths(run_dir)
    if proc.poll() is None:
        hello = asyncio.run(_hello(paths.sock, 5.0)) if paths.sock.exists() else None
        if hello is not None and not hello.get("ending"):
            return None
        if hello is None and proc.poll() is None:
            return None  # it answered a moment ago: a hiccup is not an end
        try:
            proc.wait(ENDING_TIMEOUT_S)  # it is stopping what it had started: wait for its last word
        except subprocess.TimeoutExpired:
            return None
    return run_ended_by(paths, proc.pid)


def journaled_by(paths: RunPaths, kind: str, ours: Callable[[Any], bool]) -> list[dict[str, Any]]:
    """The events of ``kind`` journaled in the runs whose ``run_started`` is ``ours`` (none when the journal
    cannot be read): ``adopted``, what a supervisor took over; ``run_ended``, how it ended the run."""
    from ..rundir.journal import read_records

    mine = False
    out = []
    try:
        for r in read_records(paths.events, kinds={RunStarted.kind, kind}.__contains__):
            if isinstance(r.event, RunStarted):
                mine = ours(r.event)
            elif mine:
                out.append(r.to_dict())
    except OSError:
        return []
    return out


def run_ended_by(paths: RunPaths, pid: int) -> dict[str, Any] | None:
    """The ``run_ended`` event that the supervisor ``pid`` wrote into the journal, if any."""
    return next(reversed(journaled_by(paths, RunEnded.kind, lambda started: started.pid == pid)), None)


def log_tail(run_dir: Path) -> list[str]:
    """The last 20 lines of the supervisor's own log (of its last 16 KiB); none when it cannot be read."""
    from ..rundir.logs import last_lines

    with contextlib.suppress(OSError):
        return last_lines(Path(run_dir) / SUPERVISOR_LOG, 20, max_bytes=16384)
    return []


def owner_desc(run_dir: Path) -> str:
    o = read_owner(RunPaths(run_dir)) or {}
    return f"pid {o.get('pid', '?')} on {o.get('host', '?')}"
