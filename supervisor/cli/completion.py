"""Shell completion for bash, zsh and fish (argcomplete): commands, options, and the component names of
the runs this command would find.

``rlsup completion SHELL`` prints the code a shell sources once (in ``~/.bashrc``, ``~/.zshrc`` or fish's
``config.fish``); then each Tab runs ``rlsup`` with argcomplete's variables set, and :func:`complete` answers
and exits before anything else happens. A NAME completes to the components of the run in ``--run-dir``
(else ``$RLSUP_RUN_DIR``, else every run dir under ``./runs``), read from their ``state.json``: no socket,
no supervisor needed, an ended run's names too. CONFIG completes to YAML files, ``--run-dir`` to folders.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from .common import formatter

SHELLS = ("bash", "zsh", "fish")
HOW = {
    "bash": 'eval "$(rlsup completion bash)"    # in ~/.bashrc',
    "zsh": 'eval "$(rlsup completion zsh)"     # in ~/.zshrc, after compinit',
    "fish": "rlsup completion fish | source     # in ~/.config/fish/config.fish",
}


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "completion", help="print the shell code for Tab completion (bash, zsh, fish)", formatter_class=formatter,
        description="Print the code that makes Tab complete rlsup's commands, options, config files and the "
                    "component names of your runs, for the shell named. Source it once from the shell's "
                    "start-up file:",
        epilog="\n".join(["  " + HOW[s] for s in SHELLS]))
    p.add_argument("shell", metavar="SHELL", choices=SHELLS, help="bash, zsh or fish")
    p.set_defaults(func=cmd_completion)


def cmd_completion(args: argparse.Namespace) -> int:
    from argcomplete import shellcode

    sys.stdout.write(shellcode(["rlsup"], shell=args.shell))
    return 0


def component_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """The component names of the runs a command would look at, that start with ``prefix``."""
    explicit = getattr(parsed_args, "run_dir", None) or os.environ.get("RLSUP_RUN_DIR")
    dirs = [Path(explicit)] if explicit else sorted(p for p in (Path.cwd() / "runs").glob("*") if p.is_dir())
    names: set[str] = set()
    for d in dirs:
        try:
            state = json.loads((d / "state.json").read_bytes())
        except (OSError, ValueError):
            continue
        comps = state.get("components") if isinstance(state, dict) else None
        if isinstance(comps, dict):
            names.update(str(n) for n in comps)
    return sorted(n for n in names if n.startswith(prefix))


def complete(parser: argparse.ArgumentParser) -> None:
    """When a shell asks for completions (argcomplete's ``_ARGCOMPLETE`` is set): answer and exit. Otherwise
    nothing, without importing argcomplete."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete
    from argcomplete.completers import DirectoriesCompleter, FilesCompleter

    by_dest = {"name": component_names, "config": FilesCompleter(("yaml", "yml")), "run_dir": DirectoriesCompleter()}
    for sub in _subparsers(parser):
        for action in sub._actions:
            if action.dest in by_dest:
                action.completer = by_dest[action.dest]  # type: ignore[attr-defined]
    argcomplete.autocomplete(parser)


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    out = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _subparsers(sub)
    return out

