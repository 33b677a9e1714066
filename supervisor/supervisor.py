"""The run: the single authority over every component, the journal and the state.

Everything happens on one asyncio loop: child exits (SIGCHLD), output (add_reader), probes,
timers, commands. Threads (log writers, the GPU sampler) only hand results to the loop.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal as signal_mod
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import state as state_mod
from .component import Component
from .config import Config
from .events import is_lifecycle
from .journal import Journal, write_json_atomic
from .policy import Decision
from .process import (
    ENV_COMPONENT,
    ProcessTree,
    find_marked,
    ppid_map_children,
    set_child_subreaper,
    terminate_processes,
)
from .rundir import RunLock, RunPaths

VERSION = "0.1.0"
TICK_S = 1.0
TREE_REFRESH_S = 5.0
STATE_WRITE_MIN_S = 0.5
GPU_RELEASE_TIMEOUT_S = 30.0
MEMORY_SAMPLE_S = 5.0
DEPENDENCY_STABLE_S = 10.0
DEPENDENCY_FLAG_AFTER_S = 15.0  # a dependency restarting for less than this is not flagged  # up this long before a dependency counts as back
PROGRESS_FLUSH_S = 0.25

Subscriber = Callable[[dict[str, Any]], None]


class Supervisor:
    def __init__(self, cfg: Config, *, clock: Callable[[], float] = time.time, rng: random.Random | None = None,
                 gpu_sampler: Any = None, serve: bool = True):
        self.cfg = cfg
        self.paths = RunPaths(Path(cfg.run_dir))
        self.clock = clock
        self.rng = rng or random.Random()
        self.gpu_sampler = gpu_sampler
        self.serve = serve
        from .redact import Redactor, secret_values

        env = {**os.environ, **cfg.file_env, **cfg.env}
        for comp in cfg.components.values():
            env.update(comp.env)
        # Secrets (values of *KEY*, *TOKEN*, *SECRET*, *PASSWORD* variables) never reach an event.
        self.redactor = Redactor(secret_values(env))
        self.notifier: Any = None
        from .diagnosis import DependencyWatch

        self._dep_watch = DependencyWatch(budget_s=cfg.dependency_budget, clock=self.clock)
        self._dep_flagged: set[str] = set()
        self._mem_detectors: dict[str, Any] = {}
        self.watches: Any = None
        self.gpu_release_timeout = GPU_RELEASE_TIMEOUT_S
        self.memory_sample_s = MEMORY_SAMPLE_S
        self.memory_detector: Callable[[], Any] | None = None  # MemoryGrowthDetector factory (tests tune it)
        self._last_memory_sample = 0.0
        self.server: Any = None  # server.ControlServer while the run is live
        self.components: dict[str, Component] = {}
        self.subscribers: list[Subscriber] = []
        self.line_listeners: list[Callable[[Component], None]] = []
        self.state: dict[str, Any] = {}
        self.exit_code = 0
        self.end_reason = ""
        self.lock = RunLock(self.paths)
        self.journal: Journal | None = None
        self._waiters: dict[int, asyncio.Future[int]] = {}
        self._ended = asyncio.Event()
        self._shutting_down = False
        self._stopped_by_user = False
        self._progress_pending: set[str] = set()
        self._state_dirty = False
        self._state_written_at = 0.0
        self._state_timer: asyncio.TimerHandle | None = None
        self._last_tree_refresh = 0.0
        self._stall_flagged: dict[str, float] = {}
        self._gpu_thread: Any = None
        self._leftovers: dict[str, Any] | None = None
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ lifecycle of the run

    def prepare(self) -> list[str]:
        """Create the run dir, take the lock, end leftovers of a supervisor that died.

        Returns human-readable notes about what was found. Raises rundir.LockHeld if a live
        supervisor owns the run dir.
        """
        self.paths.create()
        self.lock.acquire({"config": self.cfg.source, "name": self.cfg.name, "version": VERSION})
        notes = []
        prev = self.lock.previous
        left = find_marked(str(self.paths.root))
        if left:
            by = f"supervisor pid {prev.get('pid')}" if prev else "an earlier supervisor"
            desc = ", ".join(f"{_env_of(p)} pid {p.pid}" for p in left)
            notes.append(f"found {len(left)} process(es) left by {by} that is gone: {desc}; ending them")
            survivors = terminate_processes(left, signal_mod.SIGTERM, 10.0)
            self._leftovers = {"pids": [p.pid for p in left], "by": by, "survivors": [p.pid for p in survivors],
                               "action": "ended them (SIGTERM, then SIGKILL after 10 s)"}
            if survivors:
                notes.append(f"could not end: {', '.join(str(p.pid) for p in survivors)}")
        else:
            self._leftovers = None
        return notes

    async def run(self) -> int:
        """Supervise until the run ends (or :meth:`request_shutdown`); return the exit code."""
        self.loop = asyncio.get_running_loop()
        set_child_subreaper()
        self.loop.add_signal_handler(signal_mod.SIGCHLD, self._reap)
        self.journal = Journal(self.paths.events)
        names = self.cfg.topo_order()
        self.state = state_mod.initial({}, names)
        for n in names:
            self.components[n] = Component(n, self.cfg.components[n], self)
        if self.cfg.notify is not None and (self.cfg.notify.webhook or self.cfg.notify.command):
            from .notify import Notifier

            self.notifier = Notifier(self.cfg.notify, run_name=self.cfg.name, run_dir=str(self.paths.root),
                                     redactor=self.redactor)
        if self.serve:
            from .server import ControlServer

            self.server = ControlServer(self, self.paths.sock)
            await self.server.start()
        self.emit("run_started", None, name=self.cfg.name, run_dir=str(self.paths.root), config=self.cfg.source,
                  pid=os.getpid(), host=socket.gethostname(), version=VERSION, components=names)
        if self._leftovers:
            self.emit("leftovers", None, **self._leftovers)
        self._start_gpu_sampler()
        from .watches import Watches

        self.watches = Watches(self)
        self.watches.start()
        for c in self.components.values():
            c.task = asyncio.ensure_future(c.main())
            c.task.add_done_callback(self._task_died)
        ticker = asyncio.ensure_future(self._ticker())
        try:
            await self._ended.wait()
            await self._shutdown()
        finally:
            ticker.cancel()
            if self.server is not None:
                # Let clients see run_ended before the socket goes away.
                await asyncio.sleep(0.1)
                await self.server.close()
            self._finish()
        return self.exit_code

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def request_shutdown(self, reason: str, by_user: bool = True) -> None:
        if self._ended.is_set():
            return
        self._stopped_by_user = by_user
        self.end_reason = reason
        self.exit_code = 0 if by_user else self.exit_code
        self._ended.set()

    async def _shutdown(self) -> None:
        """Stop components in reverse dependency order; each wave waits for the previous one."""
        self._shutting_down = True
        remaining = [n for n in reversed(self.cfg.topo_order())]
        while remaining:
            wave = [n for n in remaining
                    if not any(d in remaining for d in self.cfg.dependents(n))]
            for n in wave:
                c = self.components[n]
                if c.state not in state_mod.FINAL:
                    c.request_stop("shutdown")
            for n in wave:
                await self._wait_final(self.components[n])
                remaining.remove(n)
        for c in self.components.values():
            await c._await_cleanups()
        # Last safety net: nothing marked with this run dir may outlive the run.
        left = await self.loop.run_in_executor(None, find_marked, str(self.paths.root))
        if left:
            await self.loop.run_in_executor(None, terminate_processes, left, signal_mod.SIGKILL, 1.0)
        self.emit("run_ended", None, exit_code=self.exit_code, reason=self.end_reason)

    async def _wait_final(self, c: Component) -> None:
        while c.state not in state_mod.FINAL and not (c.state == "pending" and c._want == "stop"):
            await asyncio.sleep(0.02)
        while c.tree is not None or c._cleanups:
            await asyncio.sleep(0.02)

    def _finish(self) -> None:
        if self._gpu_thread is not None:
            self._gpu_thread.stop()
        if self.watches is not None:
            self.watches.stop()
        for c in self.components.values():
            if c.task is not None:
                c.task.cancel()
            c.close()
        self._write_state(force=True)
        if self.notifier is not None:
            self.notifier.close(5.0)
        if self.journal is not None:
            self.journal.close()
        try:
            self.loop.remove_signal_handler(signal_mod.SIGCHLD)
        except (ValueError, RuntimeError):
            pass
        self.lock.release()

    def _task_died(self, t: asyncio.Task[None]) -> None:
        if t.cancelled() or self._ended.is_set():
            return
        exc = t.exception()
        if exc is not None:
            # A bug in rlsup must not leave the children unsupervised silently.
            import traceback

            msg = "".join(traceback.format_exception(exc)).rstrip()
            print(f"rlsup: internal error, shutting the run down:\n{msg}", file=sys.stderr)
            self.exit_code = 1
            self.request_shutdown(f"internal error: {exc!r}", by_user=False)

    # ------------------------------------------------------------------ events

    def emit(self, kind: str, component: str | None, **fields: Any) -> dict[str, Any]:
        e: dict[str, Any] = {"ts": round(self.clock(), 6), "seq": 0, "kind": kind, "component": component}
        e.update(fields)
        lifecycle = is_lifecycle(kind)
        if lifecycle:
            e = self.redactor.redact_obj(e)
        if lifecycle and self.journal is not None:
            self.journal.last_seq += 1
            e["seq"] = self.journal.last_seq
            self.journal.append(e, sync=kind != "command")
        else:
            e["seq"] = self.journal.last_seq if self.journal else 0
        state_mod.apply(self.state, e)
        for s in list(self.subscribers):
            try:
                s(e)
            except Exception as exc:  # a broken client must not break supervision
                print(f"rlsup: subscriber failed: {exc!r}", file=sys.stderr)
        if lifecycle:
            self._mark_state_dirty()
            if self.notifier is not None:
                self.notifier.handle(e)
        return e

    def threadsafe(self, fn: Callable[..., Any], *args: Any) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn, *args)

    # ------------------------------------------------------------------ children

    def watch_exit(self, pid: int | None) -> asyncio.Future[int]:
        fut: asyncio.Future[int] = self.loop.create_future()
        if pid is not None:
            self._waiters[pid] = fut
            self._reap()  # it may have exited already
        return fut

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            fut = self._waiters.pop(pid, None)
            if fut is not None and not fut.done():
                fut.set_result(status)
            # else: an orphan re-parented to us (we are its subreaper); reaping it is all we owe it

    def refresh_tree(self, name: str, tree: ProcessTree) -> None:
        tree.refresh()
        self._adopt_orphans({name: tree})

    def _adopt_orphans(self, trees: dict[str, ProcessTree]) -> None:
        """Orphans re-parented to us carry the marker of the component they came from."""
        import psutil

        roots = {c.tree.pid for c in self.components.values() if c.tree is not None}
        try:
            kids = psutil.Process().children()
        except psutil.Error:
            return
        for p in kids:
            if p.pid in roots:
                continue
            try:
                comp = p.environ().get(ENV_COMPONENT)
            except (psutil.Error, OSError):
                continue
            if comp in trees:
                trees[comp].adopt([p])
                trees[comp].refresh()

    def diagnose(self, c: Component, tree: ProcessTree, status: int) -> dict[str, Any]:
        from .diagnosis import diagnose, read_host_evidence

        host = read_host_evidence(tree.pid) if tree.exit_signal == "SIGKILL" else None
        d = diagnose(c.tail(1000), exit_code=tree.exit_code, signal=tree.exit_signal, step=c.progress.step,
                     pid=tree.pid, host=host)
        return d.to_dict()

    def after_exit(self, c: Component, d: Decision, diag: dict[str, Any]) -> Decision:
        """The policy's decision, possibly overridden by crash patterns (repeated error, step crash)."""
        from .diagnosis import AttemptRecord, Diagnosis, detect_attempt_patterns

        tree_exit = c.last_exit_info
        now = self.clock()
        resumed = (self.state["components"][c.name].get("resume") or {}).get("step")
        c.history.append(AttemptRecord(
            attempt=c.attempt, started_at=c.started_at or now, ended_at=now, ready=c.ready_at is not None,
            exit_code=tree_exit[0], signal=tree_exit[1], step=c.progress.step, resumed_step=resumed,
            diagnosis=Diagnosis.from_dict(diag)))
        del c.history[:-20]
        flags = detect_attempt_patterns(c.history, total=c.progress.total)
        fatal = None
        for f in flags:
            action = ("stopped automatic restarts (state fatal); fix the cause, then `rlsup start " + c.name + "`"
                      if f.fatal and d.action == "restart" else
                      ("restarting with backoff" if d.action == "restart" else d.action))
            self.emit("flag", c.name, type=f.type, message=f.message, evidence=list(f.evidence), action=action)
            if f.fatal and fatal is None:
                fatal = f
        if fatal is not None and d.action == "restart":
            return Decision("fatal", reason=f"{fatal.type}: {fatal.message}")
        return d

    def resume_for(self, c: Component) -> dict[str, Any] | None:
        """Where the next attempt resumes: the latest complete checkpoint, or None (a plain start)."""
        r = c.cfg.resume
        if r is None:
            return None
        from .checkpoints import discover, resume_args

        found = discover(r.checkpoints, r.layout, step_pattern=r.step_pattern)
        for problem in found.problems:
            self.emit("flag", c.name, type="checkpoint_problem", message=problem, evidence=[r.checkpoints],
                      action="not trusted; resuming from the newest checkpoint that is complete")
        ck = found.latest
        want, c.resume_step = c.resume_step, None
        if want is not None:
            ck = next((x for x in found.checkpoints if x.step == want), None)
            if ck is None:
                steps = ", ".join(str(x.step) for x in found.checkpoints) or "none"
                self.emit("flag", c.name, type="checkpoint_problem", message=f"no complete checkpoint at step {want}",
                          evidence=[f"complete checkpoints in {r.checkpoints}: {steps}"],
                          action="started from the latest complete checkpoint instead")
                ck = found.latest
        if ck is None:
            return None
        if r.clean:
            self._clean_future(c, ck.step)
        return {"step": ck.step, "checkpoint": ck.path, "args": resume_args(r.args, ck)}

    def _clean_future(self, c: Component, step: int) -> None:
        """``resume.clean``: delete artefacts of steps after the one resumed from, each path journaled."""
        from .artifacts import CleanRefused, clean_after

        r = c.cfg.resume
        assert r is not None
        base = Path(c.cfg.cwd or os.getcwd())
        roots = [self.paths.root, base, Path(r.checkpoints)] + [Path(w.path) for w in c.cfg.watch]
        try:
            deleted = clean_after(r.clean, step, base=base, allowed_roots=[p.absolute() for p in roots])
        except CleanRefused as e:
            self.emit("flag", c.name, type="clean_refused",
                      message=f"resume.clean refused {len(e.refused)} path(s) outside the run's directories",
                      evidence=[f"{p}: {why}" for p, why in e.refused][:20],
                      action="deleted nothing that was refused; resuming anyway")
            deleted = list(e.deleted)
        except OSError as e:
            self.emit("flag", c.name, type="clean_refused", message=f"resume.clean failed: {e}", evidence=[],
                      action="resuming anyway")
            return
        if deleted:
            self.emit("cleaned", c.name, step=step, paths=[str(p) for p in deleted])

    # ------------------------------------------------------------------ dependencies and run end

    def deps_status(self, c: Component) -> tuple[bool, list[str], str | None]:
        waiting = []
        for dep, cond in c.cfg.depends_on.items():
            d = self.components[dep]
            st = d.state
            if st == "fatal" and cond != "started" or (st == "fatal" and d.attempt == 0):
                return False, [], f"dependency {dep} is fatal; {c.name} never started"
            if cond == "completed":
                ok = st == "completed"
            elif cond == "ready":
                ok = st == "running"
            else:
                ok = st in ("starting", "running")
            if not ok:
                waiting.append(f"{dep} ({cond}; now {st})")
        return not waiting, waiting, None

    def follow_restart(self, c: Component) -> None:
        """Restart the components that asked (``restart_with``) to follow ``c``'s restarts."""
        for other in self.components.values():
            if c.name in other.cfg.restart_with and other.state in ("starting", "running"):
                other.request_restart(f"restart_with {c.name}")

    def component_changed(self, c: Component) -> None:
        for other in self.components.values():
            if other is not c:
                other.poke()
        self._check_end()

    def _check_end(self) -> None:
        if self._shutting_down or self._ended.is_set():
            return
        for n, c in self.components.items():
            if c.cfg.exit_on_end and c.state in ("completed", "fatal"):
                self.exit_code = 0 if c.state == "completed" else 1
                self.end_reason = f"{n} {c.state} (exit_on_end)"
                self._ended.set()
                return
        states = [c.state for c in self.components.values()]
        if any(s in state_mod.ACTIVE for s in states):
            return
        if all(s == "stopped" for s in states):
            return  # everything stopped by hand: stay, a start command may follow
        fatal = [n for n, c in self.components.items() if c.state == "fatal"]
        self.exit_code = 1 if fatal else 0
        self.end_reason = f"{', '.join(fatal)} fatal" if fatal else "every component completed"
        self._ended.set()

    # ------------------------------------------------------------------ output, progress, state

    def lines_added(self, c: Component) -> None:
        for fn in self.line_listeners:
            fn(c)

    def progress_dirty(self, c: Component) -> None:
        if not self._progress_pending:
            self.loop.call_later(PROGRESS_FLUSH_S, self._flush_progress)
        self._progress_pending.add(c.name)

    def _flush_progress(self) -> None:
        names, self._progress_pending = self._progress_pending, set()
        for n in names:
            c = self.components[n]
            self.emit("progress", n, **c.progress_event())
        self._mark_state_dirty()

    def _mark_state_dirty(self) -> None:
        self._state_dirty = True
        if self._state_timer is None:
            delay = max(0.0, STATE_WRITE_MIN_S - (time.monotonic() - self._state_written_at))
            self._state_timer = self.loop.call_later(delay, self._write_state)

    def _write_state(self, force: bool = False) -> None:
        self._state_timer = None
        if not self._state_dirty and not force:
            return
        self._state_dirty = False
        self._state_written_at = time.monotonic()
        try:
            write_json_atomic(self.paths.state, self.snapshot_state())
        except OSError:
            pass  # disk trouble is flagged by the log writers; state.json catches up later

    def snapshot_state(self) -> dict[str, Any]:
        return state_mod.view(self.state, self.clock())

    # ------------------------------------------------------------------ periodic work

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            now = self.clock()
            self._reap()  # safety net for a coalesced or missed SIGCHLD
            if time.monotonic() - self._last_tree_refresh >= TREE_REFRESH_S:
                self._last_tree_refresh = time.monotonic()
                live = {n: c.tree for n, c in self.components.items() if c.tree is not None and not c.tree.exited}
                if live:
                    children = ppid_map_children()
                    for t in live.values():
                        t.refresh(children)
            if time.monotonic() - self._last_memory_sample >= self.memory_sample_s:
                self._last_memory_sample = time.monotonic()
                self._sample_memory(now)
            self._check_stalls(now)
            self._check_dependencies(now)

    def _check_stalls(self, now: float) -> None:
        for n, c in self.components.items():
            p = c.cfg.progress
            if not p or not p.stall_after or c.state != "running":
                self._stall_flagged.pop(n, None)
                continue
            since = max(x for x in (c.progress.last_change_at, c.ready_at, c.started_at) if x is not None)
            if now - since < p.stall_after:
                if n in self._stall_flagged:
                    del self._stall_flagged[n]
                    self.emit("flag_cleared", n, type="stall", message=f"progress again at step {c.progress.step}")
                continue
            if self._stall_flagged.get(n) == since:
                continue
            self._stall_flagged[n] = since
            last = c.tail(1)
            deps = [f"{d} is {self.components[d].state}" for d in c.cfg.depends_on]
            msg = (f"no new step for {now - since:.0f}s (last step {c.progress.step}, stall_after "
                   f"{p.stall_after:g}s)")
            evidence = [f"last line: {last[0]}" if last else "no output yet"] + deps
            for owner in [c] + [self.components[d] for d in c.cfg.depends_on]:
                for path, w in owner.watch_info.items():
                    age = f", written {now - w['mtime']:.0f}s ago" if w.get("mtime") else ""
                    evidence.append(f"newest in {path} ({owner.name}): step {w.get('step')}{age}")
            restart = p.on_stall == "restart"
            self.emit("flag", n, type="stall", message=msg, evidence=evidence,
                      action=f"restarting {n} (progress.on_stall: restart)" if restart
                      else "none (watching); `progress.on_stall: restart` restarts a stalled component")
            if restart:
                c.request_restart("stall")

    def _check_dependencies(self, now: float) -> None:
        """dependency_down: consumers failing to reach a dependency that is down. Restart the
        dependency (not its victims); stop the consumers if it stays down past the budget."""
        from .diagnosis import dependency_down

        failing_deps: dict[str, list[str]] = {}
        for n, c in self.components.items():
            if not c.cfg.depends_on or c.state not in ("starting", "running", "backoff", "pending"):
                continue
            deps = {d: self._dep_state(d, now) for d in c.cfg.depends_on}
            if all(st == "running" for st in deps.values()):
                if n in self._dep_flagged:
                    self._dep_flagged.discard(n)
                    self.emit("flag_cleared", n, type="dependency_down", message="its dependencies are up again")
                continue
            last = (self.state["components"][n].get("last_exit") or {}).get("diagnosis") or {}
            flag = dependency_down(n, categories=[last.get("category", "")], lines=c.tail(200), deps=deps,
                                   down_since=self._dep_watch.down_since(), now=now)
            if flag is None:
                continue
            for d in flag.dependencies:
                failing_deps.setdefault(d, []).append(n)
            # A dependency in the middle of an ordinary restart is not news; one that stays down, or
            # will not come back by itself, is.
            lasting = [d for d in flag.dependencies
                       if self.components[d].state in ("fatal", "stopped", "completed")
                       or (self._dep_watch.down_for(d) or 0.0) >= DEPENDENCY_FLAG_AFTER_S]
            if lasting and n not in self._dep_flagged:
                self._dep_flagged.add(n)
                self.emit("flag", n, type="dependency_down", message=flag.message, evidence=list(flag.evidence),
                          action=self._dependency_action(n, lasting[0]))
        tracked = set(self._dep_watch.down_since()) | set(failing_deps)
        for d in tracked:
            dep = self.components[d]
            act = self._dep_watch.observe(d, down=self._dep_state(d, now) != "running",
                                          consumers_failing=d in failing_deps)
            if act == "restart_dependency":
                deterministic = dep.state == "fatal" and self._deterministic_failure(d)
                if dep.state in ("fatal", "completed") and not deterministic:
                    self.emit("command", d, command="start", by="rlsup", client="dependency_down")
                    dep.request_start()
                # stopped by a user: their call; backoff/starting/pending: it is on its way back
            elif act == "stop_consumers":
                victims = [n for n in failing_deps.get(d, []) if self.components[n].state in state_mod.ACTIVE]
                self.emit("flag", d, type="dependency_down",
                          message=f"{d} has been down for {self.cfg.dependency_budget:g}s; stopping {', '.join(victims) or 'nothing'}"
                                  " instead of letting them retry for hours",
                          evidence=[f"{d}: {dep.state}"], action=f"stopped {', '.join(victims) or 'nothing'}; "
                                                                 f"`rlsup start` them once {d} is back")
                for n in victims:
                    self.components[n].request_stop("dependency_down")

    def _dependency_action(self, consumer: str, dep: str) -> str:
        """What rlsup does about ``consumer``'s dead dependency, in words, for the flag."""
        d = self.components[dep]
        budget = f"{consumer} is stopped if {dep} is not back within {self.cfg.dependency_budget:g}s"
        if d.state == "fatal" and self._deterministic_failure(dep):
            return f"not restarting {dep} (it fails deterministically; fix it, then `rlsup start {dep}`); {budget}"
        if d.state in ("fatal", "completed"):
            return f"restarting {dep}, not {consumer}; {budget}"
        if d.state == "stopped":
            return f"{dep} was stopped by hand, so it is left stopped; {budget}"
        return f"{dep} is restarting ({d.state}); {consumer} is left alone; {budget}"

    def _deterministic_failure(self, name: str) -> bool:
        reason = str(self.state["components"][name].get("reason") or "")
        return reason.startswith(("repeated_error", "crash_loop", "step_crash"))

    def _dep_state(self, name: str, now: float) -> str:
        """A dependency's state for dependency_down: ``running`` only once it has stayed up a while,
        so a server that dies seconds after each start is still down (no restart flapping)."""
        d = self.components[name]
        if d.state == "running" and d.ready_at is not None and now - d.ready_at < DEPENDENCY_STABLE_S:
            return "starting"
        return d.state

    def _owners(self) -> dict[int, str]:
        return {pid: n for n, c in self.components.items() if c.tree is not None for pid in c.tree.members}

    def gpu_holders(self, c: Component, prev_pids: set[int], gpus: list[dict[str, Any]]
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Processes on ``c``'s GPUs in a sample: (this run's leftovers, processes outside the run)."""
        import psutil

        ours, others = [], []
        wanted = {int(g) for g in c.cfg.gpus}
        owners = self._owners()
        for g in gpus:
            if g.get("index") not in wanted:
                continue
            for p in g.get("processes") or []:
                pid = p["pid"]
                if pid in owners and pid not in prev_pids:
                    continue  # a live process of this run's current attempts
                try:
                    proc = psutil.Process(pid)
                    mine = pid in prev_pids or proc.environ().get("RLSUP_RUN_DIR") == str(self.paths.root)
                except psutil.NoSuchProcess:
                    mine = True  # gone, its memory not yet released by the driver: wait for it
                except (psutil.Error, OSError):
                    mine = pid in prev_pids
                (ours if mine else others).append({"gpu": g.get("index"), **p})
        return ours, others

    async def wait_gpu_release(self, c: Component, prev_pids: set[int]) -> None:
        """Before a new attempt: wait until the previous attempt's GPU memory is released; after a
        timeout, kill the holders that belong to this run (never others) and flag it."""
        if not c.cfg.gpus or self.gpu_sampler is None:
            return
        deadline = self.clock() + self.gpu_release_timeout
        while True:
            try:  # a fresh sample, not the last 1 Hz one: the previous attempt just ended
                sample = await self.loop.run_in_executor(None, self.gpu_sampler.sample)
            except Exception:
                return  # the sampler's failures are reported by its thread
            ours, _others = self.gpu_holders(c, prev_pids, sample.to_dict().get("gpus") or [])
            if not ours or c._want == "stop":
                return
            if self.clock() >= deadline:
                break
            await asyncio.sleep(0.5)
        import psutil

        procs = []
        for h in ours:
            try:
                procs.append(psutil.Process(h["pid"]))
            except psutil.Error:
                pass
        survivors = await self.loop.run_in_executor(None, terminate_processes, procs, signal_mod.SIGKILL, 5.0)
        evidence = [f"gpu {h['gpu']}: pid {h['pid']} holds {h.get('used_mb') or '?'} MiB" for h in ours]
        self.emit("flag", c.name, type="gpu_not_released",
                  message=f"{len(ours)} process(es) of this run still held {c.name}'s GPUs "
                          f"{self.gpu_release_timeout:g}s after the previous attempt ended",
                  evidence=evidence + [f"could not kill pid {p.pid}" for p in survivors],
                  action="killed them (SIGKILL) before starting the next attempt" if not survivors
                  else "killed what could be killed; starting anyway")

    def _sample_memory(self, now: float) -> None:
        """memory_growth: steady growth of a component's host RSS over steps."""
        import psutil

        from .diagnosis import MemoryGrowthDetector

        for n, c in self.components.items():
            if c.tree is None or c.state != "running" or c.progress.step is None:
                continue
            rss = 0
            for pid in list(c.tree.members):
                try:
                    rss += psutil.Process(pid).memory_info().rss
                except psutil.Error:
                    pass
            attempt, det = self._mem_detectors.get(n, (None, None))
            if det is None or attempt != c.attempt:  # a new attempt starts a new series
                det = (self.memory_detector or MemoryGrowthDetector)()
                self._mem_detectors[n] = (c.attempt, det)
            gpu_mb = sum(p.get("used_mb") or 0.0 for g in self.state.get("gpus") or []
                         for p in g.get("processes") or [] if p.get("component") == n) or None
            flag = det.observe(now, c.progress.step, rss / 2**20, gpu_mb)
            if flag is not None:
                self.emit("flag", n, type=flag.type, message=flag.message, evidence=list(flag.evidence),
                          action="none (watching); a leak ends in an OOM kill, so look at what accumulates per step")

    def _start_gpu_sampler(self) -> None:
        if self.gpu_sampler is None:
            return
        from .gpu import SamplerThread

        def post(sample: Any) -> None:
            self.threadsafe(self._gpu_sample, sample)

        self._gpu_thread = SamplerThread(self.gpu_sampler, post, interval=1.0)
        self._gpu_thread.start()

    def _gpu_sample(self, sample: Any) -> None:
        d = sample.to_dict()
        owners = self._owners()
        for g in d.get("gpus") or []:
            for p in g.get("processes") or []:
                p["component"] = owners.get(p["pid"])
        self.emit("gpu", None, **{k: d.get(k) for k in ("gpus", "host", "backend", "reason")})

    # ------------------------------------------------------------------ commands

    def command(self, cmd: str, name: str | None = None, by: str = "user", client: str | None = None,
                **args: Any) -> dict[str, Any]:
        """Act on a command from a client; the answer says what was done or why not."""
        if cmd == "stop_all":
            self.emit("command", None, command=cmd, by=by, client=client)
            self.request_shutdown(f"stopped by {by}" + (f" ({client})" if client else ""))
            return {"ok": True, "message": "stopping every component in reverse dependency order"}
        if name not in self.components:
            return {"ok": False, "error": f"no component {name!r}; components: {', '.join(self.components)}"}
        c = self.components[name]
        self.emit("command", name, command=cmd, by=by, client=client, **args)
        if cmd == "stop":
            if c.state in state_mod.FINAL:
                return {"ok": False, "error": f"{name} is already {c.state}"}
            c.request_stop(by)
            return {"ok": True, "message": f"stopping {name}"}
        if cmd == "start":
            if c.state not in state_mod.FINAL:
                return {"ok": False, "error": f"{name} is {c.state}, not stopped"}
            c.request_start()
            return {"ok": True, "message": f"starting {name}"}
        if cmd == "restart":
            c.request_restart(by)
            return {"ok": True, "message": f"restarting {name}"}
        if cmd == "resume":
            if c.cfg.resume is None:
                return {"ok": False, "error": f"{name} has no `resume` section in the config"}
            step = args.get("step")
            from .checkpoints import discover

            r = c.cfg.resume
            found = discover(r.checkpoints, r.layout, step_pattern=r.step_pattern)
            if step is not None:
                ck = next((x for x in found.checkpoints if x.step == int(step)), None)
                if ck is None:
                    steps = ", ".join(str(x.step) for x in found.checkpoints) or "none"
                    return {"ok": False, "error": f"no complete checkpoint at step {step} in {r.checkpoints} "
                                                  f"(complete: {steps})"}
            else:
                ck = found.latest
                if ck is None:
                    return {"ok": False, "error": f"no complete checkpoint yet in {r.checkpoints}"}
            c.resume_step = ck.step
            c.request_restart(by)
            return {"ok": True, "message": f"restarting {name} from step {ck.step} ({ck.path})"}
        if cmd == "signal":
            sig = str(args.get("signal", "SIGTERM")).upper()
            signum = getattr(signal_mod, sig if sig.startswith("SIG") else "SIG" + sig, None)
            if not isinstance(signum, int) or c.tree is None:
                return {"ok": False, "error": f"cannot signal {name} ({'unknown signal' if c.tree else 'not running'})"}
            c.tree.send(signum)
            return {"ok": True, "message": f"sent {sig} to {name}'s process tree"}
        return {"ok": False, "error": f"unknown command {cmd!r}"}


def _env_of(p: Any) -> str:
    try:
        return str(p.environ().get(ENV_COMPONENT, "?"))
    except Exception:
        return "?"

