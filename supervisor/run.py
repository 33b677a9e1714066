"""The run: the single authority over its components, the journal and the state.

Everything happens on one asyncio loop: monitor records and log files changing (inotify), monitors
exiting (pidfds), probes, timers, client commands. Threads (the GPU sampler, artefact watches,
notifications) only hand results to the loop. What a component does next is decided by
:mod:`~rlsup.supervisor.lifecycle`; what the run as a whole observes (dependencies, stalls, a dead
dependency, the end and its root cause) by :mod:`~rlsup.supervisor.detectors` and
:mod:`~rlsup.supervisor.diagnosis`; this module feeds them and carries out their answers.

Components run under monitors that outlive the supervisor: a supervisor that crashed, was killed
or is being upgraded leaves them running, and the next one on the same run dir *adopts* them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal as signal_mod
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from . import detectors, shim
from . import events as ev
from . import lifecycle as lc
from . import state as state_mod
from .clock import Clock, SystemClock
from .component import Component
from .config import Config
from .daemonlog import say
from .inotify import IN_CLOSE_WRITE, IN_CREATE, IN_MODIFY, IN_MOVED_TO, IN_Q_OVERFLOW, Inotify
from .journal import Journal, StateFile, keep_spare_records, read_events
from .logs import Position, RingBudget
from .process import (
    Attempt,
    Cgroups,
    Monitors,
    attempt_from_record,
    children_map,
    find_marked,
    is_monitor_of,
    pid_alive,
    records,
    set_child_subreaper,
    started_since_boot,
    terminate_processes,
)
from .rundir import RunLock, RunPaths
from .shim import PROTOCOL as MONITOR_PROTOCOL
from .slurm.launcher import slurm_job_info
from .version import VERSION

TICK_S = 1.0
PAUSE_DETECT_S = 5.0  # a tick this late means the supervisor itself was paused (SIGSTOP, swap)
IO_THREADS = 2  # the loop's pool for blocking work
IDLE_TICK_MAX_S = 30.0  # the longest an idle run goes without a tick (the reap safety net)
STATE_WRITE_MIN_S = 0.5
POSITIONS_WRITE_S = 5.0
PROGRESS_FLUSH_S = 0.25
# After a productive read, let output pile up before the next: with many chatty components one
# wakeup then serves them all (fewer, larger reads). The monitors drain the pipes meanwhile, so this
# delays only what clients see, by less than the TUI's 20 Hz redraw; exits are read at once.
READ_PAUSE_S = 0.015
GPU_RELEASE_TIMEOUT_S = 30.0
GPU_SAMPLE_S = 1.0
GPU_SAMPLE_IDLE_S = 10.0
RESOURCES_SAMPLE_S = 5.0
DEPENDENCY_STABLE_S = 10.0  # up this long before a dependency counts as back
DEPENDENCY_FLAG_AFTER_S = 15.0  # a dependency restarting for less than this is not flagged
POLL_S = 0.5  # where inotify is unavailable
EVALUATE_EVERY_S = 0.05  # at most this often, the run re-judges every component (dependencies, the end)

Subscriber = Callable[[dict[str, Any]], None]


class IncompatibleMonitors(Exception):
    """Live monitors of a protocol this rlsup does not speak: never touched, the start refused."""


class Run:
    def __init__(self, cfg: Config, *, clock: Clock | None = None, gpu_sampler: Any = None, serve: bool = True):
        self.cfg = cfg
        self.paths = RunPaths(Path(cfg.run_dir))
        self._state_file = StateFile(self.paths.state)
        self._spares_wanted = 2
        self.clock: Clock = clock or SystemClock()
        self.gpu_sampler = gpu_sampler
        self.serve = serve
        from .redact import Redactor

        # Secrets never reach an event, a client or a notification: by name and by value, from every
        # environment the components get and from their command lines.
        self.redactor = Redactor.for_run([os.environ, cfg.file_env, cfg.env, *(c.env for c in cfg.components.values())],
                                         [c.argv() for c in cfg.components.values()])
        self.monitors = Monitors(self.paths.root)
        self.cgroups: Cgroups | None = None
        self.components: dict[str, Component] = {}
        self.subscribers: list[Subscriber] = []
        self.line_listeners: list[Callable[[Component], None]] = []
        self.state: dict[str, Any] = {}
        self.exit_code = 0
        self.end_reason = ""
        self.refused = ""  # a check before any start failed (a node blind to the run dir): journal it, start nothing
        self.root: dict[str, Any] | None = None
        self.lock = RunLock(self.paths)
        self.journal: Journal | None = None
        self.notifier: Any = None
        self.server: Any = None
        self.watches: Any = None
        self.gpu_release_timeout = GPU_RELEASE_TIMEOUT_S
        self.resources_sample_s = RESOURCES_SAMPLE_S
        self.memory_detector: Callable[[], Any] | None = None  # MemoryGrowthDetector factory (tests tune it)
        self.gpu_proc_lookup: Callable[[int], Any] | None = None  # gpu.proc_identity unless a test fakes NVML
        self.how = "new"
        self.nofile: int | None = None  # the open-file limit components get (the supervisor raises its own)
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._ended: asyncio.Event | None = None
        self._shutting_down = False
        self._replayed: dict[str, Any] | None = None
        self._saved: dict[str, Any] = {}
        self._adopt: list[tuple[Path, dict[str, Any]]] = []
        self._orphan_records: list[tuple[Path, dict[str, Any]]] = []
        self._leftovers: dict[str, Any] | None = None
        self._by_pidfd: dict[int, tuple[Component, Attempt]] = {}
        self._by_record: dict[str, tuple[Component, Attempt]] = {}
        self._eval_scheduled = False
        self._evaluated_at = -1e9
        self._evaluate_cost = 0.0
        self._order: list[str] | None = None
        self._final_at: dict[str, float] = {}
        self._progress_pending: set[str] = set()
        self._state_dirty = False
        self._state_written_at = 0.0
        self._state_write_cost = 0.0
        self._state_timer: asyncio.TimerHandle | None = None
        self._read_pending: set[str] = set()
        self._read_paused = False
        self._inotify: Inotify | None = None
        self._gpu_thread: Any = None
        self._last_tick = 0.0
        self._nap_future: asyncio.Future[bool] | None = None
        self._nap_until = 0.0  # when the ticker plans to wake (the run's clock)
        self._began = 0.0  # when run() began, in seconds since boot
        self._awake_since = 0.0
        self._last_resources = 0.0
        self._positions_written = 0.0
        from .resources import ResourceWatch

        self._resources = ResourceWatch()
        from .diagnosis import DependencyWatch

        self._dep_watch = DependencyWatch(budget_s=cfg.dependency_budget, clock=self.clock.monotonic)
        self._dep_flagged: set[str] = set()
        self._triggers: list[dict[str, Any]] = []  # journaled events other components react to
        self._run_seq: int | None = None  # the seq of this run's run_started (the cause of first starts)
        self._again: dict[str, int] = {}  # completed components a resumed run starts again: name -> attempts then

    # ------------------------------------------------------------------ before the loop

    def prepare(self) -> list[str]:
        """Create the run dir, take the lock, find what a previous supervisor left.

        Live monitors of a compatible protocol are kept for adoption; processes of the run that no
        live monitor owns are ended. Returns notes for the user. Raises ``rundir.LockHeld`` (a live
        supervisor owns the run dir), ``rundir.UnsafeRunDir`` and :class:`IncompatibleMonitors`.
        """
        self.paths.create()
        self.lock.acquire({"config": self.cfg.source, "name": self.cfg.name, "version": VERSION})
        notes: list[str] = []
        live: list[tuple[Path, dict[str, Any]]] = []
        foreign: list[tuple[Path, dict[str, Any]]] = []
        for path, rec in records(self.paths.monitors):
            if is_monitor_of(rec, self.paths.root):
                (live if rec.get("protocol") == MONITOR_PROTOCOL else foreign).append((path, rec))
            else:
                self._orphan_records.append((path, rec))
        if foreign:
            self.lock.release()
            desc = ", ".join(f"{r['component']} (monitor pid {r['shim_pid']}, protocol {r.get('protocol')})"
                             for _, r in foreign)
            raise IncompatibleMonitors(
                f"{self.paths.root} has live components under monitors of another rlsup version ({desc}); this "
                f"rlsup speaks monitor protocol {MONITOR_PROTOCOL}. They were left running. Manage the run with "
                "the rlsup version that started it, or stop it with that version's `rlsup down`.")
        self._adopt = live
        owned: set[int] = set()
        children = children_map(max_age=0.0)  # fresh: what is not owned now is ended below
        for path, rec in live:
            att = attempt_from_record(rec, path)
            owned.update(att.members(children))
            owned.add(att.monitor_pid)
        prev = self.lock.previous
        left = [p for p in find_marked(str(self.paths.root)) if p.pid not in owned]
        if live:
            notes.append(f"taking over {len(live)} running component(s) from a supervisor that is gone: "
                         + ", ".join(f"{r['component']} pid {r['pid']}" for _, r in live))
        if left:
            by = f"supervisor pid {prev.get('pid')}" if prev else "an earlier supervisor"
            notes.append(f"found {len(left)} process(es) of this run that no monitor owns, left by {by}; ending them")
            survivors = terminate_processes(left, signal_mod.SIGTERM, 10.0)
            self._leftovers = {"pids": [p.pid for p in left], "by": by, "survivors": [p.pid for p in survivors],
                               "action": "ended them (SIGTERM, then SIGKILL after 10 s)"}
            if survivors:
                notes.append(f"could not end: {', '.join(str(p.pid) for p in survivors)}")
        self._replayed = self._replay()
        return notes

    def _replay(self) -> dict[str, Any] | None:
        """The previous state of this run dir: the journal folded through the reducer, with the
        gauges (progress, log positions) of the last ``state.json``."""
        if not self.paths.events.exists():
            return None
        st = state_mod.initial({}, self.cfg.topo_order())
        n = 0
        for e in read_events(self.paths.events):
            state_mod.apply(st, e)
            n += 1
        if not n:
            return None
        try:
            import json

            saved = json.loads(self.paths.state.read_text())
        except (OSError, ValueError):
            saved = {}
        self._saved = saved if isinstance(saved, dict) else {}
        return st

    # ------------------------------------------------------------------ the loop

    async def run(self) -> int:
        """Supervise until the run ends (or :meth:`request_shutdown`); return the exit code."""
        self.loop = asyncio.get_running_loop()
        self._began = time.clock_gettime(time.CLOCK_BOOTTIME)  # the clock of /proc/PID/stat's start time
        # Blocking work (a walk of /proc for a stopped component's leftovers, a GPU sample before a
        # restart) goes to a pool of fixed size: the supervisor's threads do not grow with its
        # components (asyncio's own default grows to min(32, cores + 4) in a burst of stops).
        self.loop.set_default_executor(ThreadPoolExecutor(IO_THREADS, thread_name_prefix="rlsup-io"))
        self._ended = asyncio.Event()
        set_child_subreaper()
        self.nofile = raise_fd_limit()
        self.loop.add_signal_handler(signal_mod.SIGCHLD, self._reap)
        self.journal = Journal(self.paths.events)
        names = self.cfg.topo_order()
        self._spares_wanted = 2 * len(names) + 2  # every component's next record, twice, on a full disk
        keep_spare_records(self.paths.monitors, self._spares_wanted)
        self.state = self._replayed or state_mod.initial({}, names)
        for n in names:
            self.state["components"].setdefault(n, state_mod.new_component())
        self.cgroups = await self.loop.run_in_executor(None, Cgroups.for_run, self.paths.root)
        budget = RingBudget(self.cfg.ring_bytes)
        saved = (self._saved.get("components") or {}) if self._saved else {}
        if self._adopt:
            self.how = "adopted"
        elif self._replayed is not None and self.how == "new":
            self.how = "continued"  # its supervisor died mid-way: the run goes on where it was
        # What a component that was final stays: a run taken over or continued keeps every final state;
        # a finished run resumed (--resume) starts again what had failed or was stopped, not what completed.
        keep = {"adopted": lc.FINAL, "continued": lc.FINAL, "resumed": {"completed"}}.get(self.how, set())
        for n in names:
            prev = self.state["components"][n]
            pos = Position.from_dict((saved.get(n) or {}).get("log"))
            was = prev.get("state")
            life = lc.Life(n, attempt=int(prev.get("attempt") or 0))
            if was == "completed" and self.how == "resumed" and prev.get("config_hash") not in (
                    None, self.cfg.components[n].fingerprint(self.cfg.env)):
                was = None  # it completed what the config asked then; the config asks more of it now
                self._again[n] = int(prev.get("attempt") or 0)  # its next start says so (until it has started)
            if was in keep:
                life = lc.Life(n, state=was, attempt=life.attempt, want="stop" if was == "stopped" else "run")
            if any(f.get("type") == "stall" for f in prev.get("flags") or []) and self.how in ("adopted", "continued"):
                life = dataclasses.replace(life, episode=life.episode | {"stall"})  # the attempt goes on: so does its stall
            self.components[n] = Component(n, self.cfg.components[n], self, budget=budget, life=life,
                                           log_position=pos)
            sv = saved.get(n) or {}
            c = self.components[n]
            if sv.get("total") is not None and c.progress.total is None:
                c.progress.total = int(sv["total"])
            if sv.get("step") is not None:  # an adopted attempt's progress continues from here
                c.progress.reset_to(int(sv["step"]), self.clock.monotonic())
            if isinstance(sv.get("history"), dict) and sv["history"]:  # the charts go on with the whole run
                c.progress.seed_history(sv["history"])
                self.state["components"][n]["history"] = {k: h.wire() for k, h in c.progress.full_history.items()}
            if isinstance(sv.get("metrics"), dict) and sv["metrics"]:  # ... and with the latest values
                c.progress.metrics.update({k: v for k, v in sv["metrics"].items() if isinstance(v, int | float)})
                self.state["components"][n]["metrics"] = dict(c.progress.metrics)
                self.state["components"][n]["metric"] = sv.get("metric")
        if self.cfg.notify is not None and (self.cfg.notify.webhook or self.cfg.notify.command):
            from .notify import Notifier

            self.notifier = Notifier(self.cfg.notify, run_name=self.cfg.name, run_dir=str(self.paths.root),
                                     redactor=self.redactor)
        if self.serve and not self.refused:
            from .server import ControlServer

            self.server = ControlServer(self, self.paths.sock)
            await self.server.start()
        self._run_seq = self.emit(ev.RunStarted(None, name=self.cfg.name, run_dir=str(self.paths.root), config=self.cfg.source,
                                pid=os.getpid(), host=socket.gethostname(), version=VERSION, components=names,
                                how=self.how, tracking=self.cgroups.describe(), slurm=slurm_job_info(self.cfg))).get("seq")
        if self.refused:
            self.exit_code, self.end_reason = 1, self.refused
            self.emit(ev.RunEnded(None, exit_code=1, reason=self.refused))
            self._finish()
            return self.exit_code
        if self._leftovers:
            self.emit(ev.LeftoversEnded(None, **self._leftovers))
        self._start_watching_files()
        self._start_gpu_sampler()
        from .watches import Watches

        self.watches = Watches(self.components, self.loop)
        self.watches.start()
        self._take_over()
        self._last_tick = self._awake_since = self.clock.monotonic()
        ticker = asyncio.ensure_future(self._ticker())
        self.loop.set_exception_handler(self._loop_error)
        self._evaluate()
        try:
            await self._ended.wait()
            await self._shutdown()
        finally:
            ticker.cancel()
            if self.server is not None:
                await asyncio.sleep(0.1)  # let clients see run_ended before the socket goes away
                await self.server.close()
            self._finish()
        return self.exit_code

    def _take_over(self) -> None:
        """Adopt the attempts whose monitors outlived the previous supervisor."""
        for path, rec in self._adopt:
            c = self.components.get(str(rec["component"]))
            if c is None:
                continue  # a component no longer in the config: its monitor is told to finish
                # (below), which ends it
            att = attempt_from_record(rec, path)
            prev = self.state["components"][c.name]
            # Its output begins where its `started` event says, in the line numbering the recorded log
            # position continues (without a recorded position the numbering starts again: unknown).
            out = prev.get("attempt_log") or {}
            numbered = (self._saved.get("components") or {}).get(c.name, {}).get("log") if self._saved else None
            same = int(prev.get("attempt") or 0) == att.attempt
            log_seq = out.get("seq") if isinstance(numbered, dict) and numbered.get("ino") is not None and same else None
            c.adopt(att, rec, ready=prev.get("state") == "running" or (prev.get("ready_at") is not None
                                                                       and prev.get("state") != "starting"),
                    log_seq=log_seq)
        for path, rec in self._adopt:
            if str(rec["component"]) not in self.components:
                attempt_from_record(rec, path).finish()
        for path, rec in self._orphan_records:  # a monitor that died: its record is all that is left
            with contextlib.suppress(OSError):
                path.unlink()
            del rec

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def request_shutdown(self, reason: str, by_user: bool = True) -> None:
        if self._ended is None or self._ended.is_set():
            return
        if by_user:
            self.exit_code = 0
        self.end_reason = reason
        self._ended.set()

    def handover(self, reason: str) -> list[int]:
        """Exit without touching the components (an upgrade in place): they run on under their
        monitors and the next supervisor adopts them. Returns the monitors' pids."""
        pids = [c.current.monitor_pid for c in self.components.values() if c.current is not None]
        self._handover = True
        self.emit(ev.SupervisorHandedOver(None, reason=reason, monitors=pids))
        if self._ended is not None:
            self._ended.set()
        return pids

    async def _shutdown(self) -> None:
        """Stop components in reverse dependency order, in parallel waves; return when nothing of
        the run is left (or say what could not be ended)."""
        if getattr(self, "_handover", False):
            self._write_state(force=True)
            return
        self._shutting_down = True
        why = lc.Cause("shutdown", f"the run is ending: {self.end_reason}" if self.end_reason else "the run is ending")
        # A component is stopped once every component that depends on it is quiet (Kahn's algorithm
        # on the reversed graph: each edge is looked at once, so a 2,000-long chain of components
        # that already ended takes milliseconds, not minutes). The round waits only when nothing
        # became quiet in it.
        order = self.cfg.topo_order()
        deps = {n: {d for d in self.cfg.components[n].depends_on if d in self.components} for n in order}
        waiting_on = dict.fromkeys(order, 0)  # dependents not yet quiet
        for n in order:
            for d in deps[n]:
                waiting_on[d] += 1
        stopping = [n for n in reversed(order) if not waiting_on[n]]
        for n in stopping:
            self.components[n].handle(lc.Shutdown(why))
        while stopping:
            still: list[str] = []
            freed: list[str] = []
            for n in stopping:
                c = self.components[n]
                if c.state not in lc.FINAL or c.busy:
                    still.append(n)
                    continue
                for d in deps[n]:
                    waiting_on[d] -= 1
                    if not waiting_on[d]:
                        freed.append(d)
            for n in freed:
                self.components[n].handle(lc.Shutdown(why))
            if not freed and still:
                await asyncio.sleep(0.02)
            stopping = still + freed
        for c in self.components.values():
            await c.await_cleanups()
        left = await self.loop.run_in_executor(None, self._last_net)
        for c in self.components.values():
            c.flush_progress()
        self.emit(ev.RunEnded(None, exit_code=self.exit_code, reason=self.end_reason, root=self.root, left=left))

    def _last_net(self) -> list[str]:
        """Nothing of this run may outlive it; returns what could not be ended. "Of this run": marked
        with it, left in one of its cgroups, or a process a component's cleanup could not end (which
        no longer has a monitor above it, nor perhaps a marker)."""
        import psutil

        left = find_marked(str(self.paths.root))
        pids = {p.pid for p in left}
        candidates: dict[int, float | None] = {}
        for c in self.components.values():
            candidates.update(c.unended)
        # Orphans re-parented to us (the run's child subreaper) once their monitor had finished: an
        # escapee that cleared its environment has no marker, and no monitor is above it any more. Only
        # a process started since we began can be one (what a process embedding us started before is not).
        zygote = self.monitors.zygote_pid
        for pid in children_map(max_age=0.0).get(os.getpid(), []):
            since_boot = started_since_boot(pid)
            if pid == zygote or since_boot is None or since_boot < self._began:
                continue
            try:
                candidates.setdefault(pid, psutil.Process(pid).create_time())
            except psutil.Error:
                continue
        if self.cgroups is not None and self.cgroups.base is not None:
            for d in self.cgroups.base.glob("*"):
                candidates.update(dict.fromkeys(shim.cgroup_pids(str(d))))
        for pid, started in candidates.items():
            if pid in pids or pid == os.getpid() or not pid_alive(pid):
                continue
            try:
                p = psutil.Process(pid)
                if started is not None and abs(p.create_time() - started) > 0.01:
                    continue  # the pid was reused: not ours
            except psutil.Error:
                continue
            left.append(p)
            pids.add(pid)
        survivors = terminate_processes(left, signal_mod.SIGKILL, 1.0) if left else []
        if self.cgroups is not None:
            self.cgroups.remove_empty()
        out = []
        for p in survivors:
            try:
                out.append(f"pid {p.pid} ({' '.join(p.cmdline())[:80]})")
            except Exception:  # noqa: BLE001 - describing a process that may be gone
                out.append(f"pid {p.pid}")
        return out

    def _finish(self) -> None:
        if self._gpu_thread is not None:
            self._gpu_thread.stop()
        if self.watches is not None:
            self.watches.stop()
        for c in self.components.values():
            c.close()
        self._write_state(force=True)
        self.monitors.close()
        if self._inotify is not None:
            with contextlib.suppress(ValueError, RuntimeError):
                self.loop.remove_reader(self._inotify.fd)
            self._inotify.close()
        for fd in list(self._by_pidfd):
            with contextlib.suppress(ValueError, RuntimeError):
                self.loop.remove_reader(fd)
        if self.notifier is not None:
            self.notifier.close(5.0)
        if self.journal is not None and (lost := self.journal.close()):
            say(f"rlsup: {lost} events could not be written to {self.paths.events}: the disk stayed full "
                f"past the run's reserved space (state.json has the run's final state)")
        with contextlib.suppress(ValueError, RuntimeError):
            self.loop.remove_signal_handler(signal_mod.SIGCHLD)
        self.lock.release()

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """A bug in rlsup must not leave the children unsupervised silently: say so and end the run."""
        import traceback

        exc = context.get("exception")
        msg = "".join(traceback.format_exception(exc)).rstrip() if exc else context.get("message", "?")
        say(f"rlsup: internal error, shutting the run down:\n{msg}")
        self.exit_code = 1
        self.request_shutdown(f"internal error: {exc!r}", by_user=False)

    # ------------------------------------------------------------------ events

    def emit(self, event: ev.Event) -> dict[str, Any]:
        lifecycle = not event.gauge
        seq = self.journal.last_seq if self.journal else 0
        e = event.to_dict(ts=self.clock.time(), seq=seq)
        if lifecycle:
            e = self.redactor.redact_obj(e)
            if self.journal is not None:
                self.journal.last_seq += 1
                e["seq"] = self.journal.last_seq
                self.journal.append(e, sync=event.kind != "command")
        state_mod.apply(self.state, e)
        for s in list(self.subscribers):
            try:
                s(e)
            except Exception as exc:  # noqa: BLE001 - a broken client must not break supervision
                say(f"rlsup: subscriber failed: {exc!r}")
        if lifecycle:
            self._mark_state_dirty()
            if self.notifier is not None:
                self.notifier.handle(e)
            if isinstance(event, ev.RestartScheduled):
                self._triggers.append(e)  # acted on once the step that emitted it is done (changed)
        return e

    def threadsafe(self, fn: Callable[..., Any], *args: Any) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn, *args)

    # ------------------------------------------------------------------ what components ask of the run

    def changed(self, comp: Component) -> None:
        while self._triggers:  # what the step just carried out set off elsewhere (restart_with)
            e = self._triggers.pop(0)
            why = detectors.restart_trigger(e)
            if why is not None:
                self.follow_restart(str(e["component"]), why)
        if comp.state in lc.FINAL:
            self._final_at.setdefault(comp.name, self.clock.monotonic())
        else:
            self._final_at.pop(comp.name, None)
        if not self._eval_scheduled and self.loop is not None:
            self._eval_scheduled = True
            # One evaluation looks at every component; a burst of changes (a thousand components
            # starting or ending one after the other) is judged in batches, not once per change.
            every = max(EVALUATE_EVERY_S, 5 * self._evaluate_cost)  # at most ~20% of the loop's time
            wait = every - (self.loop.time() - self._evaluated_at)
            if wait > 0:
                self.loop.call_later(wait, self._evaluate)
            else:
                self.loop.call_soon(self._evaluate)

    def _seen(self) -> dict[str, detectors.Seen]:
        return {n: self._seen_one(n, c) for n, c in self.components.items()}

    def _seen_one(self, n: str, c: Component) -> detectors.Seen:
        st = self.state["components"].get(n, {})
        return detectors.Seen(n, c.state, c.attempt, reason=st.get("reason"), cause=c.life.cause,
                              ended_at=self._final_at.get(n), started_at=c.life.started_at,
                              ready_at=c.life.ready_at, last_step_at=c.progress.last_change_at,
                              gave_up_by=c.life.gave_up.by if c.life.gave_up is not None else None,
                              step=c.progress.step)

    def _evaluate(self) -> None:
        """Tell pending components whether they may start, until nothing changes; then check the end.
        A loop, not recursion: a 2,000-long dependency chain must not exhaust the stack."""
        self._eval_scheduled = False
        t0 = time.monotonic()
        try:
            self._evaluate_all()
        finally:
            self._evaluate_cost = time.monotonic() - t0
            self._evaluated_at = self.loop.time() if self.loop is not None else 0.0
            self.poke_ticker()  # a state changed: a starting or failing component wants the 1 s tick

    def _evaluate_all(self) -> None:
        if self._order is None:
            self._order = self.cfg.topo_order()
        for _ in range(len(self.components) + 2):
            seen = self._seen()
            moved = False
            for n in self._order:
                c = self.components[n]
                if c.state != "pending" or c.life.want != "run" or c.life.spawning or self._shutting_down:
                    continue
                before = (c.state, c.life.waiting)
                verdict = detectors.gate(n, self.cfg, seen)
                if isinstance(verdict, lc.DepsMet):
                    verdict = lc.DepsMet(detectors.gate_cause(n, self.cfg, seen, self._run_seq,
                                                              again=n in self._again and c.life.attempt == self._again[n]))
                c.handle(verdict)
                if (c.state, c.life.waiting) != before:
                    moved = True
                    seen[n] = self._seen_one(n, c)  # only it moved (its effects run later)
            if not moved:
                break
        self._eval_scheduled = False
        if self._shutting_down or self._ended is None or self._ended.is_set():
            return
        out = detectors.outcome(self.cfg, self._seen())
        if out is not None:
            self.exit_code = out.exit_code
            self.end_reason = out.reason
            self.root = {"component": out.root, "reason": out.root_reason} if out.root else None
            self._ended.set()

    def follow_restart(self, name: str, cause: lc.Cause | None = None) -> None:
        """Restart the components that asked (``restart_with``) to follow ``name``'s restarts."""
        why = cause or lc.Cause("user", f"{name} was restarted")
        for other, inp in detectors.followers(self.cfg, self._seen(), name, why):
            self.components[other].handle(inp)

    def cgroup_for(self, comp: str, attempt: int) -> str | None:
        return self.cgroups.for_attempt(comp, attempt) if self.cgroups is not None else None

    def lines_added(self, comp: Component) -> None:
        for fn in self.line_listeners:
            fn(comp)

    def progress_dirty(self, comp: Component) -> None:
        if not self._progress_pending and self.loop is not None:
            self.loop.call_later(PROGRESS_FLUSH_S, self._flush_progress)
        self._progress_pending.add(comp.name)

    def _flush_progress(self) -> None:
        names, self._progress_pending = self._progress_pending, set()
        for n in names:
            self.components[n].flush_progress()
        self._mark_state_dirty()

    def partner_up(self, comp: Component) -> str | None:
        """A component restarting together with ``comp`` that has already started again (see
        :func:`detectors.partner_up`)."""
        return detectors.partner_up(comp.name, {n: (c.cfg.restart_with, c.state) for n, c in self.components.items()})

    # ------------------------------------------------------------------ monitors and log files

    def watch_monitor(self, comp: Component, att: Attempt) -> None:
        self._by_record[att.record_path.name] = (comp, att)
        fd = att.open_pidfd()
        if fd is not None:
            self._by_pidfd[fd] = (comp, att)
            self.loop.add_reader(fd, self._monitor_exited, fd)
        elif not pid_alive(att.monitor_pid):
            self.loop.call_soon(comp.monitor_changed, att, True)
        # The record may have changed before the watch existed (a very short command).
        self.loop.call_soon(self._record_changed, att.record_path.name)

    def unwatch_monitor(self, att: Attempt) -> None:
        """Forget an attempt's monitor before its pidfd is closed (a reused fd number must not be taken
        for it later)."""
        self._by_record.pop(att.record_path.name, None)
        fd = att.pidfd
        if fd is not None and fd in self._by_pidfd:
            del self._by_pidfd[fd]
            with contextlib.suppress(ValueError, RuntimeError):
                self.loop.remove_reader(fd)

    def _monitor_exited(self, fd: int) -> None:
        comp, att = self._by_pidfd.pop(fd)
        with contextlib.suppress(ValueError, RuntimeError):
            self.loop.remove_reader(fd)
        att.monitor_gone = True
        self._by_record.pop(att.record_path.name, None)
        if att.exit is None:
            comp.monitor_changed(att, gone=True)

    def _record_changed(self, name: str) -> None:
        hit = self._by_record.get(name)
        if hit is not None:
            comp, att = hit
            comp.monitor_changed(att)

    def _reap(self) -> None:
        """Reap our children: monitors (re-parented to us, their subreaper) and the zygote."""
        shim.reap_children()

    def _start_watching_files(self) -> None:
        try:
            if os.environ.get("RLSUP_INOTIFY", "auto") == "off":
                raise OSError("disabled by RLSUP_INOTIFY=off")
            ino = Inotify()
            ino.watch(str(self.paths.logs), IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE)
            ino.watch(str(self.paths.monitors), IN_MODIFY | IN_MOVED_TO | IN_CLOSE_WRITE)
        except OSError as e:
            say(f"rlsup: inotify unavailable ({e}); polling logs every {POLL_S:g}s")
            self.loop.call_later(POLL_S, self._poll_files)
            return
        self._inotify = ino
        self._dirs = (str(self.paths.logs), str(self.paths.monitors))  # compared on every batch of events
        self._log_names = {os.fsencode(self.paths.log(n).name): n for n in self.components}
        for c in self.components.values():
            c.follower.rotation_events = True  # inotify says when a log is created anew: no stat per read
        self.loop.add_reader(ino.fd, self._on_inotify)
        self._read_pending.update(self.components)
        self.loop.call_soon(self._read_logs)

    def _poll_files(self) -> None:
        self._read_pending.update(self.components)
        self._read_logs()
        for name in list(self._by_record):
            self._record_changed(name)
        if self._inotify is None and not self.loop.is_closed():  # polling lasts as long as the run
            self.loop.call_later(POLL_S, self._poll_files)

    def _on_inotify(self) -> None:
        assert self._inotify is not None
        logs, mons = self._dirs
        records_changed: set[str] = set()
        log_names = self._log_names
        for d, mask, raw in self._inotify.read():
            if mask & IN_Q_OVERFLOW:
                self._read_pending.update(self.components)
                records_changed.update(self._by_record)
            elif d == logs:
                comp = log_names.get(raw)
                if comp is None:  # X.log.1 (a rotation) or a file of no component
                    comp = os.fsdecode(raw).split(".log", 1)[0]
                    if comp not in self.components:
                        continue
                self._read_pending.add(comp)
                if not mask & IN_MODIFY:  # created or renamed: the log may have rotated
                    self.components[comp].follower.maybe_rotated = True
            elif d == mons:
                records_changed.add(os.fsdecode(raw))
        for name in records_changed:
            self._record_changed(name)
        if self._read_pending and not self._read_paused:
            self._read_logs()

    def _read_logs(self) -> None:
        pending, self._read_pending = self._read_pending, set()
        for n in pending:
            c = self.components.get(n)
            if c is not None and c.read_output():
                self._read_pending.add(n)  # more than one round's budget waiting: again after the pause
        if pending:  # a productive round: let output pile up briefly, then read it in one go
            self._read_paused = True
            if self._inotify is not None:  # events queue in the kernel meanwhile: one read gets them all
                self.loop.remove_reader(self._inotify.fd)
            self.loop.call_later(READ_PAUSE_S, self._resume_reading)

    def _resume_reading(self) -> None:
        self._read_paused = False
        if self._inotify is not None and self._inotify.fd >= 0:
            self.loop.add_reader(self._inotify.fd, self._on_inotify)
            self._on_inotify()  # what queued during the pause
        elif self._read_pending:
            self._read_logs()

    def read_all_now(self) -> None:
        """Catch up with every log (before judging stalls, before diagnosis)."""
        for c in self.components.values():
            while c.read_output():
                pass

    # ------------------------------------------------------------------ state on disk

    def _mark_state_dirty(self) -> None:
        self._state_dirty = True
        if self._state_timer is None and self.loop is not None:
            # At most twice a second, and never more than ~10% of the loop's time (a thousand
            # components make each write cost tens of milliseconds).
            every = max(STATE_WRITE_MIN_S, 10 * self._state_write_cost)
            delay = max(0.0, every - (time.monotonic() - self._state_written_at))
            self._state_timer = self.loop.call_later(delay, self._write_state)

    def _write_state(self, force: bool = False) -> None:
        self._state_timer = None
        if not self._state_dirty and not force:
            return
        self._state_dirty = False
        t0 = self._state_written_at = time.monotonic()
        if self.journal is not None and self.journal.pending:
            self.journal.flush()  # a disk that had no room may have room again
        if self.journal is not None and not self.journal.pending and self.journal.unsaid:
            n = self.journal.take_unsaid()
            self.emit(ev.FlagRaised(None, type="journal_gap", message=(
                f"{n} events could not be written to {self.paths.events} while the disk was full (the "
                "oldest pending ones were dropped); their effect is in state.json")))
        try:
            self._state_file.write((json.dumps(self.snapshot_state(with_positions=True), indent=1,
                                               default=str) + "\n").encode())
        except OSError:
            pass  # disk trouble is flagged by the monitors; state.json catches up later
        keep_spare_records(self.paths.monitors, self._spares_wanted)  # those used on a full disk, again
        self._state_write_cost = time.monotonic() - t0

    def snapshot_state(self, with_positions: bool = False) -> dict[str, Any]:
        out = state_mod.view(self.state, self.clock.time())
        if with_positions:
            for n, c in self.components.items():
                out["components"][n]["log"] = c.position().to_dict()
        return out

    # ------------------------------------------------------------------ periodic work

    async def _ticker(self) -> None:
        """The run's periodic checks, at :func:`~.detectors.next_tick`: every second while something
        needs watching, else only when something is due (an idle run wakes every ``IDLE_TICK_MAX_S``)."""
        while True:
            planned = self._next_tick_at()
            wait = planned - self.clock.monotonic()
            self._nap_until = planned
            if wait > 0 and await self._nap(wait):
                continue  # woken early by a change: plan again
            self._tick(planned)

    async def _nap(self, seconds: float) -> bool:
        """Sleep ``seconds``; True when :meth:`poke_ticker` ended the nap early."""
        fut: asyncio.Future[bool] = self.loop.create_future()
        self._nap_future = fut
        timer = self.loop.call_later(seconds, lambda: None if fut.done() else fut.set_result(False))
        try:
            return await fut
        finally:
            timer.cancel()
            self._nap_future = None

    def poke_ticker(self) -> None:
        """Something changed (a component's state, the clients watching): plan the next tick again,
        unless it is already due a second after the last one (it can come no sooner)."""
        fut = self._nap_future
        if fut is not None and not fut.done() and self._nap_until > self._last_tick + TICK_S:
            fut.set_result(True)

    def _next_tick_at(self) -> float:
        now = self.clock.monotonic()
        busy = bool(self.journal is not None and self.journal.pending) or bool(self._dep_flagged) or bool(
            self._dep_watch.down_since())
        due: list[float | None] = []
        sampled = False
        for n, c in self.components.items():
            if busy:
                break
            if c.state not in ("running", "stopped", "fatal", "completed") or "stall" in c.life.episode:
                busy = True  # starting, in backoff, stopping, pending, stalled: watched every second
            elif c.state == "running" and any(self._dep_state(d, now) != "running" for d in c.cfg.depends_on):
                busy = True  # dependency_down looks at its consumers every second
            elif c.state == "running" and c.cfg.progress and c.cfg.progress.stall_after:
                due.append(detectors.stall_due(self._seen_one(n, c), c.cfg.progress.stall_after,
                                               awake_since=self._awake_since))
            if c.moved:
                due.append(self._positions_written + POSITIONS_WRITE_S)
            sampled = sampled or c.current is not None
        if sampled:
            due.append(self._last_resources + self.resources_sample_s)
        return detectors.next_tick(self._last_tick, busy=busy, due=due, tick_s=TICK_S, idle_max_s=IDLE_TICK_MAX_S)

    def _tick(self, planned: float) -> None:
        now = self.clock.monotonic()
        if now - planned > PAUSE_DETECT_S:
            self._awake_since = now  # we were paused: what happened meanwhile is not the components' fault
            self.read_all_now()
        self._last_tick = now
        self._reap()  # a safety net for a lost SIGCHLD
        self._check_stalls(now)
        self._check_dependencies(now)
        if now - self._last_resources >= self.resources_sample_s and any(
                c.current is not None for c in self.components.values()):
            self._last_resources = now
            self._sample_resources(now)
        if self.journal is not None and self.journal.pending:
            self.journal.flush()
        moved = [c for c in self.components.values() if c.moved]
        if moved and now - self._positions_written >= POSITIONS_WRITE_S:
            # Log positions moved on: state.json, where the next supervisor starts reading, keeps up
            # every few seconds (what it re-reads after a crash is at most that much output, with the
            # same sequence numbers: nothing is seen twice by clients).
            self._positions_written = now
            for c in moved:
                c.moved = False
            self._mark_state_dirty()

    def watchers_changed(self) -> None:
        """A client came or went: GPU bars every second while anyone looks, every few seconds otherwise."""
        if self._gpu_thread is not None:
            watched = self.server is not None and bool(self.server.conns)
            self._gpu_thread.interval = GPU_SAMPLE_S if watched else GPU_SAMPLE_IDLE_S

    def _check_stalls(self, now: float) -> None:
        seen = None
        caught_up = False
        for n, c in self.components.items():
            p = c.cfg.progress
            if not p or not p.stall_after or c.state != "running":
                continue
            seen = seen or self._seen()
            idle = detectors.stalled(seen[n], p.stall_after, now, awake_since=self._awake_since)
            if idle is not None and not caught_up and "stall" not in c.life.episode:
                # Before calling it a stall, read what its log holds now: the steps it wrote while we
                # were paused or busy elsewhere are there (its monitor kept writing).
                caught_up = True
                self.read_all_now()
                seen = self._seen()
                idle = detectors.stalled(seen[n], p.stall_after, now, awake_since=self._awake_since)
            if idle is None:
                if "stall" in c.life.episode:
                    c.handle(lc.Unstalled(f"progress again at step {c.progress.step}"))
                continue
            last = c.attempt_tail(1)
            watched = [(path, owner.name, w) for owner in [c] + [self.components[d] for d in c.cfg.depends_on]
                       for path, w in owner.watch_info.items()]
            evidence = detectors.stall_evidence(last[0] if last else None, c.progress.step,
                                                {d: self.components[d].state for d in c.cfg.depends_on}, watched,
                                                time.time())
            c.handle(detectors.stall_input(seen[n], p.stall_after, idle, evidence))

    def _dep_state(self, name: str, now: float) -> str:
        return detectors.dependency_state(self._seen_one(name, self.components[name]), now, DEPENDENCY_STABLE_S)

    def _check_dependencies(self, now: float) -> None:
        """dependency_down: consumers failing to reach a dependency that is down. Restart the
        dependency (not its victims); stop the consumers if it stays down past the budget."""
        consumers = [detectors.Consumer(n, c.state, tuple(c.cfg.depends_on),
                                        ((self.state["components"][n].get("last_exit") or {}).get("diagnosis")
                                         or {}).get("category", ""), partial(c.attempt_tail, 200))
                     for n, c in self.components.items()
                     if c.cfg.depends_on and c.state in ("starting", "running", "backoff", "pending")]
        down_since = self._dep_watch.down_since()
        if not consumers and not down_since and not self._dep_flagged:
            return
        seen = self._seen()
        down_for = {d: self._dep_watch.down_for(d) or 0.0 for d in down_since}
        failing, events, flagged = detectors.consumers_failing(
            consumers, seen, now, flagged=frozenset(self._dep_flagged), down_since=down_since, down_for=down_for,
            budget=self.cfg.dependency_budget, flag_after_s=DEPENDENCY_FLAG_AFTER_S, stable_s=DEPENDENCY_STABLE_S)
        self._dep_flagged = set(flagged)
        for e in events:
            self.emit(e)
        for d in set(self._dep_watch.down_since()) | set(failing):
            dep = self.components[d]
            act = self._dep_watch.observe(d, down=self._dep_state(d, now) != "running", consumers_failing=d in failing)
            if act == "restart_dependency":
                start = detectors.restart_dependency(self._seen_one(d, dep), failing.get(d, []), None)
                if start is not None:
                    cmd = self.emit(ev.CommandReceived(d, command="start", by="rlsup", client="dependency_down"))
                    dep.handle(lc.Start(start.by, cause=replace(start.cause, seq=cmd.get("seq")) if start.cause else None))
            elif act == "stop_consumers":
                victims = [n for n in failing.get(d, []) if self.components[n].state in lc.ACTIVE]
                flag_e = self.emit(ev.FlagRaised(
                    d, type="dependency_down",
                    message=f"{d} has been down for {self.cfg.dependency_budget:g}s; stopping "
                            f"{', '.join(victims) or 'nothing'} instead of letting them retry for hours",
                    evidence=[f"{d}: {dep.state}"],
                    action=f"stopped {', '.join(victims) or 'nothing'}; `rlsup start` them once {d} is back"))
                for n, stop in detectors.stop_consumers(d, victims, self.cfg.dependency_budget, flag_e.get("seq")):
                    self.components[n].handle(stop)

    def _sample_resources(self, now: float) -> None:
        """CPU, RSS and GPU memory per component (the ``resources`` gauge), and memory_growth."""
        for e in self._resources.sample(now, self.components, self.state.get("gpus") or [], self.memory_detector):
            self.emit(e)

    # ------------------------------------------------------------------ GPUs

    def _start_gpu_sampler(self) -> None:
        if self.gpu_sampler is None:
            return
        from .gpu import SamplerThread

        self._gpu_thread = SamplerThread(self.gpu_sampler, lambda s: self.threadsafe(self._gpu_sample, s),
                                         interval=GPU_SAMPLE_S)
        self.watchers_changed()
        self._gpu_thread.start()

    def _owners(self) -> dict[int, str]:
        out: dict[int, str] = {}
        for n, c in self.components.items():
            if c.current is not None:
                for pid in c.current.members():
                    out[pid] = n
        return out

    def _gpu_sample(self, sample: Any) -> None:
        d = sample.to_dict()
        owners = self._owners()
        for g in d.get("gpus") or []:
            for p in g.get("processes") or []:
                p["component"] = owners.get(p["pid"])
        self.emit(ev.GpuSampled(None, {k: d.get(k) for k in ("gpus", "host", "backend", "reason")}))

    async def wait_gpu_release(self, comp: Component, prev: dict[int, float | None]) -> None:
        """Before a new attempt: the previous attempt's GPU memory released (:mod:`.gpurelease`)."""
        if not comp.cfg.gpus or self.gpu_sampler is None:
            return
        from .gpurelease import wait_gpu_release

        await wait_gpu_release(comp.name, list(comp.cfg.gpus), self.gpu_sampler, prev=prev, run_pids=self._owners,
                               run_dir=str(self.paths.root), timeout=self.gpu_release_timeout, clock=self.clock,
                               stop_wanted=lambda: comp.life.want == "stop", emit=self.emit,
                               proc_lookup=self.gpu_proc_lookup)

    # ------------------------------------------------------------------ commands and clients

    def command(self, cmd: str, name: str | None = None, by: str = "user", client: str | None = None,
                **args: Any) -> dict[str, Any]:
        from .commands import run_command

        return run_command(self, cmd, name, by=by, client=client, **args)

    def hello(self) -> dict[str, Any]:
        run = self.state.get("run", {})
        return {"pid": os.getpid(), "host": run.get("host") or socket.gethostname(), "name": self.cfg.name,
                "run_dir": str(self.paths.root), "config": self.cfg.source, "rlsup": VERSION, "ended": False,
                # The run decided to end (it may still be stopping): `up` tells the user instead of
                # claiming a run it "supervises in the background" that ended as it started.
                "ending": self._ended is not None and self._ended.is_set() and not getattr(self, "_handover", False)}

    def redact_lines(self, lines: list[str]) -> list[str]:
        return self.redactor.redact_lines(lines)

    @property
    def journal_seq(self) -> int:
        return self.journal.last_seq if self.journal else 0

    def rings(self) -> dict[str, Any]:
        return {n: c.ring for n, c in self.components.items()}

    def log_pages(self, name: str) -> tuple[Any, Any] | None:
        """A component's log on disk and the position its ring has read to (the control server's
        ``log_read``: clients page older lines than the ring holds)."""
        from .logpages import LogPages

        c = self.components.get(name)
        if c is None:
            return None
        pages = self.__dict__.setdefault("_log_pages", {})
        if name not in pages:
            pages[name] = LogPages(self.paths.log(name), c.logs_cfg.line_cap)
        return pages[name], c.position()


def raise_fd_limit() -> int:
    """Raise this process's open-file limit to the hard limit (thousands of components hold thousands of
    log files and pidfds); return the soft limit it had, which components get back (monitors restore it
    in the child, as many programs misbehave with a huge one)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return soft
