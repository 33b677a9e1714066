"""``rlsup up``, ``rlsup down`` and ``rlsup restart-supervisor``: starting, ending and replacing a run's supervisor."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal as signal_mod
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..records.events import CONFIG_CHANGED, ComponentAdopted, human
from ..render.status import display_path
from ..rundir.layout import SUPERVISOR_LOG, LockHeld, RunPaths, UnsafeRunDir, is_locked, read_owner
from . import daemon, signals
from .attach import attach_local
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    client_call,
    client_parser,
    fail,
    formatter,
    load,
    run_dir_arg,
    say,
    set_option,
    stored_overrides,
    write,
)
from .daemon import live_runs, resolve_run_dir, stranded_runs
from .follow import Printer

if TYPE_CHECKING:
    from ..run.run import Run

PROGRESS_EVERY_S = 5.0


def add_parsers(sub: Any) -> None:
    up = sub.add_parser(
        "up", help="start and supervise the components of a config", formatter_class=formatter,
        description=textwrap.dedent("""\
            Start every component of CONFIG in dependency order and supervise it: restart on
            failure with backoff, stop the whole process tree on shutdown, keep every log under
            <run_dir>/logs, write <run_dir>/events.jsonl and <run_dir>/state.json.

            By default the supervisor runs as a background daemon (its own session, no terminal:
            closing the terminal, tmux or SSH never touches training) and the TUI opens on it.
            Leaving the TUI (q) leaves training running; `rlsup attach` brings it back. If a
            supervisor already owns the run dir, `up` attaches to it instead of starting another.
            Each component runs under a small monitor of its own, so even a crash or kill -9 of the
            supervisor leaves training running: the next `rlsup up` takes the components over.

            A run dir whose run has ended (completed or fatal) is not reused silently: `up` says
            what it found and asks for --resume (continue it from its checkpoints; the journal
            goes on) or --fresh (keep the old run dir, renamed with a numeric suffix, and start a
            new run). A run whose supervisor died mid-way is continued by default.

            -d starts the daemon only. --headless runs in the foreground without a TUI and prints
            one line per event (containers, CI, batch jobs); Ctrl-C (SIGINT) or SIGTERM stops
            everything in reverse dependency order, a second Ctrl-C kills what is left at once.

            Before starting, the fast preflight checks of `rlsup check` run; `up` refuses to start
            on errors (--skip-checks to start anyway)."""),
        epilog=textwrap.dedent("""\
            examples:
              rlsup up configs/demo.yaml                 TUI on a new run (daemon in the background)
              rlsup up configs/demo.yaml -d              daemon only; prints how to attach
              rlsup up configs/demo.yaml --headless      foreground, one line per event (CI, containers)
              rlsup up configs/demo.yaml --fresh         the last run is kept as runs/demo.1; start anew
              rlsup up configs/demo.yaml --set components.trainer.env.LR=1e-5
                                                         a change to the file for this run (kept with it)

            exit codes: 0 started (-d), detached, every component completed or you stopped the run
            (--headless); 1 a component ended fatal (a false success included), a check failed or the
            daemon did not start; 2 config or usage error, or an ended run without --resume/--fresh."""))
    up.add_argument("config", metavar="CONFIG", help="the run's YAML file")
    up.add_argument("--run-dir", metavar="DIR", help="run directory (default: the config's run_dir, else runs/<name>)")
    up.add_argument("-d", "--detach", action="store_true", help="start the daemon only; print how to attach")
    up.add_argument("--headless", action="store_true", help="supervise in the foreground without a TUI")
    up.add_argument("--logs", action="store_true", help="with --headless: also print every component's output, prefixed")
    again = up.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="on an ended run: continue it from its checkpoints")
    again.add_argument("--fresh", action="store_true",
                       help="on an ended run: keep it (renamed DIR.1, DIR.2, ...) and start a new run")
    up.add_argument("--gpu", metavar="SPEC", default=None,
                    help="GPU sampler: auto (default), none, or fake:8xH100 for demos (env RLSUP_GPU_SAMPLER)")
    up.add_argument("--skip-checks", action="store_true", help="start even if preflight checks find errors")
    up.add_argument("--plain", action="store_true", help="follow the event stream as text instead of the TUI")
    set_option(up)
    up.add_argument("--daemon-child", action="store_true", help=argparse.SUPPRESS)
    up.set_defaults(func=cmd_up)

    client_parser(sub, "down", "stop every component in order and end the supervisor",
                  "Stop every component in reverse dependency order (each with its stop signal, then SIGKILL after "
                  "its stop timeout) and end the supervisor. Returns when no process of the run is left, or says "
                  "exactly which could not be ended (exit 1). If the run's supervisor is gone (crashed, killed), "
                  "`down` ends the run's processes itself, the same way, and only those its monitors' records "
                  "and markers prove are the run's, then writes what it did to the journal.", cmd_down)
    client_parser(sub, "restart-supervisor", "replace the supervisor without touching the components",
                  "Upgrade in place: the running supervisor exits without stopping anything (each component "
                  "keeps running under its monitor, its log complete), and a new supervisor, from the rlsup "
                  "installed now, takes the components over with the same pids, attempts and progress. Use it "
                  "after `pip install -U rlsup`.", cmd_restart_supervisor)


# ---------------------------------------------------------------------- up


def cmd_up(args: argparse.Namespace) -> int:
    cfg = load(args.config, args.run_dir, args.overrides)
    if isinstance(cfg, int):
        return cfg
    run_dir = Path(cfg.run_dir)
    if not args.daemon_child:  # a person's `rlsup up`, not the daemon that one of them started
        # A supervisor that already owns the run dir, an ended run there (--resume or --fresh): settled before
        # the run's config is read (an exit code where `up` ends here).
        settled = (_already_supervised(args, run_dir) if is_locked(RunPaths(run_dir))
                   else _settle_ended_run(args, run_dir))
        if settled is not None:
            return settled
    cfg = _with_the_runs_overrides(args, cfg, run_dir)
    if isinstance(cfg, int):
        return cfg
    if not args.daemon_child:
        if not args.skip_checks and not _fast_checks(cfg, args.config):
            return EXIT_FAILED  # before --fresh moves anything: a refused start leaves the run dir as it was
        if (kept := (_keep_aside(run_dir) if args.fresh else None) or _keep_overrides(args, run_dir)) is not None:
            return kept
    if getattr(cfg, "slurm", None) is not None and not os.environ.get("SLURM_JOB_ID") and not args.daemon_child:
        from .slurm_up import slurm_up  # a login node: submit the run's job and follow it

        return slurm_up(args, cfg)
    if args.headless:
        return run_headless(cfg, show_logs=args.logs, gpu=args.gpu, daemon=args.daemon_child, resume=args.resume)
    return _start_daemon(args, cfg, run_dir)


def _with_the_runs_overrides(args: argparse.Namespace, cfg: Any, run_dir: Path) -> Any:
    """The config with the overrides the run in ``run_dir`` keeps (a continued or taken-over run, not one
    started afresh) and then this command's ``--set``. An exit code where they no longer apply."""
    stored = [] if args.fresh else stored_overrides(run_dir)
    if not stored:
        return cfg
    from ..config.overrides import merged

    cfg = load(args.config, args.run_dir, merged(stored, args.overrides))
    if isinstance(cfg, int):
        say(f"rlsup: (the run in {display_path(run_dir)} keeps these overrides from its start: "
            f"{' '.join(f'--set {o}' for o in stored)})", err=True)
    return cfg


