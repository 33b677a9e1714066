"""The ``rlsup`` command line. Imports the TUI only inside the commands that open it."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal as signal_mod
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from .config import Config, ConfigError, load_config

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
PROGRESS_EVERY_S = 5.0

DESCRIPTION = """\
rlsup supervises the processes of an RL post-training run (inference server, orchestrator,
trainer, ...) from one YAML file: it starts them in dependency order, restarts them with
backoff, keeps every log, tracks step progress and tells you what happened.
"""

EPILOG = """\
examples:
  rlsup check configs/demo.yaml            validate a config (every problem at once)
  rlsup up configs/demo.yaml --headless    supervise in the foreground, one line per event
  rlsup diagnose runs/demo/logs/trainer.log   what killed it?

exit codes: 0 success, 1 the run or check failed, 2 usage or config error.
docs: README.md (config reference, run directory layout, events).
"""


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


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

            --headless runs in the foreground and prints one line per event: for containers,
            CI and batch jobs. Ctrl-C (SIGINT) or SIGTERM stops everything in reverse dependency
            order; a second Ctrl-C kills what is left at once."""),
        epilog=textwrap.dedent("""\
            exit codes (--headless): 0 every component completed or you stopped the run;
            1 a component ended fatal (or another supervisor owns the run dir); 2 config error."""))
    up.add_argument("config", metavar="CONFIG", help="the run's YAML file")
    up.add_argument("--run-dir", metavar="DIR", help="run directory (default: the config's run_dir, else runs/<name>)")
    up.add_argument("--headless", action="store_true", help="supervise in the foreground without a TUI")
    up.add_argument("--logs", action="store_true", help="with --headless: also print every component's output, prefixed")
    up.add_argument("--gpu", metavar="SPEC", default=None,
                    help="GPU sampler: auto (default), none, or fake:8xH100 for demos (env RLSUP_GPU_SAMPLER)")

    check = sub.add_parser(
        "check", help="validate a config and report every problem", formatter_class=_formatter,
        description="Validate CONFIG: YAML syntax, unknown keys, types, dependencies, regexes, environment "
                    "variables. Every problem is printed as FILE:LINE:COL: key.path: message.",
        epilog="exit codes: 0 clean, 1 problems found, 2 the config cannot be read or validated.")
    check.add_argument("config", metavar="CONFIG")
    check.add_argument("--run-dir", metavar="DIR")

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
    try:
        return load_config(path, run_dir=run_dir)
    except ConfigError as e:
        for p in e.problems:
            print(str(p), file=sys.stderr)
        n = len(e.problems)
        print(f"rlsup: {n} problem{'s' if n != 1 else ''} in {path}", file=sys.stderr)
        return EXIT_USAGE


def cmd_check(args: argparse.Namespace) -> int:
    cfg = _load(args.config, args.run_dir)
    if isinstance(cfg, int):
        return cfg
    names = ", ".join(cfg.topo_order())
    print(f"{args.config}: ok ({len(cfg.components)} components, start order: {names}; run dir {cfg.run_dir})")
    return EXIT_OK


def cmd_diagnose(args: argparse.Namespace) -> int:
    from .diagnosis import diagnose_command

    return diagnose_command(args.files, args.json, sys.stdout)


def cmd_up(args: argparse.Namespace) -> int:
    cfg = _load(args.config, args.run_dir)
    if isinstance(cfg, int):
        return cfg
    if not args.headless:
        print("rlsup: only --headless is available in this version; run `rlsup up CONFIG --headless`",
              file=sys.stderr)
        return EXIT_USAGE
    return run_headless(cfg, show_logs=args.logs, gpu=args.gpu)


def run_headless(cfg: Config, *, show_logs: bool = False, gpu: str | None = None) -> int:
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
            loop.add_signal_handler(s, on_signal, s)
        return await sup.run()

    rc = asyncio.run(main())
    print(f"rlsup: {sup.end_reason or 'run ended'}; logs and journal in {cfg.run_dir}", flush=True)
    return rc


COMMANDS = {"up": cmd_up, "check": cmd_check, "diagnose": cmd_diagnose}


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
