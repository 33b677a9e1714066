"""A deterministic run: rlsup's real decisions driven by simulated processes on a simulated clock.

What is real: the lifecycle (:func:`rules.lifecycle.step`), the run's step (:func:`rules.runstep.step`:
dependency gating, the end and its root, stalls, restart_with, dependency_down with its watch
(:class:`diagnosis.DependencyTracker`) as run/run.py keeps it), the order of a shutdown
(:class:`run.shutdown.StopOrder`), what a resumed run carries over (:func:`run.carryover.life`), the
journal's events as the supervisor writes them (``Event.to_dict``, causes filled with seqs), the state
reducer (:func:`records.state.apply`), the exit diagnosis of each attempt's own output
(:func:`diagnosis.diagnose`) and, on the run dir the world writes (events.jsonl, logs/), the run's root
cause (:func:`diagnosis.diagnose_run`) and how the run ended (:func:`rundir.archive.how_it_ended`).

What is simulated: processes (a trainer that steps while its producer and the inference server live,
and checkpoints on SIGUSR1, an orchestrator that produces, an inference server; the consumers print the
connection errors real clients print while the server has no process), their faults, the
signals they get and how they answer them, readiness, the monitors' exit records, the supervisor's own
signals (a platform's SIGTERM: a preemption, which asks the trainer to checkpoint first and waits for it
as run/preemption.py does; a Slurm requeue that signals every process at once; a person's Ctrl-C),
users' commands, and time.

Every action is one call of :meth:`World.act`; :meth:`World.settle` runs the clock until nothing is
due; the oracle (:attr:`World.truth`) records what really happened, so that the promises
(tests/promises.py, docs/lifecycle.md) can be checked after every step.
"""

from __future__ import annotations

import heapq
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlsup.supervisor.config.loader import load_config
from rlsup.supervisor.config.model import Config
from rlsup.supervisor.diagnosis import DependencyTracker, Diagnosis, diagnose
from rlsup.supervisor.records import events as ev
from rlsup.supervisor.records import state as state_mod
from rlsup.supervisor.rules import detectors, runstep
from rlsup.supervisor.rules import lifecycle as lc
from rlsup.supervisor.rules.detectors import Seen
from rlsup.supervisor.run import carryover, commands
from rlsup.supervisor.run.shutdown import StopOrder

WALL0 = 1_790_000_000.0  # the simulated wall clock at monotonic 0
TICK_S = 1.0
CKPT_EVERY = 10
CKPT_WRITE_S = 0.5  # how long the trainer takes to write the checkpoint SIGUSR1 asks for
POLL_S = 0.2  # run/preemption.py's look at the checkpoints while it waits
DEPENDENCY_BUDGET_S = 120  # the config's dependency_budget: short enough for a schedule to outlast it
ATTEMPT_TAIL = 200  # runview.consumers: the lines of the latest attempt dependency_down reads

# What a consumer prints on each try while the inference server has no process (nothing listens on its port).
REFUSED = {
    "orchestrator": "requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=8000): Max retries "
                    "exceeded with url: /v1/chat/completions (Caused by NewConnectionError('<urllib3.connection."
                    "HTTPConnection object at 0x7f3a2c1d5e50>: Failed to establish a new connection: [Errno 111] "
                    "Connection refused'))",
    "trainer": "ConnectionRefusedError: [Errno 111] Connect call failed ('127.0.0.1', 8000) while updating the "
               "inference server's weights; retrying in 1s",
}

# What each simulated program prints for a fault (its log's last lines; the real exit diagnosis reads them).
FAULT_LINES = {
    "crash": ["Traceback (most recent call last):", '  File "/w/train.py", line 88, in step',
              "    loss = model(batch)", "ValueError: injected failure at step {step}"],
    "oom": ["Allocating 61.5 GiB host buffer for step {step} rollout cache"],
    "disk_full": ["Traceback (most recent call last):", '  File "/w/orchestrator.py", line 51, in write_rollouts',
                  "    f.write(data)", "OSError: [Errno 28] No space left on device"],
    "exit0": ["Stopping early at step {step}"],
    "die": ["ERROR Engine core proc EngineCore_0 died unexpectedly, shutting down client."],
}


@dataclass
class Proc:
    """One attempt's process tree, as far as rlsup can tell."""

    comp: str
    attempt: int
    pid: int
    step: int = 0
    hung: bool = False
    term: str = "exit0"  # what it does on its stop signal: exit0 | exit143 | ignore
    faults: dict[str, int] = field(default_factory=dict)  # kind -> step (or second, for "die")
    started: float = 0.0
    platform_signalled: bool = False  # the platform (not rlsup) sent it SIGTERM
    exiting: bool = False
    checkpointing: bool = False  # SIGUSR1 came: it writes a checkpoint of its step


