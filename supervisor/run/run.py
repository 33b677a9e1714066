"""The run: the single authority over its components, the journal and the state.

Everything happens on one asyncio loop: monitor records and log files changing (inotify), monitors
exiting (pidfds), probes, timers, client commands. Threads (the GPU sampler, artefact watches,
notifications) only hand results to the loop. What a component does next is decided by
:mod:`~rlsup.supervisor.rules.lifecycle`; what the run as a whole does (which component may start, who
follows a restart, a stall, a dead dependency, the end and its root cause) by the run's step,
:mod:`~rlsup.supervisor.rules.runstep`, pure as the lifecycle is. This module watches (files:
:mod:`.filewatch`, monitors: :mod:`.monitorwatch`), feeds inputs and carries out the answers; the
run dir's past is read by :mod:`.adoption` and :mod:`.carryover`, and the end is carried out by
:mod:`.shutdown` and :mod:`.lastnet`.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.model import Config
from ..monitor.process import AttemptProcesses
from ..records import events as ev
from ..records import state as state_mod
from ..records.clock import Clock, SystemClock
from ..records.version import VERSION
from ..rules import detectors, runstep
from ..rules import lifecycle as lc
from ..rules.detectors import next_tick, partner_up
from ..rundir.journal import Journal, damage_notes, journal_id, keep_spare_records
from ..rundir.layout import RunLock, RunPaths
from ..rundir.logs import LogRing, Position, RingBudget
from ..slurm.launcher import slurm_job_info
from . import adoption, carryover, health, preemption, runview, shutdown
from .adoption import IncompatibleMonitors as IncompatibleMonitors
from .component import Component
from .daemonlog import say
from .ending import Ending
from .filewatch import Watching, read_all
from .gpusampling import GpuSampling, gpu_event, owners
from .resources import ResourceSampling
from .runview import POSITIONS_WRITE_S
from .services import Services
from .statewriter import StateWriter
from .stepmemory import StepMemory
from .ticker import EvaluationPacing, Ticker
from .tracking import Tracking, reap_held

if TYPE_CHECKING:
    from ..diagnosis.stacks import Stacks
    from ..rundir.logpages import LogPages
    from .stacks import HangGate

TICK_S = 1.0

Subscriber = Callable[[dict[str, Any]], None]


class Run:
    def __init__(self, cfg: Config, *, clock: Clock | None = None, gpu_sampler: Any = None, serve: bool = True,
                 resume: bool = False):
        self.cfg = cfg
        self.paths = RunPaths(Path(cfg.run_dir))
        self._states = StateWriter(self.paths, partial(self.snapshot_state, with_positions=True), self.emit)
        self.clock: Clock = clock or SystemClock()
        from ..records.redact import Redactor

        # Secrets never reach an event, a client or a notification: by name and by value, from every
        # environment the components get and from their command lines.
        self.redactor = Redactor.for_run([os.environ, cfg.file_env, cfg.env, *(c.env for c in cfg.components.values())],
                                         [c.argv() for c in cfg.components.values()])
        # monitors, subreaper, cgroup, open files: what holds the processes
        self.tracking = Tracking(self.paths.root, len(cfg.components))
        self.components: dict[str, Component] = {}
        self.subscribers: list[Subscriber] = []
        self.line_listeners: list[Callable[[Component], None]] = []
        self.state: dict[str, Any] = {}
        self.lock = RunLock(self.paths)
        self.journal: Journal | None = None
        self.services = Services(serve)  # notifications, the control socket, the metrics endpoint
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.end = Ending()  # decided, under way, a hand-over, a requeue after it; how it ended (run_ended)
        # what the run dir held: what a previous supervisor left, its journal replayed; what the user asked of it
        self._past = carryover.Past(asked="resumed" if resume else "new")
        self._watching = Watching()  # monitors (pidfds), logs and records (inotify), artefacts
        # what the run's step reads beyond the components' lives, dependency_down's episodes too
        self._memory = StepMemory(budget_s=cfg.dependency_budget, clock=self.clock.monotonic)
        # the GPUs' samples (each process named by its component, on the loop) and their release
        self.gpus = GpuSampling(gpu_sampler, lambda s: self.threadsafe(
            lambda: self.emit(gpu_event(s, owners(self.components)))))
        # the run's periodic checks, and when components are judged again
        self._ticker = Ticker(self.clock, self._next_tick_at, self._tick,
                              EvaluationPacing(self._evaluate, self._flush_progress, self.clock))
        self.resources = ResourceSampling()  # CPU, RSS and GPU memory per component; memory_growth
        self._hang: HangGate | None = None  # a stall flag carries the stacks: made at the first (:meth:`_gate`)

    # ------------------------------------------------------------------ before the loop

    def prepare(self) -> list[str]:
        """Create the run dir, take the lock, find what a previous supervisor left (:mod:`.adoption`)
        and replay the run dir's journal (:mod:`.carryover`). Returns notes for the user. Raises
        ``rundir.LockHeld`` (a live supervisor owns the run dir), ``rundir.UnsafeRunDir`` and
        :class:`IncompatibleMonitors`.
        """
        self.paths.create()
        self.lock.acquire({"config": self.cfg.source, "name": self.cfg.name, "version": VERSION})
        try:
            found = adoption.find(self.paths, self.lock.previous)
        except IncompatibleMonitors:
            self.lock.release()
            raise
        replayed, saved = carryover.replay(self.paths, self.cfg)
        self._past = carryover.Past(found, replayed, saved, damage_notes(), self._past.asked)
        return found.notes + self._past.damage

    # ------------------------------------------------------------------ the loop

    async def run(self) -> int:
        """Supervise until the run ends (or :meth:`request_shutdown`); return the exit code."""
        self.loop = asyncio.get_running_loop()
        self._watching.monitors.loop = self.loop
        self.tracking.take_hold()
        # Blocking work (a walk of /proc for a stopped component's leftovers, a GPU sample before a
        # restart) goes to a pool of fixed size: the supervisor's threads do not grow with its
        # components (asyncio's own default grows to min(32, cores + 4) in a burst of stops).
        self.loop.set_default_executor(ThreadPoolExecutor(2, thread_name_prefix="rlsup-io"))
        self.end.decided = decided = asyncio.Event()
        # No SIGCHLD handler: the monitors are reaped when their pidfds say they exited (MonitorWatch), anything
        # else each tick. A handler wrote a byte to asyncio's wakeup socket per child exit; a thousand monitors
        # ending at once filled it, and CPython's signal handler then takes a lock that is not signal-safe: the
        # supervisor deadlocked for good (seen at `rlsup down` of 1,000 components).
        self.journal = self._states.begin(self.loop, Journal(self.paths.events))
        names = self.cfg.topo_order()
        self._states.spares_wanted = 2 * len(names) + 2  # every component's next record, twice, on a full disk
        keep_spare_records(self.paths.monitors, self._states.spares_wanted)
        tracking = await self.tracking.begin(self.loop)
        self._build_components(names)
        await self.services.open(self)
        self._memory.run_seq = self.emit(ev.RunStarted(None, name=self.cfg.name, run_dir=str(self.paths.root), config=self.cfg.source,
                                pid=os.getpid(), host=socket.gethostname(), version=VERSION, components=names,
                                how=self._past.how, tracking=tracking, slurm=slurm_job_info(self.cfg))).get("seq")
        for note in self._past.damage:
            self.emit(ev.FlagRaised(None, type="journal_damaged", message=note, action=(
                "the damaged lines were skipped (a field of the wrong type: ignored); the rest of the run's "
                "history was read")))
        if self.end.refused:
            self.emit(self.end.refuse())
            self._finish()
            return self.end.exit_code
        self._begin_watching()
        ticker = asyncio.ensure_future(self._ticker.run())
        self.loop.set_exception_handler(self._loop_error)
        self._evaluate()
        try:
            await decided.wait()
            await self._shutdown()
        finally:
            ticker.cancel()
            await self.services.close_socket()
            self._finish()
        return self.end.exit_code

    def _build_components(self, names: list[str]) -> None:
        """The run's components, each going on with the life and gauges its run dir's past left it."""
        past = self._past
        self.state = past.replayed or state_mod.initial({}, names)
        budget = RingBudget(self.cfg.ring_bytes)
        saved = past.saved_components
        for n in names:
            prev = self.state["components"].setdefault(n, state_mod.new_component())
            life, again = carryover.life(n, prev, self.cfg, past.how)
            if again is not None:
                self._memory.again[n] = again  # its next start says so (until it has started)
            sv = saved.get(n) or {}
            c = self.components[n] = Component(n, self.cfg.components[n], self, budget=budget, life=life,
                                               log_position=Position.from_dict(sv.get("log")))
            carryover.restore_gauges(c.progress, sv, prev, self.clock.monotonic())

    def _begin_watching(self) -> None:
        """Files, GPUs and artefacts watched; the attempts a previous supervisor left adopted."""
        found = self._past.found
        if found.leftovers:
            self.emit(ev.LeftoversEnded(None, **found.leftovers))
        self._watching.start(self.loop, self.paths, self.components, self._ticker.late)
        self.gpus.start(self.services.watched)
        adoption.take_over(found, self.components, self.state, self._past.saved_components)
        self._ticker.last = self._ticker.awake_since = self.clock.monotonic()

    def request_shutdown(self, reason: str, by_user: bool = True, preempted: bool = False,
                         requeue: bool = False) -> None:
        """End the run: stopped by a person (``by_user``), failed, or ``preempted``: the platform takes the
        machine, and the components with ``preempt:`` are asked to checkpoint first (:mod:`.preemption`);
        ``requeue``: then the Slurm job that ``rlsup up`` submitted is requeued (Slurm's notice)."""
        if self.end.over:
            return
        self.end.requeue = requeue
        self.end.request(reason, by_user=by_user, preempted=preempted)
        if preempted:
            self.end.before = preemption.baselines(self.components)
        self._decide_end(reason)

    def _decide_end(self, reason: str) -> None:
        """From the moment the run's end is decided, every exit is a stop (its stop signal comes in turn)."""
        why = self.end.cause(reason)
        for c in self.components.values():
            c.handle(lc.RunStopping(why))
        self.end.decide()

    def exit_hold(self, comp: Component, exit_code: int | None, signal: str | None) -> float:
        return detectors.exit_hold(exit_code, signal, shutting_down=self.end.stopping or self.end.over,
                                   forced=comp.life.forced is not None)

    def handover(self, reason: str) -> list[int]:
        """Exit without touching the components (an upgrade in place): they run on under their
        monitors and the next supervisor adopts them. Returns the monitors' pids."""
        pids = [c.current.monitor_pid for c in self.components.values() if c.current is not None]
        self.end.handover = True
        self.emit(ev.SupervisorExited(None, reason=reason, monitors=pids))
        self.end.decide()
        return pids

    async def _shutdown(self) -> None:
        """Stop components in reverse dependency order, in parallel waves (:mod:`.shutdown`); return
        when nothing of the run is left (or say what could not be ended)."""
        if self.end.handover:
            self._states.write(force=True)
            return
        end = self.end
        end.stopping = True
        why = end.cause(end.reason)
        preempted = end.outcome == "preempted"
        if preempted:
            await preemption.wait_for_checkpoints(self.components, end.before, self.clock, self.emit)
        await shutdown.stop_in_order(self.cfg, self.components, why)
        for c in self.components.values():
            await c.await_cleanups()
        left = await self.loop.run_in_executor(None, self._last_net)
        for c in self.components.values():
            c.flush_progress()
        checkpoints = await self.loop.run_in_executor(None, preemption.standing, self.cfg) if preempted else None
        if end.requeue and (requeued := await self.loop.run_in_executor(None, preemption.requeue, self.slurm_launcher())):
            end.reason = f"{end.reason}; {requeued}"
        self.emit(end.run_ended(left, checkpoints))

    def slurm_launcher(self) -> Any:
        """The run's Slurm launcher (every component has the same one), or None on one machine."""
        return next((c.launcher for c in self.components.values() if c.launcher is not None), None)

    def _last_net(self) -> list[str]:
        return self.tracking.last_net(c.unended for c in self.components.values())

    def _finish(self) -> None:
        self.gpus.stop()
        if self._hang is not None:
            self._hang.close()
        if self._watching.artefacts is not None:
            self._watching.artefacts.stop()
        for c in self.components.values():
            c.close()
        self._states.write(force=True)
        self.tracking.monitors.close()
        self._watching.close()
        self.services.close()
        if self.journal is not None and (lost := self.journal.close()):
            why = (f"{self._states.trouble}" if self._states.trouble else
                   "the disk stayed full past the run's reserved space (state.json has the run's final state)")
            say(f"rlsup: {lost} events could not be written to {self.paths.events}: {why}")
        self.lock.release()

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """A bug in rlsup must not leave the children unsupervised silently: say so and end the run."""
        import traceback

        exc = context.get("exception")
        msg = "".join(traceback.format_exception(exc)).rstrip() if exc else context.get("message", "?")
        say(f"rlsup: internal error, shutting the run down:\n{msg}")
        self.end.exit_code = 1
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
                self._states.append(e, sync=event.kind != "command")
        # A gauge (progress, GPUs, resources: several a second) is folded as the typed event it is; a
        # lifecycle event as the redacted dict the journal holds, parsed once.
        state_mod.apply(self.state, ev.parse(e) if lifecycle else ev.Record(e["ts"], e["seq"], event))
        for s in list(self.subscribers):
            try:
                s(e)
            except Exception as exc:  # noqa: BLE001 - a broken client must not break supervision
                say(f"rlsup: subscriber failed: {exc!r}")
        if lifecycle:
            self._states.mark_dirty()
            if self.services.notifier is not None:
                self.services.notifier.handle(e)
            if isinstance(event, ev.RestartScheduled):
                self._memory.triggers.append(e)  # acted on once the step that emitted it is done (changed)
        return e

    def threadsafe(self, fn: Callable[..., Any], *args: Any) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn, *args)

    # ------------------------------------------------------------------ what components ask of the run

    def changed(self, comp: Component) -> None:
        memory = self._memory
        while memory.triggers:  # what the step just carried out set off elsewhere (restart_with)
            self._step(runstep.Restarted(memory.triggers.pop(0)))
        if comp.state in lc.FINAL:
            memory.final_at.setdefault(comp.name, self.clock.monotonic())
        else:
            memory.final_at.pop(comp.name, None)
        if comp.state == "pending" and comp.life.attempt > 0:
            self._admit_again(comp)
        if self.loop is not None:
            self._ticker.pacing.schedule(self.loop)  # judged in batches (:class:`.ticker.EvaluationPacing`), not once per change

    # ------------------------------------------------------------------ the run's step

    def _step(self, trigger: runstep.Trigger, view: runstep.View | None = None, now: float | None = None) -> None:
        """Ask the run's step (:mod:`.runstep`) what to do about ``trigger``, and do it."""
        now = self.clock.monotonic() if now is None else now
        self._carry_out(runstep.step(view or self._view(), trigger, now, self.cfg), now)

    def _carry_out(self, effects: tuple[runstep.Effect, ...], now: float) -> None:
        for fx in effects:
            if isinstance(fx, runstep.Feed):
                inp = self._with_stacks(fx.component, fx.input)
                if inp is not None:
                    self.components[fx.component].handle(inp)
            elif isinstance(fx, runstep.Say):
                seq = self.emit(fx.event).get("seq")
                for f in fx.then:
                    self.components[f.component].handle(runstep.with_seq(f.input, seq))
            elif isinstance(fx, runstep.End):
                self.end.reached(fx.outcome)
                self._decide_end(fx.outcome.reason)
            elif isinstance(fx, runstep.Flagged):
                self._memory.flagged = set(fx.consumers)
            elif isinstance(fx, runstep.Track):
                act = self._memory.tracker.observe(fx.dep, down=fx.down, consumers_failing=bool(fx.failing))
                self._step(runstep.DependencyVerdict(fx.dep, act, fx.failing), now=now)

    def _view(self, active: int | None = None) -> runstep.View:
        return runstep.View(self._seen(), shutting_down=self.end.stopping, run_seq=self._memory.run_seq,
                            ended=self.end.over, awake_since=self._ticker.awake_since,
                            active=active)

    def _seen(self) -> runview.SeenNow:
        return runview.SeenNow(self.components, self.state["components"], self._memory.final_at)

    def _evaluate(self) -> None:
        """Tell pending components whether they may start, until nothing changes; then check the end.
        A loop, not recursion: a 2,000-long dependency chain must not exhaust the stack."""
        self._ticker.pacing.scheduled = False
        t0 = time.monotonic()
        try:
            self._admit_pending()
            self._ticker.pacing.scheduled = False
            active = sum(c.state in lc.ACTIVE for c in self.components.values())  # not a Seen of each
            self._step(runstep.Settled(), self._view(active))
        finally:
            self._ticker.pacing.done(cost=time.monotonic() - t0, at=self.loop.time() if self.loop is not None else 0.0)
            # A state changed (a starting or failing component wants the 1 s tick): the next tick planned again,
            # unless it is already due a second after the last one (it can come no sooner).
            self._ticker.poke(self._ticker.last + TICK_S)

    def _admit_pending(self) -> None:
        """Dependency gating, in dependency order, until a pass changes nothing."""
        order = self._memory.order = self._memory.order or self.cfg.topo_order()
        for _ in range(len(self.components) + 2):
            waiting = [n for n in order if self._may_admit(self.components[n])]
            if not waiting:
                break  # nothing to gate: no view of every component to build
            view = self._view()
            seen = view.seen
            assert isinstance(seen, runview.SeenNow)
            moved = False
            for n in waiting:
                c = self.components[n]
                if not self._may_admit(c):
                    continue
                before = (c.state, c.life.waiting)
                self._step(runstep.Pending(n, again=self._memory.starts_again(n, c.life.attempt)), view)
                if (c.state, c.life.waiting) != before:
                    moved = True
                    seen.forget(n)  # only it moved (its effects run later)
            if not moved:
                break

    @staticmethod
    def _may_admit(c: Component) -> bool:
        return c.state == "pending" and c.life.want == "run" and not c.life.spawning

    def _admit_again(self, comp: Component) -> None:
        """A component pending again (its backoff is over, a restart asked for) is judged at once against
        its own dependencies only (the view reads what its gate looks at): a restart must not wait for the
        next evaluation of the whole run (up to :data:`.ticker.EVALUATE_EVERY_S`); that batching is for a burst of
        first starts and ends."""
        if comp.life.want != "run" or comp.life.spawning or self.end.stopping or self.loop is None:
            return
        self._step(runstep.Pending(comp.name, again=self._memory.starts_again(comp.name, comp.life.attempt)),
                   self._view())

    def follow_restart(self, name: str, cause: lc.Cause | None = None) -> None:
        """Restart the components that asked (``restart_with``) to follow ``name``'s restarts."""
        self._step(runstep.RestartCommand(name, cause))

    def progress_dirty(self, comp: Component) -> None:
        self._ticker.pacing.progress_moved(comp.name, self.loop)

    def _flush_progress(self, names: set[str]) -> None:
        for n in names:
            self.components[n].flush_progress()
        self._states.mark_dirty()

    def partner_up(self, comp: Component) -> str | None:
        """A component restarting together with ``comp`` that has already started again (see
        :func:`detectors.partner_up`)."""
        near = [comp.name, *(n for n in comp.cfg.restart_with if n in self.components)]  # not every component
        return partner_up(comp.name, {n: (self.components[n].cfg.restart_with, self.components[n].state) for n in near})

    # ------------------------------------------------------------------ monitors and log files

    def watch_monitor(self, comp: Component, att: AttemptProcesses) -> None:
        self._watching.monitors.watch(comp, att)

    def unwatch_monitor(self, att: AttemptProcesses) -> None:
        self._watching.monitors.unwatch(att)

    # ------------------------------------------------------------------ state on disk (:mod:`.statewriter`)

    def snapshot_state(self, with_positions: bool = False) -> dict[str, Any]:
        if with_positions:  # the step saved must be the one the lines up to the saved position say: a supervisor
            for c in self.components.values():  # taking over reads on from there, not again (explorer seed 90)
                c.flush_progress()
        out = state_mod.view(self.state, self.clock.time())
        if with_positions:
            for n, c in self.components.items():
                out["components"][n]["log"] = c.position().to_dict()
        else:  # what a client asks of the live run (status --json): the supervisor's own lag too
            out["run"]["ticks"] = self._ticker.late.summary()
        return out

    # ------------------------------------------------------------------ periodic work

    def _next_tick_at(self) -> float:
        now = self.clock.monotonic()
        busy = bool(self.journal is not None and self.journal.pending) or bool(self._memory.flagged) \
            or bool(self._memory.tracker.down_since()) or self._states.trouble is not None
        due: list[float | None] = []
        if not busy:
            busy, due = runview.tick_due(self.components, self._seen(), now, awake_since=self._ticker.awake_since,
                                         positions_written=self._ticker.positions_written,
                                         resources_due=self.resources.due_at)
        return next_tick(self._ticker.last, busy=busy, due=due, tick_s=TICK_S, idle_max_s=30.0)  # the reap safety net

    def _tick(self, planned: float) -> None:
        now = self.clock.monotonic()
        if now - planned > 5.0:  # this late: the supervisor itself was paused (SIGSTOP, swap)
            self._ticker.awake_since = now  # we were paused: what happened meanwhile is not the components' fault
            read_all(self.components)
        self._ticker.last = now
        reap_held()  # the zygote, the monitors and orphans re-parented to us (the subreaper)
        self._check_stalls(now)
        self._check_dependencies(now)
        if now >= self.resources.due_at and any(c.current is not None for c in self.components.values()):
            for e in self.resources.sample(now, self.components, self.state.get("gpus") or []):
                self.emit(e)
        if self.journal is not None and self.journal.pending:
            self.journal.flush()
        if now >= self._ticker.health_due:
            self._ticker.health_due = now + health.sweep_every(sum(c.current is not None for c in self.components.values()))
            self._states.check_writable()  # the sweep of :mod:`.health`: the run dir, each live attempt
            for c in self.components.values():
                c.check_health(now)
        moved = [c for c in self.components.values() if c.moved]
        if moved and now - self._ticker.positions_written >= POSITIONS_WRITE_S:
            # Log positions moved on: state.json, where the next supervisor starts reading, keeps up
            # every few seconds (what it re-reads after a crash is at most that much output, with the
            # same sequence numbers: nothing is seen twice by clients).
            self._ticker.positions_written = now
            for c in moved:
                c.moved = False
            self._states.mark_dirty()

    def watchers_changed(self) -> None:
        self.gpus.watched(self.services.watched)

    def _check_stalls(self, now: float) -> None:
        """The run's step on the stall watch; it asks for the logs to be read first before it calls
        a stall (the steps a component wrote while we were paused or busy are in its log)."""
        effects = runstep.step(self._stall_view(caught_up=False), runstep.StallTick(), now, self.cfg)
        if any(isinstance(fx, runstep.CatchUp) for fx in effects):
            read_all(self.components)
            effects = runstep.step(self._stall_view(caught_up=True), runstep.StallTick(), now, self.cfg)
        self._carry_out(effects, now)

    def _stall_view(self, caught_up: bool) -> runstep.View:
        watched = runview.stall_watched(self.components)
        return runstep.View(self._seen(), awake_since=self._ticker.awake_since, wall_time=time.time(), caught_up=caught_up,
                            stall={n: runview.stall_watch(c, self.components) for n, c in watched.items()})

    # ------------------------------------------------------------------ stacks (:mod:`.stacks`)

    def _with_stacks(self, name: str, inp: lc.Input) -> lc.Input | None:
        """A stall about to be flagged waits for the component's stacks (None: not yet), then carries them."""
        c = self.components[name]
        if not isinstance(inp, lc.Stalled) or "stall" in c.life.episode or c.state != "running":
            return inp
        return self._gate().hold(name, c.attempt, inp, c.current)

    def _gate(self) -> HangGate:
        """The stall gate, made when stacks are first wanted: py-spy's side (:mod:`.stacks`) is no start-up import."""
        if self._hang is None:
            from .stacks import HangGate

            self._hang = HangGate(self.paths.stacks, self._rejudge_stalls)
        return self._hang

    def _rejudge_stalls(self) -> None:
        if not self.end.stopping:
            self._check_stalls(self.clock.monotonic())

    async def stacks_of(self, comp: Component, why: str, native: bool = False) -> Stacks | None:
        """The stacks of ``comp``'s current attempt (None: it has no process now)."""
        att = comp.current
        if att is None:
            return None
        return await self._gate().take(comp.name, att.attempt, att.members(), why=why, native=native)

    def _check_dependencies(self, now: float) -> None:
        """dependency_down: consumers failing to reach a dependency that is down. The run's step says
        whether to restart the dependency (not its victims), or to stop the consumers if it stays down
        past the budget."""
        consumers = runview.consumers(self.components, self.state["components"])
        deps = self._memory
        down_since = deps.tracker.down_since()
        view = runstep.View(self._seen(), consumers=consumers, flagged=frozenset(deps.flagged),
                            down_since=down_since, down_for={d: deps.tracker.down_for(d) or 0.0 for d in down_since})
        self._step(runstep.DependencyTick(), view, now)

    # ------------------------------------------------------------------ GPUs (:mod:`.gpusampling`)

    async def wait_gpu_release(self, comp: Component, prev: dict[int, float | None]) -> None:
        """Before a new attempt: the previous attempt's GPU memory released (:mod:`.gpurelease`)."""
        if not comp.cfg.gpus or self.gpus.sampler is None:
            return
        from ..gpu.release import wait_gpu_release

        g = self.gpus
        await wait_gpu_release(comp.name, list(comp.cfg.gpus), g.sampler, prev=prev, run_pids=partial(owners, self.components),
                               run_dir=str(self.paths.root), timeout=g.release_timeout, clock=self.clock,
                               stop_wanted=lambda: comp.life.want == "stop", emit=self.emit, proc_lookup=g.proc_lookup)

    # ------------------------------------------------------------------ commands and clients

    def command(self, cmd: str, name: str | None = None, by: str = "user", client: str | None = None,
                **args: Any) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        from .commands import run_command

        return run_command(self, cmd, name, by=by, client=client, **args)

    def redact_lines(self, lines: list[str]) -> list[str]:
        return self.redactor.redact_lines(lines)

    @property
    def ending(self) -> bool:
        return self.end.ended

    # ------------------------------------------------------------------ what the control server reads (server.RunView)

    def rings(self) -> dict[str, LogRing]:
        return {n: c.ring for n, c in self.components.items()}

    @property
    def journal_seq(self) -> int:
        return self.journal.last_seq if self.journal else 0

    def hello(self) -> dict[str, Any]:
        # ``ending``: the run decided to end (it may still be stopping): `up` tells the user instead of
        # claiming a run it "supervises in the background" that ended as it started.
        return {"pid": os.getpid(), "host": self.state.get("run", {}).get("host") or socket.gethostname(),
                "name": self.cfg.name, "run_dir": str(self.paths.root), "config": self.cfg.source, "rlsup": VERSION,
                "ended": False, "ending": self.ending, "journal": journal_id(self.paths.events)}

    def log_pages(self, name: str) -> tuple[LogPages, Position] | None:
        c = self.components.get(name)
        return None if c is None else (c.log_pages(), c.position())