def _keep_overrides(args: argparse.Namespace, run_dir: Path) -> int | None:
    """Keep this command's ``--set`` (after those the run keeps) with the run, for every later reading of
    its config. An exit code where they cannot be kept."""
    if not args.overrides:
        return None
    from ..config.overrides import merged
    from ..rundir.journal import write_atomic

    paths = RunPaths(run_dir)
    try:
        paths.create()
        write_atomic(paths.overrides, json.dumps(merged(stored_overrides(run_dir), args.overrides)).encode())
    except (UnsafeRunDir, OSError) as e:
        return fail(f"rlsup: cannot keep the run's --set overrides in {paths.overrides}: {e}")
    return None


def _already_supervised(args: argparse.Namespace, run_dir: Path) -> int:
    """A live supervisor owns the run dir: attach to it (nothing with -d; an error with --headless)."""
    shown = display_path(run_dir)
    if args.overrides:
        return fail(f"rlsup: {shown} is owned by a live supervisor ({daemon.owner_desc(run_dir)}); --set changes "
                    "a run when it starts or is continued, not while it runs: `rlsup down`, then `rlsup up --resume "
                    "--set ...`", EXIT_USAGE)
    if args.headless:
        return fail(f"rlsup: {shown} is owned by a live supervisor ({daemon.owner_desc(run_dir)}); stop it first "
                    "(`rlsup down`) or use another --run-dir")
    say(f"rlsup: a supervisor is already running {shown} ({daemon.owner_desc(run_dir)}); "
        + ("nothing started" if args.detach else "attaching to it"), err=True)
    if args.detach:
        return EXIT_OK
    return attach_local(run_dir, plain=args.plain)


