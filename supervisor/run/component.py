"""One component's driver: carries out what :func:`~rlsup.supervisor.rules.lifecycle.step` decides.

The component holds its :class:`~rlsup.supervisor.rules.lifecycle.Life` and nothing else decides for it:
:meth:`Component.handle` feeds an input to the pure transition function and performs the effects
(spawn through a monitor, signal a tree, start a timer or a probe, emit an event). It sees the
run only through the narrow :class:`Context` (emit, clock, monitors, GPU release, "I changed"),
so it does not import the run and the run's other parts do not import it back.

It also owns its output path: the log file its monitor writes is followed from a recorded
position (:class:`~rlsup.supervisor.rundir.logs.LogFollower`), normalised, scanned for progress,
readiness and ``rlsup-flag:`` lines, and kept in a ring for clients and diagnosis.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal as signal_mod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..config import placement as slurm_placement
from ..config.model import Component as ComponentCfg
from ..config.model import Config
from ..diagnosis import engines
from ..monitor.process import (
    ENV_ATTEMPT,
    ENV_COMPONENT,
    ENV_RUN_DIR,
    AttemptProcesses,
    StartError,
    find_marked,
    handles_signal,
    kill_if_same,
    pid_alive,
    proc_state,
    start_time,
)
from ..monitor.shim import exit_fields
from ..records import events as ev
from ..records.clock import Clock
from ..records.diagnosis import Diagnosis
from ..records.phrases import describe_exit, fmt_duration
from ..records.progress import ProgressMatcher, ProgressTracker
from ..rules import lifecycle as lc
from ..rundir.attemptlog import lines_of
from ..rundir.layout import RunPaths
from ..rundir.logs import LineNormaliser, LogFollower, LogRing, Position, RingBudget
from ..slurm.launcher import SlurmLauncher
from . import probes
from .health import stuck_reason
from .tracking import Tracking

if TYPE_CHECKING:
    from ..diagnosis.stacks import Stacks
    from ..rundir.logpages import LogPages

READ_PIECE = 1 << 20  # bytes read and handled at a time: a piece stays in the CPU's cache (4 MiB at once cost more)
FLAG_LINE = re.compile(r"^rlsup-flag: (?P<type>[a-z][a-z0-9_]{0,40}): (?P<message>.+)$", re.MULTILINE)


class Context(Protocol):
    """What a component needs of its run."""

    cfg: Config
    paths: RunPaths
    clock: Clock
    tracking: Tracking  # the monitors, the cgroup, the open-file limit
    line_listeners: list[Callable[[Component], None]]  # told of each component's new lines

    def emit(self, event: ev.Event) -> dict[str, Any]: ...

    def changed(self, comp: Component) -> None: ...

    def progress_dirty(self, comp: Component) -> None: ...

    def watch_monitor(self, comp: Component, attempt: AttemptProcesses) -> None: ...

    def unwatch_monitor(self, attempt: AttemptProcesses) -> None: ...

    async def wait_gpu_release(self, comp: Component, prev: dict[int, float | None]) -> None: ...

    def exit_hold(self, comp: Component, exit_code: int | None, signal: str | None) -> float: ...

    def partner_up(self, comp: Component) -> str | None: ...

    async def stacks_of(self, comp: Component, why: str, native: bool = False) -> Stacks | None: ...


class Component:
    def __init__(self, name: str, cfg: ComponentCfg, ctx: Context, *, budget: RingBudget | None = None,
                 life: lc.Life | None = None, log_position: Position | None = None):
        self.name = name
        self.cfg = cfg
        self.ctx = ctx
        self.rules = lc.Rules.of(name, cfg)
        self.life = life or lc.Life(name)
        self.logs_cfg = logs_cfg = ctx.cfg.logs_for(name)
        start = log_position or Position()
        self.ring = LogRing(logs_cfg.ring_lines, budget, first_seq=start.seq)
        self.norm = LineNormaliser(logs_cfg.line_cap)
        path = ctx.paths.log(name)
        recorded = start.ino is not None
        if not recorded:  # no recorded position: what is in the log already belongs to earlier runs
            with contextlib.suppress(OSError):
                st = os.stat(path)
                start = Position(st.st_ino, st.st_size, start.seq)
        self.follower = LogFollower(path, logs_cfg.backups, start if start.ino is not None else None)
        if recorded:
            self._backfill(start)
        p = cfg.progress
        self.matcher = ProgressMatcher(p.pattern, p.preset) if p else ProgressMatcher()
        self.progress = ProgressTracker(total=p.total if p else None)
        self._ready_log = re.compile(cfg.ready.log, re.MULTILINE) if cfg.ready and cfg.ready.log else None
        self._ready_seen = asyncio.Event()
        self.current: AttemptProcesses | None = None  # the attempt whose process may be alive
        # its command had no handler for the checkpoint signal a preemption sent it (its default action ended it)
        self.unhandled_checkpoint_signal = False
        self._probes: list[asyncio.Task[None]] = []
        self._cleanups: set[asyncio.Task[None]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timers: list[asyncio.TimerHandle] = []
        self._progress_dirty = False
        self.prev_pids: dict[int, float | None] = {}  # the previous attempt's processes and start times (GPU hygiene)
        self.unended: dict[int, float | None] = {}  # processes a cleanup could not end (pid -> start time)
        self.watch_info: dict[str, dict[str, Any]] = {}  # watch path -> {step, mtime}
        self.checkpoint_info: dict[str, Any] | None = None
        self.flags_this_attempt: set[str] = set()
        self.moved = False
        # Whether the last read reached the log's end: the lines of the next read were written since, so their
        # steps carry its time; until then (a supervisor taking over, a read that left more waiting) they are a
        # backlog written at times unknown (ProgressTracker.observe_all).
        self._caught_up = False
        self.log_error: str | None = None
        # The seq of the first line of the latest attempt's output: what is before it in the ring is an
        # earlier attempt's (a verdict about this attempt never reads it). None: no attempt yet.
        self.output_from: int | None = None
        self.launcher = SlurmLauncher.for_run(ctx.cfg)  # the launcher seam: None = a process of this machine
        self._ray_cfg = cfg.probe.ray if cfg.probe else None
        self.ray: RayTracker | None = None
        if self._ray_cfg:
            from .rayprobe import RayTracker  # only with a Ray probe (it imports http.client and urllib)

            self.ray = RayTracker(self._ray_cfg.url)
        # A vLLM server: watched for its engine core's death, which its API server may outlive (diagnosis.engines)
        cmd = cfg.command if isinstance(cfg.command, str) else " ".join(cfg.command)
        self.vllm = engines.engine_of(cmd) == "vllm"
        self.core_died: str | None = None  # the line in which this attempt said its engine core died
        self._pages: LogPages | None = None

    # ------------------------------------------------------------------ the one entry point

    @property
    def state(self) -> str:
        return self.life.state

    @property
    def attempt(self) -> int:
        return self.life.attempt

    def handle(self, inp: lc.Input) -> None:
        """Feed one input to the lifecycle and carry out what it decides."""
        before = self.life.state
        self.life, effects = lc.step(self.life, inp, self.ctx.clock.monotonic(), self.rules)
        seqs: dict[str, int] = {}  # kind -> seq of the events this step emitted (what causes point at)
        for e in effects:
            self._perform(e, seqs)
        if seqs:
            self.life = lc.fill_seqs(self.life, seqs)
        if self.life.state != before or effects:
            if self.life.state != "running" and before == "running":
                self.progress_changed()  # rate and ETA are for running components only
            self.ctx.changed(self)

    def _perform(self, e: lc.Effect, seqs: dict[str, int]) -> None:
        if isinstance(e, lc.Emit):
            self._emit(e.event, seqs)
        elif isinstance(e, lc.Spawn):
            self._task(self._spawn(e))
        elif isinstance(e, lc.Terminate):
            self._terminate(e.signal, e.timeout)
        elif isinstance(e, lc.Signal) and self.current is not None:
            self._ask_checkpoint(self.current, getattr(signal_mod, e.signal))
        elif isinstance(e, lc.Probe):
            self._probes.append(self._task(self._readiness() if e.kind == "ready" else self._liveness()))
        elif isinstance(e, lc.StopProbes):
            self._stop_probes()
        elif isinstance(e, lc.SetTimer):
            inp: lc.Input = lc.BackoffElapsed(e.timer) if e.kind == "backoff" else lc.Healthy(e.timer)
            self._later(e.delay, self.handle, inp)
        elif isinstance(e, lc.Cleanup):
            self._clean_up_current()

    def _ask_checkpoint(self, att: AttemptProcesses, signum: int) -> None:
        """A preemption's request to checkpoint; whether the command could hear it is noted first (a Slurm step's
        pid here is srun's: not noted)."""
        if att.launcher is None:
            self.unhandled_checkpoint_signal = handles_signal(att.pid, signum) is False
        att.signal(signum)

    def _emit(self, event: ev.Event, seqs: dict[str, int]) -> None:
        """Emit ``event`` with its cause pointing at the seq of the event it names (``of``), and note its own seq."""
        event = lc.fill_event(event, seqs)
        out = self.ctx.emit(event)
        if isinstance(out, dict) and isinstance(out.get("seq"), int):
            seqs[event.kind] = out["seq"]

    def _stop_probes(self) -> None:
        for t in self._probes:
            t.cancel()
        self._probes.clear()

    def _clean_up_current(self) -> None:
        """The current attempt has exited: clean up after it in the background (it is no longer current)."""
        if self.current is not None:
            att, self.current = self.current, None
            t = asyncio.ensure_future(self._cleanup(att))
            self._cleanups.add(t)
            t.add_done_callback(self._cleanups.discard)

    def _later(self, delay: float, fn: Any, *args: Any) -> None:
        """A timer this component cancels when it closes (fired ones are forgotten: a week of restarts
        must not pile up handles)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._timers = [t for t in self._timers if not t.cancelled() and t.when() > now]
        self._timers.append(loop.call_later(delay, fn, *args))

    def _task(self, coro: Any) -> asyncio.Task[Any]:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._task_done)
        return t

    def _task_done(self, t: asyncio.Task[Any]) -> None:
        self._tasks.discard(t)
        if not t.cancelled() and t.exception() is not None:
            raise t.exception()  # type: ignore[misc]  # reaches the loop's handler: the run ends loudly

    # ------------------------------------------------------------------ spawning

    def _env(self, attempt: int) -> dict[str, str]:
        run = self.ctx.cfg
        env = {**os.environ, **run.file_env, **run.env}
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.update(self.cfg.env)
        if self.cfg.gpus is not None:
            # NVML numbers GPUs in PCI bus order; make CUDA agree so `gpus` means one thing.
            env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in self.cfg.gpus)
        # RLSUP_NODES_C, RLSUP_ADDRS_C, RLSUP_HEAD_C, RLSUP_NNODES_C
        env.update(slurm_placement.variables(run.placement, slurm_placement.node_addresses(os.environ)))
        env.update({ENV_RUN_DIR: str(self.ctx.paths.root), ENV_COMPONENT: self.name, ENV_ATTEMPT: str(attempt),
                    "RLSUP_NAME": run.name})
        return env

    async def _spawn(self, e: lc.Spawn) -> None:
        await self.await_cleanups()  # the previous attempt's tree is gone before anything else
        if self.prev_pids:
            await self.ctx.wait_gpu_release(self, self.prev_pids)
        from ..rundir.resumeplan import plan_resume

        # Chosen now that nothing of ours is writing.
        plan = plan_resume(self.name, self.cfg, e.resume_step, self.ctx.paths.root, self.ctx.emit,
                           clean=self.ctx.partner_up(self) is None)
        argv = list(self.cfg.argv()) + list(plan.get("args") or [])
        launch = self.launcher.argv(self.name, e.attempt, argv) if self.launcher else argv
        cgroups = self.ctx.tracking.cgroups
        cgroup = cgroups.for_attempt(self.name, e.attempt) if cgroups is not None else None
        spec = {
            "protocol": 1, "component": self.name, "attempt": e.attempt, "run_dir": str(self.ctx.paths.root),
            "argv": launch, "env": self._env(e.attempt), "cwd": self.cfg.cwd,
            "log": {"path": str(self.ctx.paths.log(self.name)), "max_bytes": self.logs_cfg.max_bytes,
                    "backups": self.logs_cfg.backups},
            "record": str(self.ctx.paths.monitor_record(self.name, e.attempt)), "cgroup": cgroup,
            "nofile": self.ctx.tracking.nofile, "rest_s": self.ctx.tracking.monitor_rest_s}
        self.flags_this_attempt.clear()
        self._ready_seen.clear()
        # Where this attempt's output begins: everything the previous attempt's monitor wrote is read
        # (it is gone: await_cleanups), so the next line in the log is the new attempt's first.
        self.read_output(final=True)
        self.core_died = None
        start = self.position()
        # The new attempt's progress from here: its lines may be read while its start is awaited (it may print
        # its steps and exit before the monitor's reply reaches a loaded supervisor).
        self.progress.reset_to(plan.get("step"), self.ctx.clock.monotonic())
        try:
            reply = await self.ctx.tracking.monitors.start(spec)
        except StartError as err:
            self.handle(self._spawn_failed(argv, err.info))
            return
        att = AttemptProcesses(self.name, e.attempt, int(reply["pid"]), int(reply["shim_pid"]),
                      self.ctx.paths.monitor_record(self.name, e.attempt), cgroup=cgroup,
                      started=float(reply["started"]), started_mono=float(reply["started_mono"]))
        att.launcher = self.launcher
        slurm = None
        if self.launcher is not None:  # the step's id for the journal, once Slurm created it (bounded wait)
            sid = await asyncio.to_thread(self.launcher.wait_step, self.name, e.attempt, att.read_record)
            slurm = {"nodes": self.launcher.nodes(self.name), "step_id": sid}
        self.current = att
        self.output_from = start.seq
        self.ctx.watch_monitor(self, att)
        for w in reply.get("warnings") or []:
            self.ctx.emit(ev.FlagRaised(self.name, type="tracking", message=w, evidence=[],
                                        action="processes are tracked through the monitor instead"))
        resume = lc.Resume(plan["step"], plan["checkpoint"]) if plan.get("step") is not None else None
        self.handle(lc.Spawned(att.pid, tuple(argv), resume=resume, monitor_pid=att.monitor_pid,
                               checkpoints_rejected=tuple(plan.get("rejected") or ()) or None,
                               started_at=att.started_mono, log_seq=start.seq, log_offset=start.offset,
                               log_ino=start.ino, slurm=slurm, config_hash=self.cfg.fingerprint(self.ctx.cfg.env)))
        self._watch_ray(att)

    def _spawn_failed(self, argv: list[str], info: dict[str, Any]) -> lc.SpawnFailed:
        kind = info.get("type")
        code = info.get("errno")
        cwd = self.cfg.cwd
        if kind == "FileNotFoundError" and cwd and (info.get("filename") == cwd or not os.path.isdir(cwd)):
            what, det = f"working directory {cwd!r} does not exist", True
        elif kind in ("FileNotFoundError", "NotADirectoryError") or code == 2:
            path = self._env(0).get("PATH", "")
            what, det = f"command not found: {argv[0]!r} (not on PATH: {path})", True
        elif kind == "PermissionError" or code == 13:
            what, det = f"permission denied running {argv[0]!r}", True
        else:
            what, det = f"cannot start {argv[0]!r}: {info.get('error')}", False
        diag = {"category": "unknown", "summary": what, "exception": f"{kind}: {info.get('error')}",
                "location": None, "step": None, "evidence": [what]}
        return lc.SpawnFailed(what, det, tuple(argv), Diagnosis.from_dict(diag))

    # ------------------------------------------------------------------ probes

    async def _readiness(self) -> None:
        r = self.cfg.ready
        assert r is not None
        clock = self.ctx.clock
        deadline = clock.monotonic() + r.timeout
        kind, target = r.kind(), r.target()
        if kind == "file" and not os.path.isabs(target):
            target = os.path.join(self.cfg.cwd or os.getcwd(), target)
        detail = ""
        while True:
            if kind == "log":
                ok = self._ready_seen.is_set()
            else:
                ok, detail = await probes.check(kind, target, min(5.0, r.timeout))
                # A Slurm step's processes are Slurm's (under slurmstepd, maybe on this node): not ours to match.
                if ok and kind in ("http", "tcp") and self.launcher is None and not self._port_is_ours(target):
                    ok, detail = False, f"{target} answers, but not from a process of {self.name}"
            if ok:
                break
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                reason = (f"not ready within {r.timeout:g}s ({kind} {r.target()}"
                          + (f"; last: {detail})" if detail else ")"))
                self.handle(lc.ReadyTimedOut(reason))
                return
            if kind == "log":
                with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                    await asyncio.wait_for(self._ready_seen.wait(), remaining)
            else:
                await asyncio.sleep(min(r.interval, remaining))
        self.handle(lc.Ready())

    def _port_is_ours(self, target: str) -> bool:
        """Whether the process listening on a probe's port belongs to this attempt. A busy port's
        holder must not make a component look ready (`--skip-checks` with a port in use)."""
        held = probes.held_by(target, self.current.members()) if self.current is not None else False
        return True if held is None else held  # None: cannot tell (no /proc access): trust the answer

    async def _liveness(self) -> None:
        from ..diagnosis.stacks import short_form

        a = self.cfg.alive
        assert a is not None
        fails = 0
        while True:
            await asyncio.sleep(a.interval)
            ok, detail = await probes.check(a.kind(), a.target(), a.timeout)
            fails = 0 if ok else fails + 1
            if fails >= a.failures:
                # About to be ended for hanging: where it hangs, first (the probe task waits; the loop does not).
                s = await self.ctx.stacks_of(self, "liveness probe failed")
                self.handle(lc.LivenessFailed(f"liveness probe failed {fails} times ({detail})",
                                              (detail, *(short_form(s) if s is not None else ()))))
                return

    # ------------------------------------------------------------------ the Ray probe

    def _watch_ray(self, att: AttemptProcesses) -> None:
        if self.ray is not None:
            self.ray.new_attempt()
            self._task(self._ray_poll(att))

    async def _ray_look(self) -> None:
        """One answer of Ray's state API: deaths first seen become flags at once."""
        w, cfg = self.ray, self._ray_cfg
        assert w is not None and cfg is not None
        from . import rayprobe

        token = rayprobe.auth_token(self._env(self.attempt), cfg.token_file)
        try:
            nodes, actors = await asyncio.to_thread(rayprobe.read_state, cfg.url, token, cfg.timeout)
        except (OSError, ValueError) as e:
            # The head not up yet, or gone, is not news (the components' exits say which); an answer that
            # refuses the token or is not Ray's API is a probe that will never see anything: say so once.
            was, w.error = w.error, str(e)
            if rayprobe.misconfigured(e) and was != w.error:
                self.ctx.emit(ev.FlagRaised(self.name, type="ray_probe_failing", message=str(e), evidence=[str(e)],
                                            action="the Ray probe sees nothing until this is fixed (probe.ray)"))
            return
        for kind, message, evidence, action in w.flags(w.observe(nodes, actors)):
            self.ctx.emit(ev.FlagRaised(self.name, type=kind, message=message, evidence=evidence, action=action))

    async def _ray_poll(self, att: AttemptProcesses) -> None:
        assert self._ray_cfg is not None
        while self.current is att and att.exit is None:
            await self._ray_look()
            await asyncio.sleep(self._ray_cfg.interval)

    async def _exited_after_ray(self, ex: dict[str, Any], diag: dict[str, Any]) -> None:
        from ..diagnosis.ray_state import refine

        cfg = self._ray_cfg
        assert self.ray is not None and cfg is not None
        with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
            await asyncio.wait_for(self._ray_look(), min(cfg.timeout, 5.0) * 2 + 1)
        self._exited(ex, refine(diag, self.ray.attempt, self.ray.nodes, cfg.url))

    # ------------------------------------------------------------------ stopping and exits

    def _terminate(self, sig_name: str, timeout: float) -> None:
        att = self.current
        if att is None:
            return
        att.signal(getattr(signal_mod, sig_name))
        self._later(timeout, self._kill_if_alive, att)

    def _kill_if_alive(self, att: AttemptProcesses) -> None:
        if att.exit is None and self.current is att:
            att.signal(signal_mod.SIGKILL)

    def kill_now(self) -> None:
        """A second Ctrl-C: SIGKILL what is left at once."""
        if self.current is not None:
            self.current.signal(signal_mod.SIGKILL)

    def monitor_changed(self, att: AttemptProcesses, gone: bool = False) -> None:
        """The attempt's record changed (or its monitor is gone): an exit, or trouble writing the log."""
        if att.exit is not None:
            return
        rec = att.read_record()
        if rec is not None:
            self._log_trouble(rec)
        if rec is not None and rec.get("status") == "exited":
            self._take_exit(att, rec)
        elif gone:
            att.monitor_gone = True
            self._take_exit(att, {"exit_code": None, "signal": None, "ended_mono": None, "monitor_died": True})

    def check_health(self, now: float) -> None:
        """The run's health sweep (:mod:`.health`): the current attempt's monitor and command as the
        kernel sees them."""
        att = self.current
        if att is None or att.exit is not None or att.launcher is not None:
            return
        self._check_monitor_state(att, now)
        self._check_unrecorded_exit(att, now)

    def _check_monitor_state(self, att: AttemptProcesses, now: float) -> None:
        """A monitor that is stopped (SIGSTOP, a debugger) or wedged (in uninterruptible sleep for
        :data:`health.WEDGED_S`) reads nothing: the component blocks once the pipe is full. Flagged
        while it lasts (``monitor_stuck``), with what to do."""
        state, _ = proc_state(att.monitor_pid)
        att.monitor_d_since = (att.monitor_d_since or now) if state == "D" else None
        why = stuck_reason(state, now - att.monitor_d_since if att.monitor_d_since is not None else 0.0)
        if why == att.stuck:
            return
        was, att.stuck = att.stuck, why
        if why is not None:
            pid = att.monitor_pid
            self.ctx.emit(ev.FlagRaised(
                self.name, type="monitor_stuck",
                message=f"the monitor of {self.name} (pid {pid}) {why}: {self.name}'s output is not read, so it "
                        f"blocks as soon as the pipe to its monitor is full, and its exit would not be recorded",
                evidence=[f"/proc/{pid}/stat: state {state}"],
                action=f"`kill -CONT {pid}` if it was stopped by hand; `rlsup restart {self.name}` or `rlsup down` "
                       "end it (rlsup sends it SIGCONT first)"))
        elif was is not None:
            self.ctx.emit(ev.FlagCleared(self.name, type="monitor_stuck",
                                         message=f"the monitor of {self.name} (pid {att.monitor_pid}) runs again"))

    def _check_unrecorded_exit(self, att: AttemptProcesses, now: float) -> None:
        """The command has ended but its record does not say so: its monitor cannot write the record (a
        read-only or failing run dir) or is stopped. Seen on two looks in a row, the exit is taken from
        the kernel, which keeps the status of a child its monitor has not reaped (a zombie); a command
        gone without one (reaped, the record not written) has ended with a status no one knows."""
        state, status = proc_state(att.pid)
        if state not in ("Z", "X", ""):
            att.unrecorded_since = None
            return
        if att.unrecorded_since is None:
            att.unrecorded_since = now
            return
        rec = att.read_record()
        if rec is not None and rec.get("status") == "exited":
            self.monitor_changed(att)
            return
        why = "its monitor could not record it (the run dir cannot be written, or the monitor is stopped)"
        known = exit_fields(status) if status is not None else {"exit_code": None, "signal": None}
        how = "read from the kernel" if status is not None else "unknown"
        self._take_exit(att, {**known, "ended_mono": None, "unrecorded": f"exit status {how}: {why}"})

    def _take_exit(self, att: AttemptProcesses, ex: dict[str, Any]) -> None:
        """The attempt's exit, judged: asked for, a failure to diagnose, or the monitor's death."""
        att.exit = ex
        if att.stuck is not None:  # its monitor is told to finish now (SIGCONT first): the flag is over
            att.stuck = None
            self.ctx.emit(ev.FlagCleared(self.name, type="monitor_stuck",
                                         message=f"attempt {att.attempt} ended; its monitor is told to finish"))
        # Everything the monitor wrote before it recorded the exit, however far behind we are (a flood):
        # the step, the progress and the diagnosis must be those of the whole output.
        self.read_output(final=True)
        if ex.get("monitor_died"):
            self._exited(ex, {"category": "unknown", "step": self.progress.step, "location": None, "exception": None,
                              "summary": f"its monitor (pid {att.monitor_pid}) died; the exit status is unknown",
                              "evidence": [f"monitor pid {att.monitor_pid} is gone and left no exit record"]})
        elif not self._asked() and (hold := self.ctx.exit_hold(self, ex.get("exit_code"), ex.get("signal"))):
            self._later(hold, self._judge_exit, att, ex)  # a stop of the run that comes meanwhile makes it a stop
        else:
            self._judge_exit(att, ex)

    def _asked(self) -> bool:
        """A stop or restart we signalled for (not merely wanted: an exit before the run's ordered stop reached
        it is diagnosed as it is, and is still a stop)."""
        life = self.life
        return life.forced is None and ((life.want == "stop" and life.state == "stopping") or life.then_start)

    def _judge_exit(self, att: AttemptProcesses, ex: dict[str, Any]) -> None:
        if not self._asked():
            self._diagnose_failure(att, ex)
            return
        # An exit we asked for is not a failure to diagnose: who asked, and how it ended.
        how = describe_exit(ex.get("exit_code"), ex.get("signal"))
        by = self.life.stop_by or self.life.restart_by or "user"
        self._exited(ex, {"category": "none", "summary": f"stopped by {by} ({how})", "exception": None,
                          "location": None, "step": self.progress.step, "evidence": []})

    def _log_trouble(self, rec: dict[str, Any]) -> None:
        """The monitor's record says whether it can write the log: raise ``disk_full``, or clear it once a
        write really succeeded."""
        err = rec.get("log_error")
        if err and err != self.log_error:
            self.log_error = err
            self.ctx.emit(ev.FlagRaised(
                self.name, type="disk_full", message=f"cannot write {self.ctx.paths.log(self.name)}: {err}",
                evidence=[err], action="still supervising; the monitor drains the output and counts what it "
                                       "drops (a marker line says how much once the disk has room)"))
        elif not err and self.log_error and rec.get("log_ok", True):  # a write really succeeded
            self.log_error = None
            self.ctx.emit(ev.FlagCleared(self.name, type="disk_full",
                                         message=f"log writable again; {rec.get('lost_bytes', 0)} bytes were lost"))

    def _diagnose_failure(self, att: AttemptProcesses, ex: dict[str, Any]) -> None:
        """An exit nobody asked for: diagnosed from its exit and the attempt's own output only (never lines an
        earlier attempt printed; nothing printed: its exit and the host's evidence alone), refined by its launcher."""
        from ..diagnosis import diagnose, read_host_evidence

        code, sig = ex.get("exit_code"), ex.get("signal")
        host = read_host_evidence(att.pid) if sig == "SIGKILL" and self.life.forced is None else None
        # An attempt rlsup ended itself (readiness timeout, failed liveness, stall restart): the cause is what its
        # log names, with rlsup's reason, never the stop signal's "killed ... OOM killer" reading.
        diag = diagnose(self.attempt_tail(1000), exit_code=code, signal=sig, step=self.progress.step, pid=att.pid,
                        host=host, stopped_by=self.life.forced, log_error=self.log_error).to_dict()
        if self.launcher is not None:
            diag = self.launcher.refine(diag, self.attempt_tail(400))
            if self.launcher.needs_job_nodes(diag):
                # squeue, off the event loop (it may take seconds): the exit is judged when it answers
                self._task(self._exited_after_job_nodes(att, ex, diag))
                return
            ex, diag = self.launcher.ended(self, att, ex, diag)
        self._judge_failure(ex, diag)

    def _judge_failure(self, ex: dict[str, Any], diag: dict[str, Any]) -> None:
        """The exit of an attempt nobody asked to stop, once diagnosed (and refined by the launcher)."""
        if self.ray is not None and not (self.life.forced is not None and diag.get("category") == "killed"):
            # Ray's state API once more before the exit is judged: the actor whose loss ended the
            # driver was declared dead a moment ago (bounded: the exit waits seconds at most).
            self._task(self._exited_after_ray(ex, diag))
            return
        self._exited(ex, diag)

    async def _exited_after_job_nodes(self, att: AttemptProcesses, ex: dict[str, Any], diag: dict[str, Any]) -> None:
        assert self.launcher is not None
        nodes = await asyncio.to_thread(self.launcher.job_nodes)
        ex, diag = self.launcher.ended(self, att, ex, diag, job_nodes=nodes)
        self._judge_failure(ex, diag)

    def _exited(self, ex: dict[str, Any], diag: dict[str, Any]) -> None:
        if ex.get("unrecorded"):  # how rlsup knows (or does not know) how it ended
            diag = {**diag, "evidence": [*(diag.get("evidence") or []), ex["unrecorded"]]}
        self.flush_progress()
        ended = ex.get("ended_mono")
        self.handle(lc.Exited(ex.get("exit_code"), ex.get("signal"), Diagnosis.from_dict(diag), step=self.progress.step,
                              total=self.progress.total, at=float(ended) if isinstance(ended, int | float) else None))

    async def _cleanup(self, att: AttemptProcesses) -> None:
        """End what the attempt left behind (stop signal, SIGKILL after stop.timeout), then let its
        monitor finish and wait until it is gone."""
        left = att.members()
        if att.monitor_gone:  # its orphans re-parented to us: the markers still name them
            found = await asyncio.to_thread(find_marked, str(self.ctx.paths.root), self.name)
            left += [p.pid for p in found]
            att.members()  # note the start time of whatever came meanwhile (members() notes what it finds)
        self.prev_pids = {att.pid: None, **att.members_seen}  # the root always (it may have died at once)
        if left:
            await self._end_leftovers(att, left)
        att.finish()
        await att.wait_monitor_gone(10.0)
        # What even SIGKILL did not end (a frozen or uninterruptible process) is remembered, so that
        # the end of the run names it instead of claiming that nothing is left.
        self.unended.update({p: att.members_seen.get(p) for p in {*left, *att.members_seen} if pid_alive(p)})
        if att.monitor_alive():
            self.unended[att.monitor_pid] = None
        self.read_output()
        att.remove_cgroup()
        self.ctx.unwatch_monitor(att)
        att.close()

    async def _end_leftovers(self, att: AttemptProcesses, left: list[int]) -> None:
        """The stop signal to what the attempt left running (each process once), SIGKILL after stop.timeout."""
        # Identities now, before the wait of up to stop.timeout: by its end a pid may be another process.
        born = {p: start_time(p) for p in left}
        sig = getattr(signal_mod, self.cfg.stop.signal)
        if sig not in att.signalled:  # not stopped by us (it crashed): what is left gets the stop signal
            att.signal(sig)
        sent = att.signalled.setdefault(sig, set())
        for p in left:  # each process once: a second SIGTERM or SIGINT means "force" to many programs
            if p not in sent:
                with contextlib.suppress(OSError):
                    os.kill(p, sig)
                sent.add(p)
        clock = self.ctx.clock
        deadline = clock.monotonic() + self.cfg.stop.timeout
        while clock.monotonic() < deadline and any(pid_alive(p) for p in left + att.members()):
            await asyncio.sleep(0.05)
        stubborn = sorted({p for p in left + att.members() if pid_alive(p)})
        att.signal(signal_mod.SIGKILL)
        for p in left:
            kill_if_same(p, born[p], signal_mod.SIGKILL)
        if stubborn:  # the next attempt waited stop.timeout for them: say why, and which
            self.ctx.emit(ev.LeftoversEnded(self.name, pids=stubborn, by=f"attempt {att.attempt}", action=(
                f"still running {fmt_duration(self.cfg.stop.timeout)} after the attempt's command ended and "
                f"{self.cfg.stop.signal} was sent (stop.timeout): killed with SIGKILL")))

    async def await_cleanups(self) -> None:
        while self._cleanups:
            await asyncio.gather(*list(self._cleanups), return_exceptions=True)

    @property
    def busy(self) -> bool:
        """Whether something of this component may still be alive (a process, a cleanup, a spawn)."""
        return self.current is not None or bool(self._cleanups) or self.life.spawning

    def attempt_tail(self, n: int) -> list[str]:
        """The last ``n`` lines of the latest attempt's output (none of an earlier attempt's)."""
        start = max(self.ring.next_seq - n, self.output_from if self.output_from is not None else 0)
        return self.ring.since(start)[1] if start < self.ring.next_seq else []

    def adopt(self, att: AttemptProcesses, rec: dict[str, Any], ready: bool, log_seq: int | None = None,
              config_hash: str | None = None) -> None:
        """Take over an attempt that kept running under its monitor while no supervisor was alive.
        ``log_seq``: where its output begins, as its ``started`` event recorded it (None: unknown, so
        only what this supervisor reads from now on counts as its own); ``config_hash``: what the config
        asked it to run then (None: unknown)."""
        self.output_from = log_seq if log_seq is not None else self.ring.next_seq
        att.launcher = self.launcher
        self.current = att
        self.ctx.watch_monitor(self, att)
        changed = config_hash not in (None, self.cfg.fingerprint(self.ctx.cfg.env))
        self.handle(lc.Adopted(att.pid, att.attempt, att.monitor_pid, att.started_mono, ready, changed))
        self._watch_ray(att)
        if rec.get("status") == "exited":
            self.monitor_changed(att)

    # ------------------------------------------------------------------ output

    def _backfill(self, at: Position) -> None:
        """A supervisor taking over: the lines just before the recorded position go back into the ring,
        with the sequence numbers they had, so a client that reconnects by seq misses none of them (its
        previous supervisor may have read them without having sent them)."""
        assert at.ino is not None
        data = self.follower.read_back(at.ino, at.offset, 4 << 20)
        if not data:
            return
        # (an unterminated last line was shown as a line when its attempt ended)
        lines = lines_of(data, self.logs_cfg.line_cap)[-min(self.ring.maxlen, at.seq):] if at.seq > 0 else []
        self.ring.reset(at.seq - len(lines))
        self.ring.extend(lines)

    def position(self) -> Position:
        """Where the next supervisor should start reading: the start of the line not yet complete."""
        return Position(self.follower.ino, max(0, self.follower.offset - self.norm.held_bytes), self.ring.next_seq)

    def read_output(self, *, final: bool = False, budget: int = 4 << 20) -> bool:
        """Read what the monitor wrote since last time, at most ``budget`` bytes (the rest waits for the next
        round); True if more is waiting. ``final``: all of it, and an unterminated last line as a line (the output
        has ended)."""
        while final and self.read_output(budget=budget):
            pass
        step = self.progress.step
        got, at_end = 0, False
        while got < budget:
            want = min(READ_PIECE, budget - got)
            try:
                data = self.follower.read(want)
            except OSError:  # a failing disk (EIO): nothing to read for now; the run's health sweep flags it
                break
            if data:
                self.moved = True  # the recorded log position must catch up (state.json)
                self._ingest(data)
                got += len(data)
            if len(data) < want:  # its end, for now
                at_end = True
                break
        if final:
            lines, text = self.norm.flush()
            if lines:
                self.ring.extend(lines)
                self._lines(text)
        # Its steps counted as they were read (state.json's step keeps up with its log position); the read's
        # last step makes a point of the rate when the lines were written since the read before.
        if self._caught_up and at_end and self.progress.step != step:
            self.progress.stamp(self.ctx.clock.monotonic())
        self._caught_up = at_end
        return got >= budget

    def _ingest(self, chunk: bytes) -> None:
        text, n, lines = self.norm.feed_text(chunk)
        if n:
            self.ring.add_text(text, n, lines)
            self._lines(text)
        elif self.matcher and b"\r" in chunk and (partial := self.norm.partial):
            # A progress bar redrawn with \r and no newline (tqdm): its latest state still counts.
            self._scan(partial)

    def _scan(self, text: str) -> None:
        obs = self.matcher.scan(text)
        if obs and self.progress.observe_all(obs, self.ctx.clock.monotonic()):
            self.progress_changed()

    def _lines(self, text: str) -> None:
        """New lines, in the ring already (raw: masked on the way out to a client, when someone reads them)."""
        if self.matcher:
            self._scan(text)
        if self._ready_log is not None and not self._ready_seen.is_set() and self._ready_log.search(text):
            self._ready_seen.set()
        if self.vllm and self.core_died is None and self.life.state == "running":
            self._watch_core(text)
        if "rlsup-flag: " in text:  # the regex only where it can match
            for m in FLAG_LINE.finditer(text):
                t = m.group("type")
                if t in self.flags_this_attempt:
                    continue  # a component repeating its own flag: once per attempt
                self.flags_this_attempt.add(t)
                self.ctx.emit(ev.FlagRaised(self.name, type=t, message=m.group("message").strip(),
                                            evidence=[m.group(0)], action=f"reported by {self.name} itself"))
        for fn in self.ctx.line_listeners:
            fn(self)

    def _watch_core(self, text: str) -> None:
        """A vLLM server that says its engine core died: ended as a failure if it is still running
        :data:`~..diagnosis.engines.LINGER_S` s later (its API server outlived the core: no ``alive`` probe needed)."""
        line = engines.core_died(text)
        if line is None:
            return
        self.core_died = line
        self._later(engines.LINGER_S, self._end_if_lingering, self.current, line)

    def _end_if_lingering(self, att: AttemptProcesses | None, line: str) -> None:
        if att is not None and self.current is att and self.life.state == "running":
            self.handle(lc.LivenessFailed(
                f"its engine core died and its API server was still up {engines.LINGER_S:g}s later", (line,)))

    def log_pages(self) -> LogPages:
        """Its log on disk, for clients paging older lines than the ring holds (opened at first use)."""
        if self._pages is None:
            from ..rundir.logpages import LogPages

            self._pages = LogPages(self.ctx.paths.log(self.name), self.logs_cfg.line_cap)
        return self._pages

    # ------------------------------------------------------------------ progress

    def progress_changed(self) -> None:
        if not self._progress_dirty:
            self._progress_dirty = True
            self.ctx.progress_dirty(self)

    def flush_progress(self) -> None:
        if not self._progress_dirty:
            return
        self._progress_dirty = False
        metric = self.cfg.progress.metric if self.cfg.progress else None
        mono = self.ctx.clock.monotonic()
        snap = self.progress.snapshot(mono, metric)
        last = snap.get("last_step_at")
        if isinstance(last, int | float):  # monotonic inside, wall time for people
            snap["last_step_at"] = round(self.ctx.clock.time() - (mono - last), 3)
        if self.life.state != "running":
            snap.update(rate=None, eta_s=None)
        snap.update(checkpoint=self.checkpoint_info, watch=dict(self.watch_info))
        self.ctx.emit(ev.ProgressUpdated(self.name, snap))

    def close(self) -> None:
        for t in self._timers:
            t.cancel()
        for task in list(self._tasks):
            task.cancel()
        self.follower.close()