@dataclass
class Truth:
    """What really happened: the oracle the promises are checked against."""

    injected: list[tuple[str, str, int, float]] = field(default_factory=list)  # (component, fault, attempt, when)
    platform_exits: set[tuple[str, int]] = field(default_factory=set)  # (component, attempt) ended by the platform
    user_stops: list[tuple[str, float]] = field(default_factory=list)
    run_stops: list[float] = field(default_factory=list)  # a down, a signal, a requeue
    resumes: int = 0
    # A preemption asked the trainer to checkpoint while it could (alive, not hung): the step it was at, and
    # the step of the checkpoint it then wrote (None: it did not get to write it).
    preempt_step: int | None = None
    preempt_written: int | None = None


CONFIG = """
name: sim
dependency_budget: {budget}
components:
{prep}  inference:
    command: sim-inference
    ready: {{http: "http://127.0.0.1:1/health"}}
    alive: {{http: "http://127.0.0.1:1/health", interval: 5, failures: 3}}
    restart: {{policy: on-failure, backoff: {{initial: 1, factor: 2, max: 8}}, max_restarts: {max_restarts}, window: 300}}
    stop: {{signal: SIGTERM, timeout: 5}}
  orchestrator:
    command: sim-orchestrator
    depends_on: {orch_deps}
    progress: {{pattern: 'Step (?P<step>\\d+)', total: {total}, stall_after: 20}}
    restart: {{policy: on-failure, backoff: {{initial: 1, factor: 2, max: 8}}, max_restarts: {max_restarts}, window: 300}}
    stop: {{signal: SIGTERM, timeout: 5}}
  trainer:
    command: sim-trainer
    depends_on: {trainer_deps}
    progress: {{pattern: 'Step (?P<step>\\d+)', total: {total}, stall_after: 20}}
    restart: {{policy: on-failure, backoff: {{initial: 1, factor: 2, max: 8}}, max_restarts: {max_restarts}, window: 300}}
    stop: {{signal: SIGTERM, timeout: 5}}
    resume: {{checkpoints: /nonexistent/sim-checkpoints, layout: prime-rl}}
    preempt: {{signal: SIGUSR1, wait: 8}}
    exit_on_end: true
"""

PREP = """  prep:
    command: sim-prep
    restart: {{policy: never}}
"""


@dataclass(frozen=True)
class Setup:
    """The run's config, drawn by the schedule."""

    total: int = 60
    max_restarts: int = 5
    prep: str | None = None  # a component that completes at once; its dependents wait on it with this condition
    trainer_on: str = "inference"  # what the trainer depends on (ready)


_CONFIGS: dict[Setup, Config] = {}


def config_for(d: Path, s: Setup) -> Config:
    """The run's config for ``s`` (parsed once per setup: YAML is the slowest part of a schedule)."""
    if s not in _CONFIGS:
        _CONFIGS[s] = write_config(d, s)
    return _CONFIGS[s].model_copy(update={"run_dir": str(d / "run")})


def write_config(d: Path, s: Setup) -> Config:
    prep_dep = {} if s.prep is None else {"prep": s.prep}
    orch = {"inference": "ready", **prep_dep}
    trainer = {s.trainer_on: "ready" if s.trainer_on == "inference" else "started", **prep_dep}
    text = CONFIG.format(prep=PREP.format() if s.prep else "", max_restarts=s.max_restarts, total=s.total,
                         budget=DEPENDENCY_BUDGET_S,
                         orch_deps=json.dumps(orch), trainer_deps=json.dumps(trainer))
    (d / "run.yaml").write_text(text)
    return load_config(str(d / "run.yaml"), run_dir=str(d / "run"))


class _Handle:
    """A component as run/commands.py sees it."""

    def __init__(self, world: World, name: str):
        self.world, self.name = world, name
        self.cfg = world.cfg.components[name]

    @property
    def state(self) -> str:
        return self.world.lives[self.name].state

    @property
    def current(self) -> Proc | None:
        return self.world.procs.get(self.name)

    def handle(self, inp: lc.Input) -> None:
        self.world.handle(self.name, inp)


