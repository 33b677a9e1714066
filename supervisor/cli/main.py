"""The ``rlsup`` command line: one parser per command group, each beside its handler."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence

from ..records.version import VERSION
from . import attach, completion, control, fleet, offline, run_cmds, stack, why
from .common import EXIT_USAGE, _silence, formatter, say

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
  rlsup diagnose runs/demo                 what killed the run, across components?
  rlsup why trainer                        why was the trainer (re)started, and how did it end?
  rlsup stack trainer                      where is the trainer stuck? (Python stacks of its processes)
  rlsup restart-supervisor                 after upgrading rlsup: replace the supervisor, keep training
  eval "$(rlsup completion bash)"          Tab completes commands, options and component names (zsh, fish too)

Client commands (status, logs, events, start, stop, restart, resume, down, attach, bridge) find the
run from --run-dir, else $RLSUP_RUN_DIR, else the single live run under ./runs. status, logs,
events, attach and report also read a run that has ended.

exit codes: 0 success, 1 the run or check failed (or no supervisor is running), 2 usage or config error.
docs: README.md (config reference, run directory layout, events, protocol), docs/.
"""

GROUPS = (run_cmds, attach, control, stack, offline, fleet, why, completion)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rlsup", description=DESCRIPTION, epilog=EPILOG, formatter_class=formatter)
    p.add_argument("--version", action="version", version=f"rlsup {VERSION}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    for group in GROUPS:
        group.add_parsers(sub)
    return p


def _guard_terminal(args: argparse.Namespace) -> None:
    """On a terminal, what rlsup prints shows control characters instead of obeying them (a component's
    ``ESC c`` must not reset the user's terminal); ``--raw`` and pipes get the text as it is. Not for the
    commands that may start the TUI (it owns the terminal) or relay the protocol."""
    tui = args.cmd in ("attach", "fleet", "bridge") or (
        args.cmd == "up" and not (args.headless or args.detach))
    if tui or getattr(args, "raw", False):
        return
    for name in ("stdout", "stderr"):
        with contextlib.suppress(AttributeError, ValueError):  # a stream without isatty, or a closed one
            if (stream := getattr(sys, name)).isatty():  # imported for a terminal only: not a daemon's, not a pipe
                from ..render.terminal import EscapingStream

                setattr(sys, name, EscapingStream(stream))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    completion.complete(parser)  # a shell asking for Tab completions: answered, and the process exits
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        sys.exit(EXIT_USAGE)
    _guard_terminal(args)
    try:
        rc = int(args.func(args))
    except KeyboardInterrupt:
        rc = 130
    except BrokenPipeError:  # `rlsup ... | head`: the reader left; that is not an error of ours
        _silence(sys.stdout)
        rc = 0
    from ..rundir.journal import damage_notes

    for note in damage_notes():  # whatever read a journal this time, and however often: said once
        say(f"rlsup: {note}", err=True)
    sys.exit(rc)
