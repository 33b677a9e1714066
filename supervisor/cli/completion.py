"""Shell completion for bash, zsh and fish (argcomplete): commands, options, YAML files, folders, and the
component names of the runs a command would find (from their ``state.json``: no supervisor needed)."""

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
            comps = json.loads((d / "state.json").read_bytes()).get("components")
        except (OSError, ValueError, AttributeError):  # unreadable, or not a JSON object
            continue
        names.update(map(str, comps if isinstance(comps, dict) else ()))
    return sorted(n for n in names if n.startswith(prefix))


def complete(parser: argparse.ArgumentParser) -> None:
    """When a shell asks for completions (argcomplete's ``_ARGCOMPLETE`` is set): answer and exit. Otherwise
    nothing, without importing argcomplete."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete
    from argcomplete.completers import DirectoriesCompleter, FilesCompleter

    by_dest = {"name": component_names, "config": FilesCompleter(("yaml", "yml")), "run_dir": DirectoriesCompleter()}
    for action in _actions(parser):
        if action.dest in by_dest:
            action.completer = by_dest[action.dest]  # type: ignore[attr-defined]
    argcomplete.autocomplete(parser)


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every action of ``parser`` and of its subparsers, at any depth."""
    return [*parser._actions, *(a for action in parser._actions if isinstance(action, argparse._SubParsersAction)
                                for sub in action.choices.values() for a in _actions(sub))]