def _settle_ended_run(args: argparse.Namespace, run_dir: Path) -> int | None:
    """Whether an ended run in the run dir is resumed or kept aside (--fresh), as asked or as the person
    answers; sets ``args.resume``/``args.fresh``. An exit code where `up` ends here, else None."""
    paths = RunPaths(run_dir)
    ended = None  # a new run, or one that crashed mid-way
    if paths.events.exists():
        from ..rundir.archive import how_it_ended

        ended = how_it_ended(paths)
    if ended is not None and ended.startswith("preempted") and not args.fresh:
        # The platform took the machine (a spot VM, a Slurm preemption): `rlsup up` as a spot job's command
        # picks the run up where its checkpoints stand, whatever the mode.
        say(f"rlsup: continuing the run in {display_path(run_dir)}: it was {ended}")
        args.resume = True
        return None
    if ended is not None and not (args.resume or args.fresh):
        choice = _ask_ended(display_path(run_dir), ended)
        if choice is None:
            return EXIT_USAGE
        args.resume, args.fresh = choice == "resume", choice == "fresh"
    return None


def _keep_aside(run_dir: Path) -> int | None:
    """--fresh: the previous run renamed aside (``DIR.N``, the first free N >= 1); an exit code if it cannot be
    (components of it still live under their monitors, say)."""
    from ..monitor.process import is_monitor_of, records

    if not run_dir.exists():
        return None
    paths = RunPaths(run_dir)
    if live := [r for _, r in records(paths.monitors) if is_monitor_of(r, paths.root)]:
        names = ", ".join(f"{r['component']} (pid {r['pid']})" for r in live)
        return fail(f"rlsup: cannot keep the previous run aside: components of that run are still running under "
                    f"their monitors ({names}); `rlsup up` without --fresh takes them over, and `rlsup down` then "
                    "ends them")
    kept = next(t for n in itertools.count(1) if not os.path.lexists(t := run_dir.with_name(f"{run_dir.name}.{n}")))
    try:
        os.rename(run_dir, kept)
    except OSError as e:
        return fail(f"rlsup: cannot keep the previous run aside: {e}")
    say(f"rlsup: the previous run is kept as {display_path(kept)}; starting a new run in {display_path(run_dir)}")
    return None


def _start_daemon(args: argparse.Namespace, cfg: Any, run_dir: Path) -> int:
    """Start the run's supervisor as a background daemon, wait until it serves, then say how to reach it
    (-d) or open the TUI on it."""
    # the daemon decides what a resumed run restarts: it must know it is one
    extra = (["--resume"] if args.resume else []) + (["--gpu", args.gpu] if args.gpu else [])
    hint = f"rlsup attach{run_dir_arg(run_dir)}"
    held = daemon.HeldInterrupt()
    try:
        proc = daemon.spawn(args.config, run_dir, extra)
        problem = daemon.wait_ready(proc, run_dir, check=held.check)
        end = daemon.run_ended_by(RunPaths(run_dir), proc.pid) if problem is not None else (
            daemon.ended_at_once(proc, run_dir))
        held.release()
    except (UnsafeRunDir, OSError) as e:
        held.release(check=False)
        return fail(f"rlsup: {e}")
    except KeyboardInterrupt:
        held.release(check=False)
        # The daemon is in its own session: the interrupt did not reach it. Say where the run is.
        return fail(f"\nrlsup: interrupted while the supervisor started; the run goes on in the background.\n"
                    f"  attach: {hint}\n  status: rlsup status{run_dir_arg(run_dir)}\n"
                    f"  stop:   rlsup down{run_dir_arg(run_dir)}", 130)
    if end is not None:
        return _ended_at_once(args, run_dir, end)
    if problem is not None:
        return _daemon_failed(run_dir,
                              f"rlsup: {problem}; the end of {display_path(run_dir)}/{SUPERVISOR_LOG}:")
    if args.detach:
        return _say_detached(cfg, run_dir, proc.pid, hint)
    return _attach_started(run_dir, args.plain, hint)


