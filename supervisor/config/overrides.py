"""``--set KEY.PATH=VALUE``: a change to the config given on the command line, as every RL stack has one.

``KEY.PATH`` is the dotted path of a key in the file (``components.trainer.env.LR``); a part that is a
number indexes a list (``components.trainer.watch.0.path``). ``VALUE`` is read as YAML, as if it were
written in the file at that place: ``1e-5`` and ``python -m x`` are strings, ``3`` a number, ``[a, b]`` a
list, ``null`` no value, and ``${VAR}`` expands like the file's. Missing mappings on the way are
created. An override replaces the value at its path only there: where the file shares a subtree
between two places (a YAML alias), the other place keeps the file's value.

The file and its overrides are validated together; a problem at or below an overridden path is
reported at the override (``--set components.trainer.restart.max_restarts=x: ...``), not at the file.
``name`` and ``run_dir`` cannot be overridden: they say which run dir a run is (``--run-dir`` is the
option for that).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from .model import Path_

FIXED = ("name", "run_dir")
_PART = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class Override:
    text: str  # as typed: KEY.PATH=VALUE
    path: Path_
    value: Any


def parse(text: str) -> tuple[Override | None, str | None]:
    """``KEY.PATH=VALUE`` as an :class:`Override`, or None and what is wrong with it."""
    key, eq, raw = text.partition("=")
    key = key.strip()
    if not eq or not key:
        return None, "expected KEY.PATH=VALUE, e.g. --set components.trainer.env.LR=1e-5"
    parts = key.split(".")
    if not all(_PART.match(p) for p in parts):
        return None, (f"{key!r} is not a key path: names separated by dots (letters, digits, _ and -), "
                      "e.g. components.trainer.env.LR")
    if parts[0] in FIXED:
        return None, f"{parts[0]} says which run dir the run is and cannot be overridden; use --run-dir DIR"
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at column {mark.column + 1}" if mark is not None else ""
        return None, f"the value is not valid YAML{where}: {getattr(e, 'problem', None) or e}; quote it"
    path: Path_ = tuple(int(p) if p.isdigit() else p for p in parts)
    return Override(text, path, value), None


def apply(data: dict[str, Any], override: Override) -> str | None:
    """Set the override's value in ``data`` (copying each container on its path, so nothing shared with
    another place changes); None, or why it cannot be set."""
    node: Any = data
    for i, part in enumerate(override.path[:-1]):
        here = ".".join(map(str, override.path[: i + 1]))
        nxt = override.path[i + 1]
        key: str | int
        if isinstance(node, dict):
            key = str(part)
            if (child := node.get(key)) is None:
                child = [] if isinstance(nxt, int) else {}
        elif isinstance(node, list) and isinstance(part, int):
            if part >= len(node):
                return f"{here}: the list has {len(node)} item{'s' if len(node) != 1 else ''} (from 0)"
            key, child = part, node[part]
        else:
            return f"{here.rpartition('.')[0]} is a list: index it with a number"
        if not isinstance(child, dict | list):
            text = repr(child)
            return (f"{here} is {type(child).__name__} {text if len(text) <= 60 else text[:57] + '...'} in the file, "
                    "not a mapping or list")
        child = dict(child) if isinstance(child, dict) else list(child)
        node[key] = child
        node = child
    last = override.path[-1]
    if isinstance(node, dict):
        node[str(last)] = override.value
    elif isinstance(node, list) and isinstance(last, int) and last <= len(node):
        node[last:last + 1] = [override.value]
    else:
        return f"{'.'.join(map(str, override.path))}: not a key or index of what is there"
    return None


def applied(data: dict[str, Any], texts: Sequence[str]) -> tuple[dict[str, Any], list[tuple[str, str]],
                                                                  list[Override]]:
    """``data`` with every override set, in order (a later one wins), the overrides that could not be
    set as (text, why), and those that were."""
    out = dict(data)
    bad: list[tuple[str, str]] = []
    done: list[Override] = []
    for text in texts:
        o, why = parse(text)
        if o is not None:
            why = apply(out, o)
        if why is not None:
            bad.append((text, why))
        elif o is not None:
            done.append(o)
    return out, bad, done


def merged(stored: Sequence[str], new: Sequence[str]) -> list[str]:
    """``stored`` overrides with ``new`` ones after them, a stored one dropped where a new one sets the
    same key path (a run continued with ``--resume --set`` keeps its earlier overrides)."""
    keys = {t.partition("=")[0].strip() for t in new}
    return [t for t in stored if t.partition("=")[0].strip() not in keys] + list(new)
