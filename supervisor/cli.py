"""The ``rlsup`` command line. Imports the TUI only inside the commands that open it."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal as signal_mod
import sys
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import Config

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
PROGRESS_EVERY_S = 5.0

DESCRIPTION = """\
rlsup supervises the processes of an RL post-training run (inference server, orchestrator,
trainer, ...) from one YAML file: it starts them in dependency order, restarts them with
backoff, keeps every log, tracks step progress and tells you what happened.
"""

EPILOG = """\
examples:
  rlsup up configs/demo.yaml               start the run in the background and open the TUI
  rlsup up configs/demo.yaml -d            start it in the background only
  rlsup status                             every component of the live run under ./runs
  rlsup logs trainer -f                    follow one component's output
  rlsup restart trainer                    restart one component (its dependents per restart_with)
  rlsup attach gpu-pod-1 --run-dir /workspace/runs/demo   the TUI of a run on another machine
  rlsup down                               stop everything, in reverse dependency order
  rlsup diagnose runs/demo/logs/trainer.log   what killed it?

Client commands (status, logs, events, start, stop, restart, resume, down, attach) find the run
from --run-dir, else $RLSUP_RUN_DIR, else the single live run under ./runs.

exit codes: 0 success, 1 the run or check failed (or no supervisor is running), 2 usage or config error.
docs: README.md (config reference, run directory layout, events, protocol).
"""

RUN_DIR_HELP = "the run's directory (default: $RLSUP_RUN_DIR, else the single live run under ./runs)"


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def _client(sub: Any, name: str, help: str, description: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=description, formatter_class=_formatter,
                       epilog="exit codes: 0 done, 1 no supervisor is running or the command was refused, "
                              "2 usage error.")
    p.add_argument("--run-dir", metavar="DIR", help=RUN_DIR_HELP)
    return p


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rlsup", description=DESCRIPTION, epilog=EPILOG, formatter_class=_formatter)
    p.add_argument("--version", action="version", version="rlsup 0.1.0")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")

    up = sub.add_parser(
        "up", help="start and supervise the components of a config", formatter_class=_formatter,
        description=textwrap.dedent("""\
            Start every component of CONFIG in dependency order and supervise it: restart on
            failure with backoff, stop the whole process tree on shutdown, keep every log under
            <run_dir>/logs, write <run_dir>/events.jsonl and <run_dir>/state.json.

            By default the supervisor runs as a background daemon (its own session, no terminal:
            closing the terminal, tmux or SSH never touches training) and the TUI opens on it.
            Leaving the TUI (q) leaves training running; `rlsup attach` brings it back. If a
            supervisor already owns the run dir, `up` attaches to it instead of starting another.

            -d starts the daemon only. --headless runs in the foreground without a TUI and prints
            one line per event (containers, CI, batch jobs); Ctrl-C (SIGINT) or SIGTERM stops
            everything in reverse dependency order, a second Ctrl-C kills what is left at once.

            Before starting, the fast preflight checks of `rlsup check` run; `up` refuses to start
            on errors (--skip-checks to start anyway)."""),
        epilog=textwrap.dedent("""\
            exit codes: 0 started (-d), detached, every component completed or you stopped the run
            (--headless); 1 a component ended fatal, a check failed or the daemon did not start;
            2 config or usage error."""))
    up.add_argument("config", metavar="CONFIG", help="the run's YAML file")
    up.add_argument("--run-dir", metavar="DIR", help="run directory (default: the config's run_dir, else runs/<name>)")
    up.add_argument("-d", "--detach", action="store_true", help="start the daemon only; print how to attach")
    up.add_argument("--headless", action="store_true", help="supervise in the foreground without a TUI")
    up.add_argument("--logs", action="store_true", help="with --headless: also print every component's output, prefixed")
    up.add_argument("--gpu", metavar="SPEC", default=None,
                    help="GPU sampler: auto (default), none, or fake:8xH100 for demos (env RLSUP_GPU_SAMPLER)")
    up.add_argument("--skip-checks", action="store_true", help="start even if preflight checks find errors")
    up.add_argument("--plain", action="store_true", help="follow the event stream as text instead of the TUI")
    up.add_argument("--daemon-child", action="store_true", help=argparse.SUPPRESS)

    att = sub.add_parser(
        "attach", help="open the TUI on a running supervisor (local or over SSH)", formatter_class=_formatter,
        description=textwrap.dedent("""\
            Open the TUI on a live run. Without TARGET: the local run (see --run-dir). With
            [user@]host[:port]: connect over SSH (paramiko; ~/.ssh/config, keys and the SSH agent are
            used), run `rlsup bridge` there and render the TUI here: only events cross the network.
            The link is re-established with backoff if it drops, without losing lifecycle events.

            Host keys are checked against ~/.ssh/known_hosts; an unknown host is refused with its
            fingerprint (--accept-new-host-key to trust it and record it)."""),
        epilog="exit codes: 0 detached (training continues), 1 no supervisor or the connection failed, 2 usage.")
    att.add_argument("target", nargs="?", metavar="[USER@]HOST[:PORT]", help="remote host (default: this machine)")
    att.add_argument("--run-dir", metavar="DIR", help=RUN_DIR_HELP + " (on the remote host for SSH)")
    att.add_argument("--accept-new-host-key", action="store_true", help="trust and record an unknown host key")
    att.add_argument("--remote-cmd", metavar="CMD", default=None,
                     help="how to run rlsup on the remote host (default: $RLSUP_REMOTE_CMD or `rlsup`), "
                          "e.g. /workspace/.venv/bin/rlsup")
    att.add_argument("-i", "--identity", metavar="FILE", help="private key file (in addition to the agent and config)")
    att.add_argument("--plain", action="store_true", help="follow the event stream as text instead of the TUI")

    st = _client(sub, "status", "state of every component of a live run",
                 "Print every component's state, pid, attempt, uptime, step, rate, ETA, checkpoint, the last "
                 "exit with its diagnosis, flags, and GPUs. --json prints the shape documented in the README.")
    st.add_argument("--json", action="store_true", help="print JSON for scripts")
    for name, what in (("start", "start a stopped (or completed/fatal) component"),
                       ("stop", "stop a component and keep it stopped (its tree: SIGTERM, then SIGKILL)"),
                       ("restart", "restart a component now (a fresh attempt; resumes if `resume` is set)")):
        c = _client(sub, name, what, what[0].upper() + what[1:] + ".")
        c.add_argument("name", metavar="NAME", help="component name")
    rs = _client(sub, "resume", "restart a component from a checkpoint",
                 "Restart NAME from its latest complete checkpoint (or --step N), with the `resume.args` "
                 "of its config.")
    rs.add_argument("name", metavar="NAME")
    rs.add_argument("--step", type=int, metavar="N", help="resume from the checkpoint of step N")
    lg = _client(sub, "logs", "print a component's recent output; -f to follow",
                 "Print the last N lines of NAME's output (ANSI colours stripped, progress bars folded; the "
                 "byte-exact output is in <run_dir>/logs/NAME.log). -f keeps printing new lines.")
    lg.add_argument("name", metavar="NAME")
    lg.add_argument("-n", "--lines", type=int, default=50, metavar="N", help="how many lines (default 50)")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until Ctrl-C")
    ev = _client(sub, "events", "print the run's journal; -f to follow",
                 "Print the journal (<run_dir>/events.jsonl) one human-readable line per event. Works on a "
                 "finished run with --run-dir. -f follows a live run.")
    ev.add_argument("-n", "--lines", type=int, default=None, metavar="N", help="only the last N events")
    ev.add_argument("-f", "--follow", action="store_true", help="keep printing new events until Ctrl-C")
    ev.add_argument("--json", action="store_true", help="one JSON object per line, as in events.jsonl")
    _client(sub, "down", "stop every component in order and end the supervisor",
            "Stop every component in reverse dependency order (each with its stop signal, then SIGKILL after "
            "its stop timeout) and end the supervisor. Returns when no process of the run is left.")
    br = _client(sub, "bridge", "relay stdin/stdout to a run's control socket (what SSH attach runs)",
                 "Relay stdin/stdout to <run_dir>/rlsup.sock byte for byte. `rlsup attach HOST` runs this on "
                 "the remote host; you rarely run it by hand.")
    del br

    from .fleet import add_fleet_parser

    add_fleet_parser(sub)

    rep = sub.add_parser(
        "report", help="write a Markdown incident report of a run", formatter_class=_formatter,
        description="A Markdown incident report of the run: summary, components, flags with evidence, every "
                    "attempt with its exit, diagnosis and evidence lines, resource figures, latest checkpoints, "
                    "suggested next steps and the timeline. Works on live and finished runs; secret values "
                    "(variables named *KEY*, *TOKEN*, *SECRET*, *PASSWORD*) are masked.",
        epilog="Without --run-dir: the live run under ./runs, else the most recently active run dir there.")
    rep.add_argument("--run-dir", metavar="DIR", help="the run's directory")
    rep.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")

    check = sub.add_parser(
        "check", help="validate a config and report every problem", formatter_class=_formatter,
        description=textwrap.dedent("""\
            Preflight: validate CONFIG (YAML syntax, unknown keys, types, dependencies, regexes,
            environment variables; printed as FILE:LINE:COL: key.path: message), then check the
            machine: every command resolvable (`python -m X` importable in that interpreter), every
            cwd present, output directories writable (write, fsync, read back) with enough free disk,
            probe ports free (naming the holder), GPUs in `gpus` present with their free memory and
            overlaps, env_file readable. Every problem is listed at once, each with what to do.
            --smoke also runs each component's `smoke:` command (e.g. one dry-run step)."""),
        epilog="exit codes: 0 clean, 1 problems found, 2 the config cannot be read or validated.")
    check.add_argument("config", metavar="CONFIG")
    check.add_argument("--run-dir", metavar="DIR")
    check.add_argument("--smoke", action="store_true", help="also run each component's `smoke:` command")
    check.add_argument("--smoke-timeout", type=float, default=60.0, metavar="S", help="per smoke command (default 60)")
    check.add_argument("--min-free-gb", type=float, default=5.0, metavar="GB",
                       help="free disk space needed where the run writes (default 5)")
    check.add_argument("--gpu", metavar="SPEC", help="GPU sampler as in `up` (auto, none, fake:2xA40)")

    diag = sub.add_parser(
        "diagnose", help="diagnose a saved log file offline", formatter_class=_formatter,
        description="Read log files and name what killed the process: category, exception, the line in your "
                    "own code, the last step, and the evidence lines. Category `none` means the log shows no "
                    "failure.")
    diag.add_argument("files", nargs="+", metavar="FILE")
    diag.add_argument("--json", action="store_true", help="print JSON (the shape of the `diagnosis` field of events)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        rc = COMMANDS[args.cmd](args)
    except KeyboardInterrupt:
        rc = 130
    sys.exit(rc)


def _load(path: str, run_dir: str | None) -> Config | int:
    from .config import ConfigError, load_config  # pydantic: only for commands that read a config

    try:
        return load_config(path, run_dir=run_dir)
    except ConfigError as e:
        print(e.report(path), file=sys.stderr)
        return EXIT_USAGE


def cmd_check(args: argparse.Namespace) -> int:
    from .gpu import make_sampler
    from .preflight import exit_code, format_findings, run_checks

    cfg = _load(args.config, args.run_dir)
    if isinstance(cfg, int):
        return cfg
    try:
        sampler = make_sampler(args.gpu)
    except ValueError as e:
        print(f"rlsup: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        findings = run_checks(cfg, smoke=args.smoke, gpu_sampler=sampler, min_free_gb=args.min_free_gb,
                              smoke_timeout=args.smoke_timeout,
                              on_progress=lambda m: print(f"rlsup: {m}", file=sys.stderr, flush=True))
    finally:
        sampler.close()
    names = ", ".join(cfg.topo_order())
    print(f"{args.config}: config ok ({len(cfg.components)} components, start order: {names}; "
          f"run dir {cfg.run_dir})")
    print(format_findings(findings, config_path=args.config))
    return exit_code(findings)


def _fast_checks(cfg: Config, path: str) -> bool:
    """`up`'s preflight: True to go on. Errors and warnings are printed; errors stop the start."""
    from .preflight import exit_code, format_findings, run_checks

    findings = [f for f in run_checks(cfg, fast=True) if f.severity != "info"]
    if findings:
        print(format_findings(findings, config_path=path), file=sys.stderr)
    if exit_code(findings):
        print("rlsup: not starting; fix the above, or pass --skip-checks to start anyway", file=sys.stderr)
        return False
    return True


def cmd_diagnose(args: argparse.Namespace) -> int:
    from .diagnosis import diagnose_command

    return diagnose_command(args.files, args.json, sys.stdout)


def cmd_up(args: argparse.Namespace) -> int:
    cfg = _load(args.config, args.run_dir)
    if isinstance(cfg, int):
        return cfg
    if args.headless:
        if not (args.skip_checks or args.daemon_child) and not _fast_checks(cfg, args.config):
            return EXIT_FAILED
        return run_headless(cfg, show_logs=args.logs, gpu=args.gpu, daemon=args.daemon_child)
    from pathlib import Path

    from . import daemon
    from .rundir import RunPaths, is_locked

    run_dir = Path(cfg.run_dir)
    shown = daemon.display_path(run_dir)
    if is_locked(RunPaths(run_dir)):
        print(f"rlsup: a supervisor is already running {shown} ({daemon.owner_desc(run_dir)}); "
              + ("nothing started" if args.detach else "attaching to it"), file=sys.stderr)
        if args.detach:
            return EXIT_OK
        return _attach_local(run_dir, plain=args.plain)
    if not args.skip_checks and not _fast_checks(cfg, args.config):
        return EXIT_FAILED
    extra = ["--gpu", args.gpu] if args.gpu else []
    proc = daemon.spawn(args.config, run_dir, extra)
    problem = daemon.wait_ready(proc, run_dir)
    if problem is not None:
        print(f"rlsup: {problem}; the end of {shown}/{daemon.DAEMON_LOG}:", file=sys.stderr)
        for line in daemon.log_tail(run_dir):
            print(f"  {line}", file=sys.stderr)
        return EXIT_FAILED
    hint = _attach_hint(run_dir)
    if args.detach:
        print(f"rlsup: supervising {cfg.name} in the background ({daemon.owner_desc(run_dir)})")
        print(f"  run dir:  {shown}")
        print(f"  attach:   {hint}")
        print(f"  status:   rlsup status{_run_dir_arg(run_dir)}")
        print(f"  stop:     rlsup down{_run_dir_arg(run_dir)}")
        return EXIT_OK
    return _attach_local(run_dir, plain=args.plain)


def _run_dir_arg(run_dir: Any) -> str:
    """`` --run-dir X`` unless discovery would find this run without it."""
    from pathlib import Path

    from .daemon import display_path

    default = Path.cwd() / "runs"
    if Path(run_dir).parent == default:
        return ""
    return f" --run-dir {display_path(Path(run_dir))}"


def _attach_hint(run_dir: Any) -> str:
    return f"rlsup attach{_run_dir_arg(run_dir)}"


def _attach_local(run_dir: Any, *, plain: bool = False) -> int:
    from .client import unix_connector
    from .rundir import RunPaths

    connect = unix_connector(RunPaths(run_dir).sock, name="tui" if not plain else "follow")
    return _view(connect, target=f"local {run_dir}", hint=_attach_hint(run_dir), plain=plain)


def _view(connect: Any, *, target: str, hint: str, plain: bool) -> int:
    """The TUI on a connection, or a text follower (``--plain``, or stdout is not a terminal)."""
    if not plain and sys.stdout.isatty() and sys.stdin.isatty():
        try:
            from rlsup.tui.app import run_tui
        except ImportError as e:  # the TUI's dependencies missing: say so, follow as text
            print(f"rlsup: the TUI is not available ({e}); following as text", file=sys.stderr)
        else:
            return int(run_tui(connect, target=target, attach_hint=hint))
    return asyncio.run(_follow_plain(connect, hint))


async def _follow_plain(connect: Any, hint: str) -> int:
    from .client import Session
    from .follow import Printer

    printer = Printer(replay=True)
    session = Session(connect, printer, lines=0)
    task = asyncio.ensure_future(session.run())
    loop = asyncio.get_running_loop()
    for s in (signal_mod.SIGINT, signal_mod.SIGTERM):
        loop.add_signal_handler(s, session.close)
    await task
    if printer.ended is None:
        print(f"rlsup: detached; training continues. Re-attach with: {hint}", file=sys.stderr)
    return EXIT_OK


def run_headless(cfg: Config, *, show_logs: bool = False, gpu: str | None = None, daemon: bool = False) -> int:
    from .events import human
    from .gpu import make_sampler
    from .rundir import LockHeld
    from .supervisor import Supervisor

    try:
        sampler = make_sampler(gpu)
    except ValueError as e:
        print(f"rlsup: {e}", file=sys.stderr)
        return EXIT_USAGE
    sup = Supervisor(cfg, gpu_sampler=sampler)
    try:
        notes = sup.prepare()
    except LockHeld as e:
        print(f"rlsup: {cfg.run_dir} is owned by a live supervisor (pid {e.owner.get('pid')}, "
              f"host {e.owner.get('host')}). Stop it first, or use another --run-dir.", file=sys.stderr)
        return EXIT_FAILED
    for n in notes:
        print(f"rlsup: {n}", flush=True)
    width = max(12, *(len(n) for n in cfg.components))

    last_progress: dict[str, float] = {}

    def printer(e: dict[str, Any]) -> None:
        if e["kind"] == "gpu":
            return
        if e["kind"] == "progress":
            # One progress line per component every few seconds: enough to see learning happen.
            comp = e["component"]
            if e.get("step") is None or e["ts"] - last_progress.get(comp, 0.0) < PROGRESS_EVERY_S:
                return
            last_progress[comp] = e["ts"]
        print(human(e, width=width), flush=True)

    sup.subscribers.append(printer)
    if show_logs:
        sent: dict[str, int] = {}

        def print_lines(c: Any) -> None:
            start, lines = c.ring.since(sent.get(c.name, 0))
            sent[c.name] = start + len(lines)
            out = "".join(f"{c.name:<{width}} | {line}\n" for line in lines)
            sys.stdout.write(out)
            sys.stdout.flush()

        sup.line_listeners.append(print_lines)

    async def main() -> int:
        loop = asyncio.get_running_loop()
        hits = {"n": 0}

        def on_signal(signum: int) -> None:
            hits["n"] += 1
            name = signal_mod.Signals(signum).name
            if hits["n"] == 1:
                print(f"rlsup: {name}: stopping every component (again to kill at once)", flush=True)
                sup.request_shutdown(f"{name} received")
            else:
                print(f"rlsup: {name} again: killing what is left", flush=True)
                for c in sup.components.values():
                    if c.tree is not None:
                        c.tree.send(signal_mod.SIGKILL)

        for s in (signal_mod.SIGINT, signal_mod.SIGTERM, signal_mod.SIGHUP):
            if s == signal_mod.SIGHUP and daemon:
                signal_mod.signal(s, signal_mod.SIG_IGN)  # no terminal to lose; survive stray hangups
                continue
            loop.add_signal_handler(s, on_signal, s)
        return await sup.run()

    rc = asyncio.run(main())
    print(f"rlsup: {sup.end_reason or 'run ended'}; logs and journal in {cfg.run_dir}", flush=True)
    return rc


# ---------------------------------------------------------------------- client commands


def _live_run(args: argparse.Namespace) -> Any:
    """The live run's paths, or an exit code after saying why there is none."""
    from .daemon import AmbiguousRun, NoRun, require_live, resolve_run_dir

    try:
        return require_live(resolve_run_dir(args.run_dir))
    except NoRun as e:
        print(f"rlsup: {e}", file=sys.stderr)
        return EXIT_FAILED
    except AmbiguousRun as e:
        print(f"rlsup: {e}", file=sys.stderr)
        return EXIT_USAGE


async def _open(paths: Any, name: str) -> Any:
    from .client import Client

    return await Client.open_unix(paths.sock, name=name)


def _client_call(args: argparse.Namespace, fn: Any) -> int:
    """Run ``fn(client, paths)`` against the live run; connection problems become exit 1."""
    from .client import NotRunning, RequestFailed
    from .protocol import ProtocolError

    paths = _live_run(args)
    if isinstance(paths, int):
        return paths

    async def go() -> int:
        client = await _open(paths, args.cmd)
        try:
            return int(await fn(client, paths))
        finally:
            await client.close()

    try:
        return asyncio.run(go())
    except (NotRunning, ProtocolError, RequestFailed, ConnectionError) as e:
        print(f"rlsup: {e}", file=sys.stderr)
        return EXIT_FAILED


def cmd_status(args: argparse.Namespace) -> int:
    import json

    from .status import format_status

    async def fn(client: Any, paths: Any) -> int:
        snap = await client.snapshot(lines=0)
        view = snap["state"]
        if args.json:
            print(json.dumps(view, indent=2, default=str))
        else:
            print(format_status(view))
        return EXIT_OK

    return _client_call(args, fn)


def _command(args: argparse.Namespace, command: str, **cargs: Any) -> int:
    async def fn(client: Any, paths: Any) -> int:
        reply = await client.command(command, args.name, **cargs)
        if reply.get("ok"):
            print(f"rlsup: {reply.get('message', 'done')}")
            return EXIT_OK
        print(f"rlsup: {reply.get('error', 'refused')}", file=sys.stderr)
        return EXIT_FAILED

    return _client_call(args, fn)


def cmd_start(args: argparse.Namespace) -> int:
    return _command(args, "start")


def cmd_stop(args: argparse.Namespace) -> int:
    return _command(args, "stop")


def cmd_restart(args: argparse.Namespace) -> int:
    return _command(args, "restart")


def cmd_resume(args: argparse.Namespace) -> int:
    return _command(args, "resume", **({"step": args.step} if args.step is not None else {}))


def cmd_logs(args: argparse.Namespace) -> int:
    from .client import Session

    async def fn(client: Any, paths: Any) -> int:
        snap = await client.snapshot(lines=max(0, args.lines))
        comps = snap["state"]["components"]
        if args.name not in comps:
            print(f"rlsup: no component {args.name!r}; components: {', '.join(comps)}", file=sys.stderr)
            return EXIT_FAILED
        block = snap["logs"][args.name]
        sys.stdout.write("".join(line + "\n" for line in block["lines"]))
        sys.stdout.flush()
        if not args.follow:
            return EXIT_OK
        from .follow import Printer

        printer = Printer(events=False, logs={args.name}, prefix_logs=False,
                          log_file_hint={args.name: str(paths.log(args.name))})

        async def connect() -> Any:
            return await _open(paths, "logs")

        session = Session(connect, printer, lines=0)
        session.log_next[args.name] = block["seq"] + len(block["lines"])
        session.seq = snap.get("seq", 0)
        return await _until_interrupted(session)

    return _client_call(args, fn)


async def _until_interrupted(session: Any) -> int:
    loop = asyncio.get_running_loop()
    for s in (signal_mod.SIGINT, signal_mod.SIGTERM):
        loop.add_signal_handler(s, session.close)
    await session.run()
    return EXIT_OK


def cmd_events(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from .daemon import AmbiguousRun, NoRun, resolve_run_dir
    from .events import human
    from .journal import read_events
    from .rundir import RunPaths

    try:
        paths = RunPaths(resolve_run_dir(args.run_dir))
    except (NoRun, AmbiguousRun) as e:
        print(f"rlsup: {e}", file=sys.stderr)
        return EXIT_FAILED if isinstance(e, NoRun) else EXIT_USAGE
    if not paths.events.exists():
        print(f"rlsup: no journal at {paths.events}", file=sys.stderr)
        return EXIT_FAILED
    events = list(read_events(Path(paths.events)))
    if args.lines is not None:
        events = events[-args.lines:] if args.lines > 0 else []
    width = max([12, *(len(e.get("component") or "") for e in events)])
    for e in events:
        print(json.dumps(e) if args.json else human(e, width=width))
    sys.stdout.flush()
    if not args.follow:
        return EXIT_OK
    from .client import Session
    from .follow import Printer

    live = _live_run(args) if args.run_dir else _live_run(argparse.Namespace(run_dir=str(paths.root)))
    if isinstance(live, int):
        return live

    class JsonPrinter(Printer):
        def _event(self, e: dict[str, Any]) -> None:
            from .events import is_lifecycle

            if is_lifecycle(e.get("kind", "")):
                self._w(json.dumps(e) + "\n")

    printer = (JsonPrinter if args.json else Printer)()
    printer.width = width

    async def connect() -> Any:
        return await _open(live, "events")

    async def go() -> int:
        session = Session(connect, printer, lines=0)
        session.seq = events[-1]["seq"] if events else 0
        return await _until_interrupted(session)

    return asyncio.run(go())


def cmd_down(args: argparse.Namespace) -> int:
    import time

    from .follow import Printer
    from .process import find_marked
    from .rundir import is_locked

    async def fn(client: Any, paths: Any) -> int:
        printer = Printer()
        snap = await client.subscribe(lambda m: printer.on_event(m["event"]) if m.get("type") == "event" else None,
                                      lines=0, since=None)
        printer.on_snapshot(snap, False)
        reply = await client.command("stop_all")
        if not reply.get("ok"):
            print(f"rlsup: {reply.get('error')}", file=sys.stderr)
            return EXIT_FAILED
        print(f"rlsup: {reply.get('message')}", flush=True)
        await client.closed.wait()
        deadline = time.monotonic() + 30
        while is_locked(paths) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        left = find_marked(str(paths.root))
        if is_locked(paths) or left:
            what = f"{len(left)} process(es) still running: {', '.join(str(p.pid) for p in left)}" if left else \
                "the supervisor still holds the run dir"
            print(f"rlsup: down, but {what}", file=sys.stderr)
            return EXIT_FAILED
        print(f"rlsup: {paths.root} is down; no process of the run is left")
        return EXIT_OK

    return _client_call(args, fn)


def cmd_bridge(args: argparse.Namespace) -> int:
    from .bridge import relay

    paths = _live_run(args)
    if isinstance(paths, int):
        return paths
    return relay(paths.sock)


def cmd_attach(args: argparse.Namespace) -> int:
    if not args.target:
        paths = _live_run(args)
        if isinstance(paths, int):
            return paths
        return _attach_local(paths.root, plain=args.plain)
    from .ssh import SshError, SshTarget, ssh_connector

    try:
        target = SshTarget.parse(args.target, identity=args.identity)
        connect = ssh_connector(target, run_dir=args.run_dir, remote_cmd=args.remote_cmd,
                                accept_new_host_key=args.accept_new_host_key)
        asyncio.run(_probe(connect))
    except SshError as e:
        print(f"rlsup: {e}", file=sys.stderr)
        return EXIT_FAILED
    hint = f"rlsup attach {args.target}" + (f" --run-dir {args.run_dir}" if args.run_dir else "")
    return _view(connect, target=args.target, hint=hint, plain=args.plain)


async def _probe(connect: Any) -> None:
    """Connect once before opening a view, so a refused host key or a missing run is a clear error."""
    client = await connect()
    await client.close()


def cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .daemon import AmbiguousRun, NoRun, display_path, resolve_run_dir
    from .journal import write_atomic
    from .report import build_report

    try:
        run_dir = resolve_run_dir(args.run_dir)
    except AmbiguousRun as e:
        print(f"rlsup: {e}", file=sys.stderr)
        return EXIT_USAGE
    except NoRun:
        runs = sorted((p for p in (Path.cwd() / "runs").glob("*/events.jsonl")), key=lambda p: p.stat().st_mtime)
        if not runs:
            print("rlsup: no run directory under ./runs; pass --run-dir DIR", file=sys.stderr)
            return EXIT_FAILED
        run_dir = runs[-1].parent
        print(f"rlsup: reporting on {display_path(run_dir)} (most recently active)", file=sys.stderr)
    try:
        text = build_report(run_dir)
    except FileNotFoundError as e:
        print(f"rlsup: {e}", file=sys.stderr)
        return EXIT_FAILED
    if args.output:
        write_atomic(Path(args.output), text.encode())
        print(f"rlsup: report written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_fleet(args: argparse.Namespace) -> int:
    from .fleet import cmd_fleet as fleet

    return int(fleet(args))


COMMANDS = {
    "up": cmd_up, "check": cmd_check, "diagnose": cmd_diagnose, "status": cmd_status, "start": cmd_start,
    "stop": cmd_stop, "restart": cmd_restart, "resume": cmd_resume, "logs": cmd_logs, "events": cmd_events,
    "down": cmd_down, "bridge": cmd_bridge, "attach": cmd_attach, "report": cmd_report,
    "fleet": cmd_fleet,
}


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