def _daemon_failed(run_dir: Path, said: str) -> int:
    """The daemon did not come up: say why (``said``), then the end of its own log."""
    say(said, err=True)
    for line in daemon.log_tail(run_dir):
        say(f"  {line}", err=True)
    return EXIT_FAILED


def _say_detached(cfg: Any, run_dir: Path, pid: int, hint: str) -> int:
    """`up -d`: the daemon serves; say what it took over and how to attach, see and stop it."""
    say(f"rlsup: supervising {cfg.name} in the background ({daemon.owner_desc(run_dir)})")
    # a run whose supervisor died: say that training was taken over, not restarted
    if took := daemon.journaled_by(RunPaths(run_dir), ComponentAdopted.kind, lambda started: started.pid == pid):
        say("  took over: " + ", ".join(f"{e['component']} pid {e['pid']}" for e in took))
        for e in took:
            if e.get("config_changed"):
                say(f"  {e['component']}: {CONFIG_CHANGED}")
    say(f"  run dir:  {display_path(run_dir)}")
    say(f"  attach:   {hint}")
    say(f"  status:   rlsup status{run_dir_arg(run_dir)}")
    say(f"  stop:     rlsup down{run_dir_arg(run_dir)}")
    return EXIT_OK


def _attach_started(run_dir: Path, plain: bool, hint: str) -> int:
    """Open the TUI (or --plain text) on the daemon just started; an interrupt leaves the run going."""
    try:
        return attach_local(run_dir, plain=plain, forward_term=True)
    except KeyboardInterrupt:
        # Before the TUI drew anything (or while it started): the run is in the daemon's hands.
        return fail(f"\nrlsup: interrupted; the run goes on in the background ({daemon.owner_desc(run_dir)}).\n"
                    f"  attach: {hint}\n  stop:   rlsup down{run_dir_arg(run_dir)}", 130)


def _ended_at_once(args: argparse.Namespace, run_dir: Path, end: dict[str, Any]) -> int:
    """The supervisor ended the run as it started it: say so (and what next) instead of claiming a
    run that goes on in the background, or opening a view on a supervisor that is gone."""
    code = end.get("exit_code")
    rd = run_dir_arg(run_dir)
    say(f"rlsup: the run ended as soon as it started: {end.get('reason') or 'run ended'} (exit code {code})",
        err=True)
    if code == 0 and args.resume:
        say(f"  nothing was left to continue: what had completed stays completed.\n"
            f"  to train further, raise its step count in {args.config} and --resume again: a component whose "
            f"command, cwd or env changed since it completed starts again, from its checkpoints.\n"
            f"  start a new run (this one is kept as {display_path(run_dir)}.N): rlsup up {args.config}{rd} --fresh",
            err=True)
    elif code != 0:
        say(f"  why:     rlsup diagnose {display_path(run_dir)}\n  journal: rlsup events{rd}", err=True)
    return fail(f"  status:  rlsup status{rd}", EXIT_OK if code == 0 else EXIT_FAILED)


def _ask_ended(shown: str, ended: str) -> str | None:
    """"resume" / "fresh" from a person at a terminal; None (after saying why) without one."""
    say(f"rlsup: {shown} holds a run that has ended: {ended}.\n"
        f"  --resume  continue it from its checkpoints (the journal goes on)\n"
        f"  --fresh   keep it (renamed with a numeric suffix) and start a new run", err=True)
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        say("rlsup: not starting: pass --resume or --fresh", err=True)
        return None
    try:
        answer = input("resume, fresh, or quit? [r/f/q] ").strip().lower()
    except (EOFError, KeyboardInterrupt):
        say("", err=True)
        return None
    choice = {"r": "resume", "resume": "resume", "f": "fresh", "fresh": "fresh"}.get(answer)
    if choice is None:
        say("rlsup: nothing started", err=True)
    return choice


