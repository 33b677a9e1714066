"""One component's lifecycle: pending -> starting -> running -> (backoff | completed | fatal | stopped).

A single coroutine (:meth:`Component.main`) walks the states; commands (start, stop, restart)
and changes elsewhere in the run wake it through :meth:`poke`. Output is read on the event loop
(``add_reader``), so exits, probes and output are ordered in one thread.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal as signal_mod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import probes
from .config import Component as ComponentCfg
from .logs import LineNormaliser, LogRing, LogWriter, RotatingLog
from .policy import RestartTracker
from .process import ENV_ATTEMPT, ENV_COMPONENT, ENV_RUN_DIR, ProcessTree
from .progress import ProgressMatcher, ProgressTracker

if TYPE_CHECKING:
    from .supervisor import Supervisor

READ_SIZE = 65536
READS_PER_WAKEUP = 16
# After a wakeup that read something, leave the pipe alone this long so that output arrives in
# large chunks: a child printing line by line otherwise wakes us once per few lines, and the
# per-wakeup cost dominates. The pipe holds 1 MiB, far more than a child writes in 2 ms.
READ_PAUSE_S = 0.002
DIAG_TAIL = 1000


@dataclass
class _Pipe:
    """The output pipe of one attempt (it may outlive the attempt's root process)."""

    fd: int
    norm: LineNormaliser
    tree: ProcessTree
    closed: bool = False
    paused: bool = False


class Component:
    def __init__(self, name: str, cfg: ComponentCfg, sup: Supervisor):
        self.name = name
        self.cfg = cfg
        self.sup = sup
        logs_cfg = sup.cfg.logs_for(name)
        self.line_cap = logs_cfg.line_cap
        self.ring = LogRing(logs_cfg.ring_lines)
        self.writer = LogWriter(
            RotatingLog(sup.paths.log(name), logs_cfg.max_bytes, logs_cfg.backups),
            on_error=lambda e: sup.threadsafe(self._disk_error, e),
            on_recovered=lambda lost: sup.threadsafe(self._disk_recovered, lost),
        )
        self.tracker = RestartTracker(cfg.restart, sup.rng)
        p = cfg.progress
        self.matcher = ProgressMatcher(p.pattern, p.preset) if p else ProgressMatcher()
        self.progress = ProgressTracker(total=p.total if p else None)
        self._ready_log = re.compile(cfg.ready.log, re.MULTILINE) if cfg.ready and cfg.ready.log else None
        self.state = "pending"
        self.attempt = 0
        self.tree: ProcessTree | None = None
        self.pipes: list[_Pipe] = []
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self.last_output_at: float | None = None
        self._ready_evt = asyncio.Event()
        self._poke = asyncio.Event()
        self._want: str = "run"  # "run" | "stop"
        self._stop_by: str | None = None
        self._restart_requested = False
        self._start_requested = False
        self._forced_failure: str | None = None
        self._cleanups: set[asyncio.Task[None]] = set()
        self._progress_dirty = False
        self._disk_flagged = False
        self.task: asyncio.Task[None] | None = None
        self.history: list[Any] = []  # diagnosis.AttemptRecord of recent attempts
        self.last_exit_info: tuple[int | None, str | None] = (None, None)
        self.resume_step: int | None = None  # one-shot: `rlsup resume NAME --step N`
        self.prev_pids: set[int] = set()  # every process of the previous attempt (GPU hygiene)
        self.watch_info: dict[str, dict[str, Any]] = {}  # watch path -> {step, mtime}
        self.checkpoint_info: dict[str, Any] | None = None  # latest complete checkpoint

    # ------------------------------------------------------------------ commands

    def poke(self) -> None:
        self._poke.set()

    def request_stop(self, by: str) -> bool:
        """Stop this component (and keep it stopped). False if it is already final."""
        self._want = "stop"
        self._stop_by = by
        self._restart_requested = False
        if self.state in ("starting", "running"):
            self._terminate(by)
        self.poke()
        return True

    def request_start(self) -> bool:
        if self.state not in ("stopped", "completed", "fatal"):
            return False
        self._want = "run"
        self._start_requested = True
        self.tracker.reset()
        self.poke()
        return True

    def request_restart(self, by: str) -> None:
        self.sup.follow_restart(self)
        if self.state in ("starting", "running"):
            self._restart_requested = True
            self._want = "stop"
            self._terminate(by)
        else:
            self._want = "run"
            self._start_requested = True
            self.tracker.reset()
        self.poke()

    # ------------------------------------------------------------------ main coroutine

    async def main(self) -> None:
        while True:
            if self._want == "stop":
                await self._become_stopped(self._stop_by or "user")
                continue
            if not await self._wait_for_dependencies():
                continue
            outcome = await self._run_attempt()
            if self._want == "stop" or outcome == "stopped":
                by = self._stop_by or "user"
                self.sup.emit("stopped", self.name, by=by)
                self.state = "stopped"
                self._stop_by = None
                if self._restart_requested:
                    self._restart_requested = False
                    self._want = "run"
                    self.tracker.reset()
                    continue
                await self._idle_until_start()
                continue
            if outcome == "spawn_failed_fatal":
                await self._idle_until_start()
                continue
            decision = outcome
            assert isinstance(decision, tuple)
            action, delay, reason = decision
            if action == "restart":
                self.state = "backoff"
                self.sup.emit("restart_scheduled", self.name, delay_s=delay, attempt=self.attempt + 1,
                              reason=reason)
                self.sup.follow_restart(self)
                await self._sleep_interruptible(delay)
                continue
            if action == "complete":
                self.state = "completed"
                self.sup.emit("completed", self.name)
            else:
                self.state = "fatal"
                self.sup.emit("fatal", self.name, reason=reason)
            await self._idle_until_start()

    async def _become_stopped(self, by: str) -> None:
        if self.state not in ("stopped",):
            self.state = "stopped"
            self.sup.emit("stopped", self.name, by=by)
        self._stop_by = None
        await self._idle_until_start()

    async def _idle_until_start(self) -> None:
        """Stay final (stopped, completed, fatal) until a start or restart command."""
        self.sup.component_changed(self)
        while not self._start_requested:
            self._poke.clear()
            await self._poke.wait()
        self._start_requested = False
        self._want = "run"
        self.state = "pending"

    async def _sleep_interruptible(self, delay: float) -> None:
        self._poke.clear()
        try:
            await asyncio.wait_for(self._poke.wait(), delay)
        except (TimeoutError, asyncio.TimeoutError):
            pass
        if self._want == "stop" and self.state == "backoff":
            self.state = "stopped"
            self.sup.emit("stopped", self.name, by=self._stop_by or "user")
            self._stop_by = None
            if self._restart_requested:
                self._restart_requested = False
                self._want = "run"
                return
            await self._idle_until_start()

    async def _wait_for_dependencies(self) -> bool:
        """Wait until every dependency meets its condition; False if told to stop meanwhile."""
        last_waiting: list[str] | None = None
        while True:
            if self._want == "stop":
                return False
            ok, waiting, blocked = self.sup.deps_status(self)
            if blocked:
                self.state = "fatal"
                self.sup.emit("fatal", self.name, reason=blocked)
                await self._idle_until_start()
                return False
            if ok:
                return True
            if waiting != last_waiting and not self.sup.shutting_down:
                self.state = "pending"
                self.sup.emit("pending", self.name, waiting_for=waiting)
                last_waiting = waiting
            self._poke.clear()
            await self._poke.wait()

    # ------------------------------------------------------------------ one attempt

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.sup.cfg.file_env)
        env.update(self.sup.cfg.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.update(self.cfg.env)
        if self.cfg.gpus is not None:
            # NVML numbers GPUs in PCI bus order; make CUDA agree so `gpus` means one thing.
            env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in self.cfg.gpus)
        env[ENV_RUN_DIR] = str(self.sup.paths.root)
        env[ENV_COMPONENT] = self.name
        env[ENV_ATTEMPT] = str(self.attempt)
        env["RLSUP_NAME"] = self.sup.cfg.name
        return env

    async def _run_attempt(self) -> Any:
        """Spawn, wait for ready, wait for exit. Returns "stopped", or (action, delay, reason)."""
        await self._await_cleanups()
        if self._want == "stop":
            return "stopped"
        if self.prev_pids:
            await self.sup.wait_gpu_release(self, self.prev_pids)
            if self._want == "stop":
                return "stopped"
        self.attempt += 1
        argv = self.cfg.argv()
        resume = self.sup.resume_for(self)
        if resume is not None:
            argv = argv + resume["args"]
        tree = ProcessTree(argv, cwd=self.cfg.cwd, env=self._env())
        self._forced_failure = None
        now = self.sup.clock()
        try:
            fd = tree.spawn()
        except OSError as e:
            return self._spawn_failed(argv, e)
        self.tree = tree
        exit_fut = self.sup.watch_exit(tree.pid)  # registered before any await: no exit is missed
        pipe = _Pipe(fd, LineNormaliser(self.line_cap), tree)
        self.pipes.append(pipe)
        self.sup.loop.add_reader(fd, self._on_readable, pipe)
        self.started_at = now
        self.ready_at = None
        self._ready_evt.clear()
        self.progress.reset_to(resume["step"] if resume else None, now)
        self.state = "starting"
        self.sup.emit("started", self.name, pid=tree.pid, attempt=self.attempt,
                      resume={"step": resume["step"], "checkpoint": resume["checkpoint"]} if resume else None,
                      command=argv)
        self.sup.component_changed(self)

        ready_task = asyncio.ensure_future(self._readiness(tree))
        done, _ = await asyncio.wait({exit_fut, ready_task}, return_when=asyncio.FIRST_COMPLETED)
        alive_task: asyncio.Future[None] | None = None
        if ready_task in done and ready_task.result() and not exit_fut.done():
            self.ready_at = self.sup.clock()
            self.state = "running"
            self.sup.emit("ready", self.name, probe=self._probe_desc())
            self.sup.component_changed(self)
            if self.cfg.alive:
                alive_task = asyncio.ensure_future(self._liveness(tree))
        status = await exit_fut
        for t in (ready_task, alive_task):
            if t is not None and not t.done():
                t.cancel()
        return await self._handle_exit(tree, pipe, status)

    def _spawn_failed(self, argv: list[str], e: OSError) -> Any:
        now = self.sup.clock()
        if isinstance(e, FileNotFoundError) and self.cfg.cwd and not os.path.isdir(self.cfg.cwd):
            what = f"working directory {self.cfg.cwd!r} does not exist"
        elif isinstance(e, FileNotFoundError):
            what = f"command not found: {argv[0]!r} (not on PATH: {os.environ.get('PATH', '')})"
        elif isinstance(e, PermissionError):
            what = f"permission denied running {argv[0]!r}"
        else:
            what = f"cannot start {argv[0]!r}: {e.strerror or e}"
        diag = {"category": "unknown", "summary": what, "exception": f"{type(e).__name__}: {e}",
                "location": None, "step": None, "evidence": [what]}
        self.sup.emit("started", self.name, pid=None, attempt=self.attempt, resume=None, command=argv)
        self.sup.emit("exited", self.name, exit_code=127, signal=None, uptime_s=0.0, step=None, diagnosis=diag)
        if isinstance(e, FileNotFoundError | PermissionError | NotADirectoryError):
            # Deterministic: restarting cannot help.
            self.state = "fatal"
            self.sup.emit("fatal", self.name, reason=what)
            return "spawn_failed_fatal"
        d = self.tracker.decide(exit_code=127, signal=None, healthy_s=0.0, now=now, forced_failure=what)
        return (d.action, d.delay_s, d.reason)

    def _probe_desc(self) -> str:
        r = self.cfg.ready
        return "started (no readiness probe)" if r is None else f"{r.kind()} {r.target()}"

    async def _readiness(self, tree: ProcessTree) -> bool:
        r = self.cfg.ready
        if r is None:
            return True
        kind = r.kind()
        deadline = self.sup.clock() + r.timeout
        target = r.target()
        if kind == "file" and not os.path.isabs(target):
            target = os.path.join(self.cfg.cwd or os.getcwd(), target)
        detail = ""
        while True:
            if kind == "log":
                if self._ready_evt.is_set():
                    return True
            else:
                ok, detail = await probes.check(kind, target, min(5.0, r.timeout))
                if ok:
                    return True
            remaining = deadline - self.sup.clock()
            if remaining <= 0:
                break
            if kind == "log":
                try:
                    await asyncio.wait_for(self._ready_evt.wait(), remaining)
                except (TimeoutError, asyncio.TimeoutError):
                    pass
            else:
                await asyncio.sleep(min(r.interval, remaining))
        reason = f"not ready within {r.timeout:g}s ({self._probe_desc()}" + (f"; last: {detail})" if detail else ")")
        self._forced_failure = reason
        self._terminate("readiness timeout", forced=True)
        return False

    async def _liveness(self, tree: ProcessTree) -> None:
        a = self.cfg.alive
        assert a is not None
        fails = 0
        while not tree.exited:
            await asyncio.sleep(a.interval)
            if tree.exited or self.state != "running":
                return
            ok, detail = await probes.check(a.kind(), a.target(), a.timeout)
            fails = 0 if ok else fails + 1
            if fails >= a.failures:
                self._forced_failure = f"liveness probe failed {fails} times ({detail})"
                self.sup.emit("flag", self.name, type="liveness_failed", message=self._forced_failure,
                              evidence=[detail], action="restarting the component")
                self._terminate("liveness", forced=True)
                return

    def _terminate(self, by: str, forced: bool = False) -> None:
        """Signal the current attempt's tree; SIGKILL whatever is left after stop.timeout."""
        tree = self.tree
        if tree is None or tree.exited:
            return
        if not forced:
            self._stop_by = by
        sig = getattr(signal_mod, self.cfg.stop.signal)
        if self.state in ("starting", "running"):
            self.state = "stopping"
            self.sup.emit("stopping", self.name, by=by, signal=self.cfg.stop.signal)
        self.sup.refresh_tree(self.name, tree)
        tree.send(sig)
        tree.term_sent_at = self.sup.clock()
        self.sup.loop.call_later(self.cfg.stop.timeout, self._kill_if_alive, tree)

    def _kill_if_alive(self, tree: ProcessTree) -> None:
        if not tree.exited:
            self.sup.refresh_tree(self.name, tree)
            tree.send(signal_mod.SIGKILL)

    async def _handle_exit(self, tree: ProcessTree, pipe: _Pipe, status: int) -> Any:
        tree.set_exit(status)
        self.last_exit_info = (tree.exit_code, tree.exit_signal)
        self.prev_pids = set(tree.members)
        now = self.sup.clock()
        self._on_readable(pipe, pause=False)  # what the process wrote just before dying
        uptime = now - (self.started_at or now)
        healthy = now - self.ready_at if self.ready_at is not None else 0.0
        step = self.progress.step
        if self._want == "stop" and self._forced_failure is None:
            how = f"killed by {tree.exit_signal}" if tree.exit_signal else f"exit code {tree.exit_code}"
            diag = {"category": "none", "summary": f"stopped by {self._stop_by or 'user'} ({how})",
                    "exception": None, "location": None, "step": step, "evidence": []}
        else:
            diag = self.sup.diagnose(self, tree, status)
        self.sup.emit("exited", self.name, exit_code=tree.exit_code, signal=tree.exit_signal,
                      uptime_s=round(uptime, 3), step=step, diagnosis=diag)
        self.tree = None
        cleanup = asyncio.ensure_future(self._cleanup(tree))
        self._cleanups.add(cleanup)
        cleanup.add_done_callback(self._cleanups.discard)
        if self._want == "stop":
            await self._await_cleanups()
            return "stopped"
        d = self.tracker.decide(exit_code=tree.exit_code, signal=tree.exit_signal, healthy_s=healthy, now=now,
                                forced_failure=self._forced_failure)
        verdict = self.sup.after_exit(self, d, diag)
        return (verdict.action, verdict.delay_s, verdict.reason)

    async def _cleanup(self, tree: ProcessTree) -> None:
        """End whatever the attempt's root left behind; the next attempt waits for this."""
        self.sup.refresh_tree(self.name, tree)
        left = [p for p in tree.alive() if p.pid != tree.pid]
        if left:
            term_at = tree.term_sent_at
            if term_at is None:
                tree.send(getattr(signal_mod, self.cfg.stop.signal))
                term_at = self.sup.clock()
            deadline = term_at + self.cfg.stop.timeout
            while tree.alive_pids() != [] and self.sup.clock() < deadline:
                await asyncio.sleep(0.05)
            if tree.alive():
                tree.send(signal_mod.SIGKILL)
                for _ in range(100):
                    if not tree.alive():
                        break
                    await asyncio.sleep(0.05)
        # Give late output a moment to arrive, then stop reading this attempt's pipe.
        for _ in range(20):
            if pipe_closed(self.pipes, tree):
                break
            await asyncio.sleep(0.01)
        for p in [p for p in self.pipes if p.tree is tree]:
            self._close_pipe(p)

    async def _await_cleanups(self) -> None:
        while self._cleanups:
            await asyncio.gather(*list(self._cleanups), return_exceptions=True)

    # ------------------------------------------------------------------ output

    def _on_readable(self, pipe: _Pipe, pause: bool = True) -> None:
        if pipe.closed:
            return
        got = 0
        for _ in range(READS_PER_WAKEUP):
            try:
                chunk = os.read(pipe.fd, READ_SIZE)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self._close_pipe(pipe)
                return
            got += len(chunk)
            self._ingest(pipe, chunk)
        if got and pause and not pipe.paused:
            pipe.paused = True
            self.sup.loop.remove_reader(pipe.fd)
            self.sup.loop.call_later(READ_PAUSE_S, self._resume_reading, pipe)

    def _resume_reading(self, pipe: _Pipe) -> None:
        pipe.paused = False
        if not pipe.closed:
            self.sup.loop.add_reader(pipe.fd, self._on_readable, pipe)

    def _close_pipe(self, pipe: _Pipe) -> None:
        if pipe.closed:
            return
        pipe.closed = True
        try:
            self.sup.loop.remove_reader(pipe.fd)
        except (ValueError, OSError):
            pass
        # Drain what is left without blocking, then close.
        while True:
            try:
                chunk = os.read(pipe.fd, READ_SIZE)
            except OSError:
                break
            if not chunk:
                break
            self._ingest(pipe, chunk)
        lines, text = pipe.norm.flush()
        if lines:
            self._lines(lines, text)
        os.close(pipe.fd)
        if pipe in self.pipes:
            self.pipes.remove(pipe)

    def _ingest(self, pipe: _Pipe, chunk: bytes) -> None:
        self.writer.put(chunk)
        lines, text = pipe.norm.feed(chunk)
        if lines:
            self._lines(lines, text)
        elif self.matcher and b"\r" in chunk:
            # A progress bar redrawn with \r and no newline (tqdm): its latest state still counts.
            partial = pipe.norm.partial
            if partial:
                obs = self.matcher.scan(partial)
                if obs and self.progress.observe_all(obs, self.sup.clock()):
                    self._progress_changed()

    def _lines(self, lines: list[str], text: str) -> None:
        now = self.sup.clock()
        self.last_output_at = now
        self.ring.extend(lines)
        if self.matcher:
            obs = self.matcher.scan(text)
            if obs and self.progress.observe_all(obs, now):
                self._progress_changed()
        if self._ready_log is not None and not self._ready_evt.is_set() and self._ready_log.search(text):
            self._ready_evt.set()
        self.sup.lines_added(self)

    def progress_changed(self) -> None:
        """Something in the progress event changed (step, metrics, watches, checkpoint)."""
        self._progress_changed()

    def _progress_changed(self) -> None:
        if not self._progress_dirty:
            self._progress_dirty = True
            self.sup.progress_dirty(self)

    def progress_event(self) -> dict[str, Any]:
        self._progress_dirty = False
        metric = self.cfg.progress.metric if self.cfg.progress else None
        snap = self.progress.snapshot(self.sup.clock(), metric)
        snap["checkpoint"] = self.checkpoint_info
        snap["watch"] = dict(self.watch_info)
        return snap

    # ------------------------------------------------------------------ disk trouble (from the writer thread)

    def _disk_error(self, e: OSError) -> None:
        if self._disk_flagged:
            return
        self._disk_flagged = True
        self.sup.emit("flag", self.name, type="disk_full",
                      message=f"cannot write {self.writer.log.path}: {e.strerror or e}",
                      evidence=[f"{type(e).__name__}: {e}"],
                      action="still supervising and draining output; lines are kept in memory "
                             "(up to 256 MiB) and the rest counted as lost until the disk has room")

    def _disk_recovered(self, lost: int) -> None:
        self._disk_flagged = False
        self.sup.emit("flag_cleared", self.name, type="disk_full",
                      message=f"log writable again; {lost} bytes were lost")

    def tail(self, n: int) -> list[str]:
        return self.ring.tail(n)[1]

    def close(self) -> None:
        for p in list(self.pipes):
            self._close_pipe(p)
        self.writer.close()


def pipe_closed(pipes: list[_Pipe], tree: ProcessTree) -> bool:
    return all(p.closed for p in pipes if p.tree is tree)

