"""Taking the Python stacks of a component's processes (py-spy), off the supervisor's loop.

:meth:`HangGate.take` runs ``py-spy dump --json`` on every process of an attempt's tree (all ranks of a
``torchrun``, a launcher's children), in parallel, each bounded by :data:`STACK_TIMEOUT_S`, in a thread of
its own: the loop never waits on it. The full dump goes to ``<run_dir>/stacks/``; what the stacks say is
put in words by :mod:`rlsup.supervisor.diagnosis.stacks`.

:class:`HangGate` holds back the first ``Stalled`` input of a stall episode until the stacks are taken,
then feeds it with the stacks' short form added to its evidence: the flag says where the component waits,
a restart on stall (``progress.on_stall: restart``) comes after the stacks were taken, and one stall is
never taken twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..diagnosis.stacks import Proc, Stacks, classify, full_dump, parse_dump, ptrace_hint, short_form
from ..monitor.process import AttemptProcesses
from ..rules import lifecycle as lc
from ..rundir.journal import write_atomic
from ..rundir.layout import UnsafeRunDir, check_owned_dir

STACK_TIMEOUT_S = 10.0  # per process: py-spy pauses it for milliseconds; more means it cannot read it


def find_py_spy() -> str | None:
    """The py-spy to run: ``$RLSUP_PY_SPY`` (empty: none), else the one installed beside rlsup's Python (the
    ``py-spy`` dependency), else the first on PATH."""
    env = os.environ.get("RLSUP_PY_SPY")
    if env is not None:
        return env if env and os.access(env, os.X_OK) else None
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def _proc_info(pid: int) -> tuple[str, int | None]:
    """A process's command name and its ``$RANK`` (a torch.distributed worker), as /proc tells them."""
    name = "?"
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip() or name
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return name, None
    rank = next((e[5:] for e in env if e.startswith(b"RANK=")), b"")
    return name, int(rank) if rank.isdigit() else None


def dump_one(py_spy: str, pid: int, *, native: bool) -> Proc:
    """One process's threads, or why py-spy could not read them. Its exit status is not read: the
    supervisor reaps every child (its subreaper role), so success is JSON on stdout."""
    name, rank = _proc_info(pid)
    argv = [py_spy, "dump", "--json", "--pid", str(pid), *(["--native"] if native else [])]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=STACK_TIMEOUT_S, stdin=subprocess.DEVNULL,
                           env={**os.environ, "RUST_BACKTRACE": "0"}, check=False)
    except subprocess.TimeoutExpired:
        return Proc(pid, name, rank, problem="timeout",
                    error=f"py-spy did not answer within {STACK_TIMEOUT_S:g}s (the process is stopped or in "
                          "uninterruptible sleep?)")
    except OSError as e:
        return Proc(pid, name, rank, problem="failed", error=f"cannot run {py_spy}: {e.strerror or e}")
    try:
        return Proc(pid, name, rank, threads=parse_dump(r.stdout))
    except ValueError:
        problem, words = classify(r.stderr)
        return Proc(pid, name, rank, problem=problem, error=words)


def take(component: str, attempt: int, pids: Sequence[int], *, native: bool = False,
         py_spy: str | None = None) -> Stacks:
    """The stacks of ``pids`` (blocking: run it in a thread)."""
    if py_spy is None:
        return Stacks(component, attempt, error=f"py-spy is not installed: `{sys.executable} -m pip install "
                                                 "py-spy` (or set RLSUP_PY_SPY to one)")
    if not pids:
        return Stacks(component, attempt, error=f"no process of {component} is running")
    with ThreadPoolExecutor(min(4, len(pids)), thread_name_prefix="rlsup-py-spy") as pool:  # 4 py-spy at once
        procs = tuple(pool.map(lambda p: dump_one(py_spy, p, native=native), sorted(pids)[:256]))  # 256 at most
    hints: tuple[str, ...] = ()
    if any(p.problem == "denied" for p in procs):
        try:
            scope: str | None = Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip()
        except OSError:
            scope = None
        hints = (ptrace_hint(scope, os.geteuid() == 0),)
    return Stacks(component, attempt, procs=procs, hints=hints)