def _fast_checks(cfg: Any, path: str) -> bool:
    """`up`'s preflight: True to go on. Errors and warnings are printed; errors stop the start."""
    from ..preflight.checks import exit_code, format_findings, run_checks

    findings = [f for f in run_checks(cfg, fast=True) if f.severity != "info"]
    if findings:
        say(format_findings(findings, config_path=path), err=True)
    if exit_code(findings):
        say("rlsup: not starting; fix the above, or pass --skip-checks to start anyway", err=True)
        return False
    return True


def run_headless(cfg: Any, *, show_logs: bool = False, gpu: str | None = None, daemon: bool = False,
                 resume: bool = False) -> int:
    if daemon:  # the daemon's own output goes to supervisor.log: never let a write error escape
        _quiet_output_errors()
    run = _prepared_run(cfg, gpu=gpu, resume=resume)
    if isinstance(run, int):
        return run
    width = max(12, *(len(n) for n in cfg.components))
    run.subscribers.append(_event_printer(run, width))
    if show_logs:
        run.line_listeners.append(_line_printer(run, width))
    rc = asyncio.run(_supervise(run, daemon=daemon))
    if run.end.handover:
        say(f"rlsup: supervisor handed over; the components run on (logs and journal in {cfg.run_dir})")
        return EXIT_OK
    say(f"rlsup: {run.end.reason or 'run ended'}; logs and journal in {cfg.run_dir}")
    return rc


def _prepared_run(cfg: Any, *, gpu: str | None, resume: bool) -> Run | int:
    """The run, its run dir taken and prepared (an exit code where it cannot be). A multi-node Slurm job
    whose nodes do not all see the run dir gets a run that is refused, so that the journal says why."""
    from ..gpu.nvml import make_sampler
    from ..run.run import IncompatibleMonitors, Run
    from ..slurm.gpus import for_run as per_node_gpus
    from ..slurm.shared import check_job

    try:
        sampler = make_sampler(gpu)
    except ValueError as e:
        return fail(f"rlsup: {e}", EXIT_USAGE)
    sampler = per_node_gpus(cfg, sampler)  # a multi-node Slurm job: one sampler step per node
    run = Run(cfg, gpu_sampler=sampler, resume=resume)
    try:
        notes = run.prepare()
    except LockHeld as e:
        return fail(f"rlsup: {cfg.run_dir} is owned by a live supervisor (pid {e.owner.get('pid')}, "
                    f"host {e.owner.get('host')}). Stop it first, or use another --run-dir.")
    except (UnsafeRunDir, IncompatibleMonitors) as e:
        return fail(f"rlsup: {e}")
    for n in notes:
        say(f"rlsup: {n}")
    # In a multi-node Slurm job every node must see the run dir. Checked once the run dir is ours, so
    # that a failure is journalled (`rlsup status` says why the run ended) and nothing is started.
    if (blind := check_job(cfg)) is not None:
        say(f"rlsup: {blind}", err=True)
        run.end.refused = blind
    return run


def _event_printer(run: Run, width: int) -> Callable[[dict[str, Any]], None]:
    """--headless: one line per event; GPU samples left out, progress once per component every
    ``PROGRESS_EVERY_S`` (enough to see learning happen) and only while it runs."""
    last_progress: dict[str, float] = {}

    def printer(e: dict[str, Any]) -> None:
        if e["kind"] in ("gpu", "resources"):
            return
        if e["kind"] == "progress":
            comp = e["component"]
            if (e.get("step") is None or e["ts"] - last_progress.get(comp, 0.0) < PROGRESS_EVERY_S
                    or run.state["components"].get(comp, {}).get("state") != "running"):
                return
            last_progress[comp] = e["ts"]
        say(human(e, width=width))

    return printer


