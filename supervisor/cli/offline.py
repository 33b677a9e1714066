"""Commands that need no live run: ``rlsup check``, ``rlsup schema``, ``rlsup diagnose``, ``rlsup report``."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from .common import EXIT_OK, EXIT_USAGE, add_raw, fail, formatter, load, on_run, say, set_option


def add_parsers(sub: Any) -> None:
    check = sub.add_parser(
        "check", help="validate a config and report every problem", formatter_class=formatter,
        description=textwrap.dedent("""\
            Preflight: validate CONFIG (YAML syntax, unknown keys, types, dependencies, regexes,
            environment variables; printed as FILE:LINE:COL: key.path: message), then check the
            machine: every command resolvable (`python -m X` importable in that interpreter, also
            inside `exec ...` and `shell: true` commands), every cwd present, output directories
            writable (write, fsync, read back) with enough free disk, probe ports free (naming the
            holder), GPUs in `gpus` present with their free memory and overlaps, an inference
            server's memory fraction against free GPU memory, env_file readable. Every problem is
            listed at once, each with what to do (a missing engine: the extra that installs it).
            --smoke also runs each component's `smoke:` command (e.g. one dry-run step)."""),
        epilog="exit codes: 0 clean, 1 problems found, 2 the config cannot be read or validated.")
    check.add_argument("config", metavar="CONFIG")
    check.add_argument("--run-dir", metavar="DIR")
    check.add_argument("--smoke", action="store_true", help="also run each component's `smoke:` command")
    check.add_argument("--smoke-timeout", type=float, default=60.0, metavar="S", help="per smoke command (default 60)")
    check.add_argument("--min-free-gb", type=float, default=5.0, metavar="GB",
                       help="free disk space needed where the run writes (default 5)")
    check.add_argument("--gpu", metavar="SPEC", help="GPU sampler as in `up` (auto, none, fake:2xA40)")
    set_option(check)
    check.set_defaults(func=cmd_check)

    schema = sub.add_parser(
        "schema", help="print the config's JSON Schema (for your editor)", formatter_class=formatter,
        description=textwrap.dedent("""\
            Print the JSON Schema (draft 2020-12) of a config file, generated from rlsup's own models: an
            editor with the YAML language server then completes keys and flags mistakes as you type. Save it
            and name it in the first line of a config:
              rlsup schema > rlsup.schema.json
              # yaml-language-server: $schema=./rlsup.schema.json
            `rlsup check` stays the judge: it sees interpolated values, the machine and the cluster."""))
    schema.add_argument("-o", "--output", metavar="FILE", help="write it to FILE instead of standard output")
    schema.set_defaults(func=cmd_schema)

    diag = sub.add_parser(
        "diagnose", help="diagnose a saved log, or a whole run dir", formatter_class=formatter,
        description="Read log files and name what killed the process: category, exception, the line in your "
                    "own code, the last step, and the evidence lines. Category `none` means the log shows no "
                    "failure. Given a run directory, read every component's log and the journal and name the "
                    "run's root cause, with the symptoms it caused in other components.",
        epilog="examples:\n  rlsup diagnose runs/demo/logs/trainer.log\n  rlsup diagnose runs/demo --json")
    diag.add_argument("files", nargs="+", metavar="FILE|RUN_DIR")
    diag.add_argument("--json", action="store_true", help="print JSON (the shape of the `diagnosis` field of events)")
    add_raw(diag)
    diag.set_defaults(func=cmd_diagnose)

    rep = sub.add_parser(
        "report", help="write a Markdown incident report of a run", formatter_class=formatter,
        description="A Markdown incident report of the run: summary and root cause, components, flags with "
                    "evidence, every attempt with its exit, diagnosis and evidence lines, resource figures, "
                    "latest checkpoints, suggested next steps and the timeline. Works on live and finished runs; "
                    "secret values are masked.",
        epilog="Without --run-dir: the live run under ./runs, else the most recently active run dir there.")
    rep.add_argument("--run-dir", metavar="DIR", help="the run's directory")
    rep.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    add_raw(rep)
    rep.set_defaults(func=cmd_report)


def cmd_schema(args: argparse.Namespace) -> int:
    from ..config.schema import config_schema

    return _emit(json.dumps(config_schema(), indent=2) + "\n", args.output, "wrote the config schema to")


def cmd_check(args: argparse.Namespace) -> int:
    from ..gpu.nvml import make_sampler
    from ..preflight.checks import exit_code, format_findings, run_checks

    cfg = load(args.config, args.run_dir, args.overrides)
    if isinstance(cfg, int):
        return cfg
    try:
        sampler = make_sampler(args.gpu)
    except ValueError as e:
        return fail(f"rlsup: {e}", EXIT_USAGE)
    try:
        findings = run_checks(cfg, smoke=args.smoke, gpu_sampler=sampler, min_free_gb=args.min_free_gb,
                              smoke_timeout=args.smoke_timeout, on_progress=lambda m: say(f"rlsup: {m}", err=True))
    finally:
        sampler.close()
    names = ", ".join(cfg.topo_order())
    say(f"{args.config}: config ok ({len(cfg.components)} components, start order: {names}; run dir {cfg.run_dir})")
    say(format_findings(findings, config_path=args.config))
    return exit_code(findings)


def cmd_diagnose(args: argparse.Namespace) -> int:
    from ..diagnosis import diagnose_command

    return int(diagnose_command(args.files, args.json, sys.stdout))


@on_run
def cmd_report(args: argparse.Namespace, paths: Any) -> int:
    from ..render.report import build_report

    try:
        text = build_report(paths.root)
    except FileNotFoundError as e:
        return fail(f"rlsup: {e}")
    return _emit(text, args.output, "report written to")


def _emit(text: str, output: str | None, said: str) -> int:
    """``text`` to the file ``output`` (saying so on stderr), else to stdout."""
    from ..rundir.journal import write_atomic

    if output:
        write_atomic(Path(output), text.encode(), mode=0o644)
        say(f"rlsup: {said} {output}", err=True)
    else:
        say(text, end="")
    return EXIT_OK