def write_dump(folder: Path, s: Stacks, why: str, native: bool, now: float) -> Stacks:
    """The full dump written to ``folder/<component>.<attempt>.<UTC time>.txt`` (0600); the stacks with its path
    (unchanged if it cannot be written: the short form is still worth having)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    header = [f"# rlsup: stacks of {s.component} attempt {s.attempt} ({why}), {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(now))}",
              f"# py-spy dump{' --native' if native else ''}; innermost frame first"]
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        check_owned_dir(folder)  # never a link: the run dir's rule (rundir.layout)
        path = folder / f"{s.component}.{s.attempt}.{stamp}.txt"
        n = 1
        while path.exists():
            n += 1
            path = folder / f"{s.component}.{s.attempt}.{stamp}-{n}.txt"
        write_atomic(path, full_dump(s, header).encode())
    except (OSError, UnsafeRunDir) as e:
        return dataclasses.replace(s, hints=(*s.hints, f"the full dump could not be written to {folder}: {e}"))
    return dataclasses.replace(s, path=str(path))


class HangGate:
    """The stall gate: :meth:`hold` until :meth:`take` has the stacks (also ``rlsup stack``'s: one capture at a
    time in a thread of its own), then ``rejudge``: the run judges the stall again."""

    def __init__(self, folder: Path, rejudge: Callable[[], None]):
        self.folder = folder
        self._pool: ThreadPoolExecutor | None = None
        self._rejudge = rejudge
        self._pending: dict[str, int] = {}  # component -> the attempt whose stacks are being taken
        self._ready: dict[tuple[str, int], tuple[str, ...]] = {}

    def hold(self, name: str, attempt: int, inp: lc.Stalled, current: AttemptProcesses | None) -> lc.Stalled | None:
        """The input to feed now (the stacks added to its evidence), or None while they are being taken.
        ``current``: the component's attempt now (no stacks to take where it is not ``attempt``)."""
        lines = self._ready.pop((name, attempt), None)
        if lines is not None:
            return dataclasses.replace(inp, evidence=(*inp.evidence, *lines))
        if self._pending.get(name) == attempt:
            return None
        if current is None or current.attempt != attempt or not _on_a_loop():
            return inp
        fut = asyncio.ensure_future(self.take(name, attempt, current.members(), why="stall"))
        self._pending[name] = attempt
        fut.add_done_callback(lambda f: self._taken(name, attempt, f))
        return None

    def _taken(self, name: str, attempt: int, fut: asyncio.Future[Stacks]) -> None:
        if self._pending.get(name) == attempt:
            del self._pending[name]
        if fut.cancelled():
            return
        exc = fut.exception()
        lines: tuple[str, ...] = (f"stacks: not taken: {exc!r}",) if exc else tuple(short_form(fut.result()))
        self._ready[(name, attempt)] = lines
        try:
            self._rejudge()
        finally:
            # Not fed at once (progress came back, the attempt ended): these stacks are of no later stall.
            self._ready.pop((name, attempt), None)

    async def take(self, component: str, attempt: int, pids: Sequence[int], *, why: str,
                   native: bool = False) -> Stacks:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="rlsup-stacks")

        def work() -> Stacks:
            s = take(component, attempt, pids, native=native, py_spy=find_py_spy())
            return write_dump(self.folder, s, why, native, time.time())

        return await asyncio.get_running_loop().run_in_executor(self._pool, work)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def reply(s: Stacks) -> dict[str, Any]:
    """What ``rlsup stack`` is answered: the short form, the dump's path, and each process in brief."""
    return {"ok": s.error is None, "component": s.component, "attempt": s.attempt, "lines": short_form(s),
            "path": s.path, **({"error": s.error} if s.error else {}),
            "processes": [{"pid": p.pid, "name": p.name, "rank": p.rank, "threads": len(p.threads),
                           "error": p.error} for p in s.procs]}