def _line_printer(run: Run, width: int) -> Callable[[Any], None]:
    """--headless --logs: every component's new output lines, masked and prefixed with its name."""
    sent: dict[str, int] = {}

    def print_lines(c: Any) -> None:
        start, lines = c.ring.since(sent.get(c.name, c.ring.first_seq))
        sent[c.name] = start + len(lines)
        if lines:
            say("".join(f"{c.name:<{width}} | {line}\n" for line in run.redact_lines(lines)), end="")

    return print_lines


async def _supervise(run: Run, *, daemon: bool) -> int:
    """Run until the end. A signal asks for an orderly end (:mod:`.signals` says which: a person's stop, or a
    preemption that asks for checkpoints first); a second one kills what is left."""
    loop = asyncio.get_running_loop()
    on_signal = _stop_on_signals(run, terminal=not daemon and signals.at_terminal())
    for s in signals.HANDLED:
        if s == signal_mod.SIGHUP and daemon:
            signal_mod.signal(s, signal_mod.SIG_IGN)  # no terminal to lose; survive stray hangups
            continue
        loop.add_signal_handler(s, on_signal, s)
    return await run.run()


def _stop_on_signals(run: Run, *, terminal: bool) -> Callable[[int], None]:
    """The handler of the signals that end a headless run: the first stops every component in order (a
    preemption asks for checkpoints first), the next kills what is left at once; a repeated notice is nothing."""
    hits = {"n": 0}

    def on_signal(signum: int) -> None:
        name = signal_mod.Signals(signum).name
        what = signals.meaning(signum, at_terminal=terminal)
        if what == "notice" and hits["n"]:
            return
        hits["n"] += 1
        if hits["n"] > 1 and all(c.current is None for c in run.components.values()):
            say(f"rlsup: {name}: every component has already stopped; the run is ending")  # (Slurm's requeue)
        elif hits["n"] > 1:
            say(f"rlsup: {name} again: killing what is left")
            for c in run.components.values():
                c.kill_now()
        elif (requeued := _requeued_job(run)) is not None or what == "stop":
            say(f"rlsup: {name}: stopping every component (again to kill at once)")
            # After rlsup's own `scontrol requeue` the SIGTERM is Slurm ending the batch step: say so.
            run.request_shutdown(f"{name} received" if requeued is None else
                                 f"job {requeued.job_id} requeued after a node failure ({name} from Slurm); "
                                 "this run goes on when Slurm starts the job again")
        else:
            say(f"rlsup: {name}: the machine is being taken; asking for checkpoints, then stopping every "
                "component (again to kill at once)")
            _preempt(run, name, notice=what == "notice")

    return on_signal


def _preempt(run: Run, name: str, *, notice: bool) -> None:
    """A preemption. Slurm's notice (SIGUSR1 in the job's batch step) is asked why (time limit, preemption),
    off the loop, and the job is requeued at the end."""
    launcher = run.slurm_launcher()
    if not (notice and launcher is not None):
        run.request_shutdown(f"{name} received: the platform is taking the machine (preemption)", preempted=True)
        return
    from ..slurm.jobs import notice_reason

    asyncio.get_running_loop().run_in_executor(None, notice_reason, launcher.job_id).add_done_callback(
        lambda f: run.request_shutdown(f.result(), preempted=True, requeue=True))


def _requeued_job(run: Run) -> Any:
    """The launcher of a job that rlsup itself requeued after a node failure (its SIGTERM is that requeue's)."""
    return next((c.launcher for c in run.components.values() if getattr(c.launcher, "requeued", False)), None)


def _quiet_output_errors() -> None:
    """Wrap stdout/stderr so that a failing write (ENOSPC on supervisor.log) is dropped, not raised."""

    class Quiet:
        def __init__(self, stream: Any):
            self._s = stream

        def write(self, text: str) -> int:
            write(self._s, text)
            return len(text)

        def flush(self) -> None:
            with contextlib.suppress(OSError, ValueError):
                self._s.flush()

        def __getattr__(self, name: str) -> Any:
            return getattr(self._s, name)

    sys.stdout = Quiet(sys.stdout)
    sys.stderr = Quiet(sys.stderr)


# ---------------------------------------------------------------------- down