class World:
    def __init__(self, root: Path, setup: Setup = Setup()):
        self.root = root
        self.setup = setup
        self.cfg = config_for(root, setup)
        self.run_dir = Path(self.cfg.run_dir)
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.names = self.cfg.topo_order()
        self.rules = {n: lc.Rules.of(n, c) for n, c in self.cfg.components.items()}
        self.now = 0.0
        self.n = 0  # tie-breaker of the queue
        self.queue: list[tuple[float, int, str, tuple[Any, ...]]] = []
        self.journal: list[dict[str, Any]] = []
        self.logs: dict[str, list[str]] = {}
        self.output_from: dict[str, int] = {}  # where each component's latest attempt's lines begin (its log's index)
        self.truth = Truth()
        self.procs: dict[str, Proc | None] = {}
        self.lives: dict[str, lc.Life] = {}
        self.pid = 1000
        self.plans: dict[str, dict[str, int]] = {n: {} for n in self.names}  # faults the next attempt gets
        self.terms: dict[str, str] = {"inference": "exit0", "orchestrator": "exit143", "trainer": "exit143",
                                      "prep": "exit0"}
        self.ckpt: int | None = None  # the trainer's newest complete checkpoint
        self.ckpt_at = 0.0  # when it was written
        self.produced = 0  # the newest rollouts on disk (the orchestrator's step)
        self.published = 0  # the newest weights the trainer published (its step)
        self.live = False  # a supervisor runs the run
        self.ended = False
        self.shutting_down = False
        self.end_reason = ""
        self.outcome = ""
        self.exit_code = 0
        self.root_failure: dict[str, Any] | None = None
        self.run_seq: int | None = None
        self.final_at: dict[str, float] = {}
        self.last_step_at: dict[str, float | None] = {}
        self.stop_order: StopOrder | None = None
        self._pending_quiet: list[str] = []
        self.shutdown_why: lc.Cause | None = None
        self.preempting: dict[str, tuple[float, Any]] = {}  # asked to checkpoint: name -> (asked at, mark before)
        # dependency_down, the run's side (run/stepmemory.py): the watch of each dependency, the consumers flagged
        self.tracker = DependencyTracker(budget_s=self.cfg.dependency_budget, clock=lambda: self.now)
        self.flagged: frozenset[str] = frozenset()
        self.state: dict[str, Any] = {}
        self.violations: list[str] = []
        self.start_run("new")

    # ------------------------------------------------------------------ the journal

    @property
    def wall(self) -> float:
        return WALL0 + self.now

    def emit(self, event: ev.Event) -> dict[str, Any]:
        d = event.to_dict(ts=self.wall, seq=len(self.journal) + 1)
        self.journal.append(d)
        state_mod.apply(self.state, ev.parse(d))
        return d

    def log(self, name: str, *lines: str) -> None:
        stamp = time.strftime("%H:%M:%S", time.gmtime(self.wall))
        self.logs.setdefault(name, []).extend(f"{stamp} {line}" for line in lines)

    def log_size(self, name: str) -> int:
        return sum(len(x.encode()) + 1 for x in self.logs.get(name, []))

    def flush(self) -> Path:
        """Write the journal and the logs to the run dir (what `rlsup diagnose` and `up` read); its path."""
        (self.run_dir / "events.jsonl").write_text("".join(json.dumps(d) + "\n" for d in self.journal))
        for name, lines in self.logs.items():
            (self.run_dir / "logs" / f"{name}.log").write_text("".join(x + "\n" for x in lines))
        return self.run_dir

    # ------------------------------------------------------------------ time

    def at(self, delay: float, kind: str, *args: Any) -> None:
        self.n += 1
        heapq.heappush(self.queue, (self.now + delay, self.n, kind, args))

    def settle(self, until: float | None = None) -> None:
        """Run the clock until nothing but ticks is due (or ``until``)."""
        horizon = self.now + 600 if until is None else until
        while self.queue and self.queue[0][0] <= horizon:
            t, _, kind, args = heapq.heappop(self.queue)
            self.now = max(self.now, t)
            getattr(self, f"_on_{kind}")(*args)
            self.evaluate()
            if until is None and all(k == "tick" for _, _, k, _ in self.queue) and self._quiet():
                break

    def _quiet(self) -> bool:
        """Nothing will change by itself: no process alive, nothing stepping."""
        return self.ended or not any(p is not None for p in self.procs.values()) and not any(
            life.state in ("starting", "stopping", "backoff") for life in self.lives.values())

    # ------------------------------------------------------------------ a run

    def start_run(self, how: str) -> None:
        """A supervisor starts on the run dir: ``new``, or ``resumed`` (`up --resume`, a requeued job)."""
        prev = (self.state or {}).get("components") or {}
        self.truth.run_stops = []  # of this run
        self.truth.user_stops = []
        self.state = state_mod.initial({}, list(self.names))
        for n in self.names:
            life, _again = carryover.life(n, prev.get(n) or {}, self.cfg, how)
            self.lives[n] = life
            self.procs.setdefault(n, None)
            self.last_step_at.setdefault(n, None)
            if prev.get(n):
                self.state["components"][n].update({k: prev[n].get(k) for k in ("attempt", "step", "ready_at")})
                if life.state in lc.FINAL:
                    self.state["components"][n]["state"] = life.state
        self.live, self.ended, self.shutting_down = True, False, False
        self.end_reason, self.exit_code, self.outcome, self.root_failure = "", 0, "", None
        self.preempting = {}
        self.tracker = DependencyTracker(budget_s=self.cfg.dependency_budget, clock=lambda: self.now)  # a new StepMemory
        self.flagged = frozenset()
        self.truth.preempt_step = self.truth.preempt_written = None
        self.final_at = {}  # a new StepMemory: what ended in an earlier run has no time of its own (Run.changed)
        self.stop_order = None
        d = self.emit(ev.RunStarted(None, name=self.cfg.name, pid=1, host="sim", version="sim", how=how,
                                    components=list(self.names)))
        self.run_seq = d["seq"]
        self.at(TICK_S, "tick")

    def seen(self) -> dict[str, Seen]:
        out = {}
        for n, life in self.lives.items():
            st = self.state["components"].get(n, {})
            out[n] = Seen(n, life.state, life.attempt, reason=st.get("reason"), cause=life.cause,
                          ended_at=self.final_at.get(n), started_at=life.started_at, ready_at=life.ready_at,
                          last_step_at=self.last_step_at.get(n),
                          gave_up_by=life.gave_up.by if life.gave_up is not None else None,
                          step=self.procs[n].step if self.procs.get(n) else st.get("step"),
                          was_ready=life.ready_at is not None or st.get("ready_at") is not None)
        return out

    def view(self, **kw: Any) -> runstep.View:
        return runstep.View(self.seen(), shutting_down=self.shutting_down, run_seq=self.run_seq, ended=self.ended,
                            awake_since=0.0, wall_time=self.wall, **kw)

    def run_step(self, trigger: runstep.Trigger, view: runstep.View | None = None) -> None:
        for fx in runstep.step(view or self.view(), trigger, self.now, self.cfg):
            if isinstance(fx, runstep.Feed):
                self.handle(fx.component, fx.input)
            elif isinstance(fx, runstep.Say):
                d = self.emit(fx.event)
                for f in fx.then:
                    self.handle(f.component, runstep.with_seq(f.input, d["seq"]))
            elif isinstance(fx, runstep.End):
                out = fx.outcome
                self.begin_end(out.exit_code, out.reason, out.how,
                               {"component": out.root, "reason": out.root_reason} if out.root else None)
            elif isinstance(fx, runstep.CatchUp):
                self.run_step(runstep.StallTick(), self.view(caught_up=True, stall=self._stall_watches()))
            elif isinstance(fx, runstep.Flagged):
                self.flagged = fx.consumers
            elif isinstance(fx, runstep.Track):  # as Run._carry_out: the watch's answer is the run's next step
                act = self.tracker.observe(fx.dep, down=fx.down, consumers_failing=bool(fx.failing))
                self.run_step(runstep.DependencyVerdict(fx.dep, act, fx.failing))

    def evaluate(self) -> None:
        """What the run does after every change: gate pending components, then judge the end."""
        if not self.live:
            return
        for _ in range(len(self.names) + 2):
            moved = False
            for n in self.names:
                life = self.lives[n]
                if life.state != "pending" or life.want != "run" or life.spawning:
                    continue
                before = (life.state, life.waiting)
                self.run_step(runstep.Pending(n))
                moved |= (self.lives[n].state, self.lives[n].waiting) != before
            if not moved:
                break
        self.run_step(runstep.Settled())
        self._shutdown_waves()

    # ------------------------------------------------------------------ a component's lifecycle

    def handle(self, name: str, inp: lc.Input) -> None:
        before = self.lives[name].state
        life, effects = lc.step(self.lives[name], inp, self.now, self.rules[name])
        self.lives[name] = life
        seqs: dict[str, int] = {}
        for e in effects:
            self._perform(name, e, seqs)
        if seqs:
            self.lives[name] = lc.fill_seqs(self.lives[name], seqs)
        state = self.lives[name].state
        if state in lc.FINAL and before not in lc.FINAL:
            self.final_at[name] = self.now
        elif state not in lc.FINAL:
            self.final_at.pop(name, None)

    def _perform(self, name: str, e: lc.Effect, seqs: dict[str, int]) -> None:
        if isinstance(e, lc.Emit):
            event = lc.fill_event(e.event, seqs)
            d = self.emit(event)
            seqs[event.kind] = d["seq"]
            if isinstance(event, ev.RestartScheduled):
                self.run_step(runstep.Restarted(d))
        elif isinstance(e, lc.Spawn):
            self.at(0.05, "spawned", name, e.attempt, e.resume_step)
        elif isinstance(e, lc.Terminate):
            p = self.procs.get(name)
            if p is not None:
                self.at(0.01, "signal", name, p.attempt, "SIGTERM", False)
                self.at(e.timeout, "signal", name, p.attempt, "SIGKILL", False)
        elif isinstance(e, lc.Signal):
            p = self.procs.get(name)
            if p is not None:
                self.at(0.01, "signal", name, p.attempt, e.signal, False)
        elif isinstance(e, lc.Probe):
            p = self.procs.get(name)
            if p is not None and e.kind == "ready":
                self.at(2.0, "ready", name, p.attempt)
            elif p is not None:
                self.at(5.0, "alive", name, p.attempt, 0)
        elif isinstance(e, lc.SetTimer):
            self.at(e.delay, "timer", name, e.kind, e.timer)

    # ------------------------------------------------------------------ simulated processes

    def _on_spawned(self, name: str, attempt: int, resume_step: int | None) -> None:
        if self.lives[name].attempt != attempt or not self.lives[name].spawning or not self.live:
            return
        self.pid += 1
        step = 0
        resume = None
        if name == "trainer" and self.ckpt is not None:
            step = resume_step if resume_step is not None else self.ckpt
            resume = lc.Resume(step, f"ckpt/step_{step}")
        elif name == "orchestrator":
            step = self.produced  # it goes on after the newest rollouts on disk
        p = Proc(name, attempt, self.pid, step=step, term=self.terms.get(name, "exit0"),
                 faults=self.plans[name], started=self.now)
        self.plans[name] = {}
        self.procs[name] = p
        self.last_step_at[name] = self.now
        self.output_from[name] = len(self.logs.get(name, []))
        self.log(name, f"attempt {attempt} of {name} starts" + (f"; resumed from step {step}" if resume else ""))
        self.handle(name, lc.Spawned(p.pid, (f"sim-{name}",), resume=resume, started_at=self.now,
                                     log_offset=self.log_size(name)))
        if "die" in p.faults:
            self.at(p.faults["die"], "fault", name, attempt, "die")

    def _on_ready(self, name: str, attempt: int) -> None:
        p = self.procs.get(name)
        if p is not None and p.attempt == attempt and not p.hung and self.lives[name].state == "starting":
            self.handle(name, lc.Ready())

    def _on_alive(self, name: str, attempt: int, failures: int) -> None:
        """The liveness probe (every 5 s; 3 failures in a row end the attempt), while the attempt runs."""
        p = self.procs.get(name)
        if p is None or p.attempt != attempt or self.lives[name].state != "running":
            return
        failures = failures + 1 if p.hung else 0
        if failures >= 3:
            self.handle(name, lc.LivenessFailed("liveness failed 3 times: timed out", ("GET /health: timed out",)))
        else:
            self.at(5.0, "alive", name, attempt, failures)

    def _on_timer(self, name: str, kind: str, gen: int) -> None:
        if self.live:
            self.handle(name, lc.BackoffElapsed(gen) if kind == "backoff" else lc.Healthy(gen))

    def _on_signal(self, name: str, attempt: int, sig: str, platform: bool) -> None:
        p = self.procs.get(name)
        if p is None or p.attempt != attempt or p.exiting:
            return
        if platform:
            p.platform_signalled = True
        if sig == "SIGUSR1":  # the trainer checkpoints its step (unless it hangs); nothing else is asked
            if name == "trainer" and not p.hung and not p.checkpointing:
                p.checkpointing = True
                self.at(CKPT_WRITE_S, "checkpointed", name, p.attempt, p.step)
            return
        if sig == "SIGKILL":
            self.exit(name, None, "SIGKILL", [])
        elif p.term == "exit0":
            self.exit(name, 0, None, ["shutting down on SIGTERM"], after=0.2)
        elif p.term == "exit143":
            self.exit(name, 143, None, ["terminated on SIGTERM"], after=0.2)
        # "ignore": the SIGKILL after the stop timeout ends it

    def _on_checkpointed(self, name: str, attempt: int, step: int) -> None:
        p = self.procs.get(name)
        if p is not None and p.attempt == attempt and not p.exiting:
            p.checkpointing = False
            self.ckpt, self.ckpt_at = step, self.now
            self.truth.preempt_written = step if self.shutting_down else self.truth.preempt_written
            self.log(name, f"Checkpoint of step {step} written on SIGUSR1")

    def _on_fault(self, name: str, attempt: int, kind: str) -> None:
        p = self.procs.get(name)
        if p is not None and p.attempt == attempt and not p.exiting:
            self._fault(p, kind)

    def _fault(self, p: Proc, kind: str) -> None:
        self.truth.injected.append((p.comp, kind, p.attempt, self.wall))
        lines = [x.format(step=p.step) for x in FAULT_LINES.get(kind, [])]
        if kind == "hang":
            p.hung = True
            self.log(p.comp, f"Waiting at step {p.step}")
        elif kind == "oom":
            self.exit(p.comp, None, "SIGKILL", lines)
        elif kind == "exit0":
            self.exit(p.comp, 0, None, lines)
        else:
            self.exit(p.comp, 1, None, lines)

    def exit(self, name: str, code: int | None, sig: str | None, lines: list[str], after: float = 0.0) -> None:
        p = self.procs[name]
        assert p is not None
        p.exiting = True
        if lines:
            self.log(name, *lines)
        self.at(after + 0.01, "exited", name, p.attempt, code, sig)

    def _on_exited(self, name: str, attempt: int, code: int | None, sig: str | None) -> None:
        p = self.procs.get(name)
        if p is None or p.attempt != attempt:
            return
        self.procs[name] = None
        if p.platform_signalled:
            self.truth.platform_exits.add((name, attempt))
        if not self.live:
            return  # nobody watches: the next supervisor reads the monitor's record (not simulated)
        if not self._asked(name):
            hold = detectors.exit_hold(code, sig, shutting_down=self.shutting_down,
                                       forced=self.lives[name].forced is not None)
            if hold:
                self.at(hold, "judge", name, p, code, sig)
                return
        self._on_judge(name, p, code, sig)

    def _asked(self, name: str) -> bool:
        life = self.lives[name]  # as Component._asked
        return life.forced is None and ((life.want == "stop" and life.state == "stopping") or life.then_start)

    def _on_judge(self, name: str, p: Proc, code: int | None, sig: str | None) -> None:
        """The exit judged (as Component.monitor_changed does): one we asked for is no failure to diagnose."""
        if self._asked(name):
            life = self.lives[name]
            diag = {"category": "none", "summary": f"stopped by {life.stop_by or life.restart_by or 'user'}",
                    "exception": None, "location": None, "step": p.step, "evidence": []}
        else:  # as Component.diagnose: an attempt rlsup ended on its own verdict says so
            diag = diagnose(self._tail(name), exit_code=code, signal=sig, stopped_by=self.lives[name].forced).to_dict()
        progress = self.cfg.components[name].progress
        self.handle(name, lc.Exited(code, sig, Diagnosis.from_dict(diag), step=p.step if progress else None,
                                    total=progress.total if progress else None))

    def _tail(self, name: str) -> list[str]:
        return [x.split(" ", 1)[1] for x in self.logs.get(name, [])[-40:]]

    def _on_tick(self) -> None:
        if not self.live:
            return
        for n in self.names:
            self._advance(n)
        self.run_step(runstep.StallTick(), self.view(caught_up=True, stall=self._stall_watches()))
        self._check_dependencies()
        if not self.ended:
            self.at(TICK_S, "tick")

    def _check_dependencies(self) -> None:
        """dependency_down, as Run._check_dependencies: the consumers (runview.consumers), the watch's episodes."""
        if not self.live:
            return
        consumers = [detectors.Consumer(
            n, life.state, tuple(self.cfg.components[n].depends_on),
            str(((self.state["components"][n].get("last_exit") or {}).get("diagnosis") or {}).get("category", "")),
            lambda n=n: self._attempt_tail(n),
            frozenset(d for d, cond in self.cfg.components[n].depends_on.items() if cond != "ready"))
            for n, life in self.lives.items()
            if self.cfg.components[n].depends_on and life.state in ("starting", "running", "backoff", "pending")]
        down_since = self.tracker.down_since()
        if not consumers and not down_since and not self.flagged:
            return
        view = runstep.View(self.seen(), consumers=consumers, flagged=self.flagged, down_since=down_since,
                            down_for={d: self.tracker.down_for(d) or 0.0 for d in down_since})
        self.run_step(runstep.DependencyTick(), view)

    def _attempt_tail(self, name: str) -> list[str]:
        """The last lines of ``name``'s latest attempt (none of an earlier attempt's), as Component.attempt_tail."""
        lines = self.logs.get(name, [])
        start = max(len(lines) - ATTEMPT_TAIL, self.output_from.get(name, len(lines)))
        return [x.split(" ", 1)[1] for x in lines[start:]]

    def _can_step(self, name: str, p: Proc) -> bool:
        """What ``name`` needs for its next step: the inference server up; the orchestrator at most two steps
        ahead of the trainer's published weights (--async-level 1), the trainer a batch of rollouts on disk."""
        inf = self.procs.get("inference")
        if inf is None or inf.hung or inf.exiting or self.lives["inference"].state != "running":
            return False
        if name == "orchestrator":
            return p.step < self.published + 2
        return self.produced > p.step

    def _advance(self, name: str) -> None:
        p = self.procs.get(name)
        if p is None or p.exiting or p.hung:
            return
        if name == "prep":
            self.exit(name, 0, None, ["prepared"])
            return
        if name == "inference" or self.lives[name].state != "running":
            return
        if p.step >= self.setup.total:  # resumed from its last step: nothing left to do (as the demo's trainer)
            self.exit(name, 0, None, ["done"])
            return
        if not self._can_step(name, p):  # what the demo's programs print while they wait
            inf = self.procs.get("inference")
            if inf is None or inf.exiting:  # nothing listens on the server's port: each try is refused
                self.log(name, REFUSED[name])
            else:
                self.log(name, "Waiting for training batch to arrive" if name == "trainer" else
                         f"Waiting for trainer weights step {p.step - 1} (published: {self.published})")
            return
        p.step += 1
        self.last_step_at[name] = self.now
        if name == "orchestrator":
            self.produced = max(self.produced, p.step)
        else:
            self.published = max(self.published, p.step)
            if p.step % CKPT_EVERY == 0 and p.step > (self.ckpt or 0):  # its periodic checkpoint
                self.ckpt, self.ckpt_at = p.step, self.now
        self.log(name, f"Step {p.step}/{self.setup.total}")
        for kind, at_step in p.faults.items():
            if at_step == p.step and kind != "die":
                self._fault(p, kind)
                return
        if p.step >= self.setup.total:
            self.exit(name, 0, None, ["done"])

    def _stall_watches(self) -> dict[str, runstep.StallView]:
        out = {}
        for n, life in self.lives.items():
            c = self.cfg.components[n]
            if life.state == "running" and c.progress and c.progress.stall_after:
                out[n] = runstep.StallView(c.progress.stall_after, "stall" in life.episode,
                                            deps={d: self.lives[d].state for d in c.depends_on},
                                            last_line=lambda n=n: (self._tail(n) or [None])[-1])
        return out

    # ------------------------------------------------------------------ the run's end

    def begin_end(self, code: int, reason: str, how: str, root: dict[str, Any] | None) -> None:
        if self.ended or self.shutting_down:
            return
        self.exit_code, self.end_reason, self.outcome, self.root_failure = code, reason, how, root
        self.begin_shutdown(f"the run is ending: {reason}")

    def _mark(self) -> tuple[int, float] | None:
        return None if self.ckpt is None else (self.ckpt, self.ckpt_at)

    def begin_shutdown(self, why: str) -> None:
        self.shutting_down = True
        self.shutdown_why = lc.Cause("preemption" if self.outcome == "preempted" else "shutdown", why)
        before = self._mark()  # preemption.baselines: read before anyone is asked
        for n in self.names:  # Run._decide_end
            self.handle(n, lc.RunStopping(self.shutdown_why))
            asked = self.lives[n].checkpoint_asked
            if asked is not None:
                self.preempting[n] = (asked, before if n == "trainer" else None)
                p = self.procs.get(n)
                if n == "trainer" and p is not None and not p.hung and not p.exiting:
                    self.truth.preempt_step = p.step
        if self.preempting:  # Run._decide_end: preemption.wait_for_checkpoints before the ordered stop
            self._on_preempt_poll()
        else:
            self._first_wave()

    def _first_wave(self) -> None:
        self.stop_order = StopOrder(self.cfg, self.names)
        for n in self.stop_order.first:
            self.handle(n, lc.Shutdown(self.shutdown_why))
        self._pending_quiet = list(self.stop_order.first)

    def _on_preempt_poll(self) -> None:
        for n, (asked, before) in list(self.preempting.items()):
            verdict = detectors.checkpoint_waited(asked_at=asked, wait=self.rules[n].preempt_wait, now=self.now,
                                                  before=before, latest=self._mark() if n == "trainer" else None,
                                                  exited=self.procs.get(n) is None)
            if verdict is not None:
                del self.preempting[n]
                if verdict != "written":
                    self.emit(ev.FlagRaised(n, type="checkpoint_problem", message=f"{n}: no new checkpoint ({verdict})"))
        if self.preempting:
            self.at(POLL_S, "preempt_poll")
        else:
            self._first_wave()

    def _shutdown_waves(self) -> None:
        if not self.shutting_down or self.ended or self.stop_order is None:
            return
        while True:
            freed: list[str] = []
            still = []
            for n in self._pending_quiet:
                if self.lives[n].state in lc.FINAL and self.procs.get(n) is None:
                    freed += self.stop_order.quiet(n)
                else:
                    still.append(n)
            for n in freed:
                self.handle(n, lc.Shutdown(self.shutdown_why))
            self._pending_quiet = still + freed
            if not freed:
                break
        if not self._pending_quiet:
            self.ended, self.live = True, False
            standing = None
            if self.outcome == "preempted":  # preemption.standing: each component with resume:
                standing = {"trainer": None if self.ckpt is None else {"step": self.ckpt, "path": f"ckpt/step_{self.ckpt}"}}
            self.emit(ev.RunEnded(None, exit_code=self.exit_code, reason=self.end_reason, root=self.root_failure,
                                  outcome=self.outcome, checkpoints=standing))

    # ------------------------------------------------------------------ actions (a schedule's steps)

    def act(self, action: tuple[Any, ...]) -> None:
        kind, *args = action
        getattr(self, f"do_{kind}")(*args)
        self.evaluate()

    def do_wait(self, seconds: float) -> None:
        self.settle(until=self.now + seconds)

    def do_fault(self, name: str, kind: str, at: int) -> None:
        """The attempt running now gets ``kind`` ``at`` steps (or, for the inference server, seconds) from now;
        if none runs, the next attempt gets it at step ``at``."""
        p = self.procs.get(name)
        if p is None or p.exiting:
            self.plans[name] = {**self.plans[name], kind: at}
            return
        if name == "inference":  # a server has no steps: its faults come ``at`` seconds from now
            self.at(min(at, 30), "fault", name, p.attempt, kind)
        else:
            p.faults = {**p.faults, kind: p.step + at}

    def do_user(self, verb: str, name: str) -> None:
        """`rlsup stop/start/restart NAME`, through the supervisor's real command table (run/commands.py)."""
        if not self.live:
            return
        reply = commands.run_command(self, verb, name, by="user", client="sim")
        if verb == "stop" and reply.get("ok"):
            self.truth.user_stops.append((name, self.wall))

    def do_down(self) -> None:
        """`rlsup down`: the real command (stop_all), every component stopped in order."""
        if not self.live:
            return
        commands.run_command(self, "stop_all", None, by="user", client="rlsup down")

    # what run/commands.py asks of the run (commands.Run)

    @property
    def components(self) -> dict[str, _Handle]:
        return {n: _Handle(self, n) for n in self.names}

    def follow_restart(self, name: str, cause: lc.Cause | None = None) -> None:
        self.run_step(runstep.RestartCommand(name, cause))

    def request_shutdown(self, reason: str, by_user: bool = True, preempted: bool = False) -> None:
        if self.shutting_down or self.ended:
            return  # the end was decided already: a stop now changes nothing
        self.truth.run_stops.append(self.wall)
        self.exit_code, self.end_reason = 0, reason
        self.outcome = "preempted" if preempted else "stopped" if by_user else "failed"
        self.begin_shutdown(f"the run is ending: {reason}")

    def handover(self, reason: str) -> list[int]:
        raise NotImplementedError("not simulated")

    @property
    def ending(self) -> bool:
        return self.shutting_down or self.ended

    def do_platform_sigterm(self, lag: float, everyone: bool) -> None:
        """The platform takes the machine: SIGTERM to the supervisor (after ``lag`` s: a preemption) and, with
        ``everyone`` (a Slurm requeue, a VM's shutdown), to every process of the run at once."""
        if not self.live or self.shutting_down:
            return
        if everyone:
            for n, p in self.procs.items():
                if p is not None:
                    self._on_signal(n, p.attempt, "SIGTERM", True)
        self.at(lag, "supervisor_sigterm")

    def _on_supervisor_sigterm(self) -> None:
        if self.live:  # cli/run_cmds.py _stop_on_signals, cli/signals.py: the platform's SIGTERM is a preemption
            self.request_shutdown("SIGTERM received: the platform is taking the machine (preemption)", preempted=True)

    def do_interrupt(self) -> None:
        """A person's Ctrl-C at the terminal of `rlsup up --headless`: a stop (cli/signals.py)."""
        if self.live:
            self.request_shutdown("SIGINT received")

    def do_resume(self) -> None:
        """`rlsup up CONFIG --resume` once the run has ended (or the requeued job's next supervisor)."""
        self.settle()  # the run goes on to its end first, and what it left running ends
        if self.live:
            return
        self.truth.resumes += 1
        self.start_run("resumed")

    # ------------------------------------------------------------------ views for the checks

    def events(self) -> list[dict[str, Any]]:
        return list(self.journal)