def cmd_down(args: argparse.Namespace) -> int:
    from ..monitor.process import pid_alive

    if (orphan := _run_without_supervisor(args)) is not None:
        return _down_without_supervisor(orphan)

    async def fn(client: Any, paths: Any) -> int:
        printer = Printer()
        await client.subscribe(lambda m: printer.on_event(m["event"]) if m.get("type") == "event" else None,
                               lines=0, since=None, on_snapshot=lambda snap: printer.on_snapshot(snap, False))
        reply = await client.command("stop_all")
        if not reply.get("ok"):
            return fail(f"rlsup: {reply.get('error')}")
        say(f"rlsup: {reply.get('message')}")
        await client.closed.wait()
        deadline = time.monotonic() + 30
        sup_pid = int((client.server or {}).get("pid") or 0)
        # Returns when no process of the run is left, the supervisor itself included.
        while (is_locked(paths) or (sup_pid and pid_alive(sup_pid))) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        left = await asyncio.get_running_loop().run_in_executor(None, leftovers, paths)
        # What the supervisor itself could not end (it may have no marker, monitor or record left).
        said = {w.split(" (")[0] for w in left}
        left += [w for w in (printer.ended or {}).get("left") or [] if w.split(" (")[0] not in said]
        if is_locked(paths):
            left.insert(0, "the supervisor still holds the run dir")
        elif sup_pid and pid_alive(sup_pid):
            left.insert(0, f"the supervisor (pid {sup_pid}) released the run dir but is still running")
        return _said_down(paths, left)

    from .slurm_up import down_pending

    pending = down_pending(args.run_dir)  # a Slurm job whose supervisor has not started yet: cancel it
    return pending if pending is not None else client_call(args, fn)


def _run_without_supervisor(args: argparse.Namespace) -> Any:
    """The run ``down`` means when no supervisor owns it but it may still have processes (its
    supervisor crashed or was killed); None when a supervisor owns it, or no such run is found (the
    usual path then says why)."""
    if args.run_dir or os.environ.get("RLSUP_RUN_DIR"):
        paths = RunPaths(resolve_run_dir(args.run_dir))
        return paths if paths.events.exists() and not is_locked(paths) else None
    base = Path.cwd() / "runs"
    if live_runs(base):
        return None
    stranded = stranded_runs(base)
    return RunPaths(stranded[0]) if len(stranded) == 1 else None


def _stop_settings(paths: Any) -> dict[str, tuple[int, float]]:
    """component -> (stop signal, timeout) from the run's config, where it can still be read."""
    from ..config.loader import ConfigError, load_config

    config = (read_owner(paths) or {}).get("config")
    if not config or not os.path.exists(config):
        return {}
    try:
        cfg = load_config(config, run_dir=str(paths.root), overrides=stored_overrides(paths.root))
    except (ConfigError, OSError):
        return {}
    return {n: (int(signal_mod.Signals[c.stop.signal]), float(c.stop.timeout)) for n, c in cfg.components.items()}


def _down_without_supervisor(paths: Any) -> int:
    """``rlsup down`` on a run whose supervisor is gone: end its processes ourselves (see
    :mod:`rlsup.supervisor.run.teardown`), in order, and journal it."""
    from ..run.teardown import end_run
    from ..rundir.archive import how_it_ended

    shown = display_path(paths.root)
    ended = how_it_ended(paths)
    if ended is not None and not leftovers(paths):  # it ended by itself a moment ago, say: not a lost supervisor
        return fail(f"rlsup: the run in {shown} has already ended ({ended}) and no process of it is left; "
                    "nothing to stop")
    owner = read_owner(paths) or {}
    say(f"rlsup: no supervisor owns {shown} (supervisor pid {owner.get('pid', '?')} is gone); "
        "ending the run's processes without it")
    try:
        done = end_run(paths, stops=_stop_settings(paths), say=lambda m: say(f"rlsup: {m}"))
    except LockHeld as e:
        return fail(f"rlsup: a supervisor (pid {e.owner.get('pid')}) took {shown} over meanwhile; "
                    "run `rlsup down` again")
    if done.nothing_found and not done.ended_run:
        return fail(f"rlsup: no supervisor is running for {shown}, and no process of the run is left; "
                    "nothing to stop")
    for what in done.stopped:
        say(f"rlsup: ended {what}")
    if done.leftovers:
        say(f"rlsup: ended {len(done.leftovers)} process(es) of the run that no monitor owned")
    return _said_down(paths, done.left + leftovers(paths), " (written to its journal)")


def _said_down(paths: Any, left: list[str], journal: str = "") -> int:
    """What ``down`` could not end (EXIT_FAILED), or that the run is down."""
    if left:
        say(f"rlsup: down, but {len(left)} thing(s) could not be ended:", err=True)
        for what in left:
            say(f"  {what}", err=True)
        return EXIT_FAILED
    say(f"rlsup: {paths.root} is down; no process of the run is left{journal}")
    return EXIT_OK


def leftovers(paths: Any) -> list[str]:
    """Every process of the run still alive: marked ones, live monitors, cgroup members."""
    from ..monitor.process import find_marked, is_monitor_of, records
    from ..monitor.shim import cgroup_pids

    marked = find_marked(str(paths.root))
    seen = {p.pid for p in marked}
    out = [f"pid {p.pid} ({_cmd(p)}), marked with this run" for p in marked]
    for _, rec in records(paths.monitors):
        if is_monitor_of(rec, paths.root):
            out.append(f"monitor pid {rec['shim_pid']} of {rec['component']} (attempt {rec['attempt']})")
        if rec.get("cgroup"):
            for pid in cgroup_pids(rec["cgroup"]):
                if pid not in seen:
                    seen.add(pid)
                    out.append(f"pid {pid} in {rec['component']}'s cgroup {rec['cgroup']}")
    return out


def _cmd(p: Any) -> str:
    try:
        return " ".join(p.cmdline())[:80] or p.name()
    except Exception:  # noqa: BLE001 - a process that just went away
        return "?"


# ---------------------------------------------------------------------- restart-supervisor


def cmd_restart_supervisor(args: argparse.Namespace) -> int:
    info: dict[str, Any] = {}

    async def fn(client: Any, paths: Any) -> int:
        info["hello"] = client.server
        info["paths"] = paths
        # the successor reads the config as its predecessor did, whichever terminal asks: the same ${VAR}s, the
        # same relative paths (a component's next start keeps its command)
        pid = client.server.get("pid")
        info["env"], info["cwd"] = daemon.started_with(pid, client.server.get("host")) if isinstance(pid, int) \
            else (None, None)
        reply = await client.command("handover")
        if not reply.get("ok"):
            return fail(f"rlsup: {reply.get('error')}")
        info["monitors"] = reply.get("monitors") or []
        return EXIT_OK

    if (rc := client_call(args, fn)) != EXIT_OK:
        return rc
    paths, hello = info["paths"], info["hello"] or {}
    paths_owner = read_owner(paths) or {}
    old_pid = hello.get("pid") or paths_owner.get("pid")
    config = hello.get("config") or paths_owner.get("config")
    deadline = time.monotonic() + 30
    while is_locked(paths) and time.monotonic() < deadline:
        time.sleep(0.05)
    if is_locked(paths):
        return fail("rlsup: the old supervisor did not exit within 30 s; nothing else was done")
    if not config or not os.path.exists(config):
        return fail(f"rlsup: the old supervisor exited, but its config ({config}) is gone: start the new one "
                    f"with `rlsup up CONFIG --run-dir {paths.root}` (it takes the running components over)")

    try:
        proc = daemon.spawn(config, paths.root, [], env=info["env"], cwd=info["cwd"])
    except (UnsafeRunDir, OSError) as e:
        return fail(f"rlsup: the old supervisor exited, but a new one cannot start: {e}; the components keep "
                    f"running under their monitors (`rlsup up CONFIG --run-dir {paths.root}` takes them over)")
    if (problem := daemon.wait_ready(proc, paths.root)) is not None:
        return _daemon_failed(paths.root, f"rlsup: {problem}; the components keep running under their monitors. "
                                          f"The end of {paths.root}/{SUPERVISOR_LOG}:")
    say(f"rlsup: supervisor replaced (pid {old_pid} -> {daemon.owner_desc(paths.root)}); "
        f"{len(info['monitors'])} component(s) kept running")
    return EXIT_OK
