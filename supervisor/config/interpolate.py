"""``${VAR}`` expansion in config strings: ``${VAR}``, ``${VAR:-default}`` (unset or empty),
``${VAR-default}`` (unset), ``$$`` for a literal ``$``. Defaults may hold references themselves
(``${A:-${B:-c}}``), expanded only when used, as a shell does. A ``${`` that is not one of these forms
is an error, never passed through as text. Pure functions of a string and a mapping.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

MAX_EXPANSION_DEPTH = 20
_NAME_AT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class _Var:
    name: str
    op: str  # "" | ":-" | "-"
    default: list[str | _Var]


def _parse(s: str, i: int, depth: int, errors: list[str]) -> tuple[list[str | _Var], int] | str:
    """The parts of ``s`` from ``i`` to its end (``depth`` 0) or to the ``}`` that closes a default, and the index
    after them: literal text until the next ``$`` (in a default, or ``}``), then what can start there (bad
    references are reported and stay as text). Where a default never closes or defaults nest too deep, "open" or
    "deep": the outermost reference keeps the rest of ``s`` as written."""
    parts: list[str | _Var] = []
    while (j := min((k for k in (s.find("$", i), s.find("}", i) if depth else -1) if k >= 0), default=-1)) >= 0:
        parts.append(s[i:j])
        if s[j] == "}":  # closes this default
            return parts, j + 1
        if not s.startswith("${", j):  # $$ is a literal $; so is a $ that starts no reference
            parts.append("$")
            i = j + (2 if s.startswith("$$", j) else 1)
            continue
        m = _NAME_AT.match(s, j + 2)
        name, end = (m.group(0), m.end()) if m else ("", j + 2)
        op = ":-" if s.startswith(":-", end) else "-" if s.startswith("-", end) else ""
        if name and s.startswith("}", end):
            parts.append(_Var(name, "", []))
            i = end + 1
        elif not (name and op):
            close = s.find("}", j)
            errors.append(_unterminated(s[j:]) if close < 0 else f"bad variable reference {s[j:close + 1]!r}: use "
                          "${VAR}, ${VAR:-default} or ${VAR-default} (write $$ for a literal $)")
            parts.append("${")
            i = j + 2
        elif depth >= MAX_EXPANSION_DEPTH:
            errors.append(f"variable defaults nested more than {MAX_EXPANSION_DEPTH} deep")
            return "deep"
        elif isinstance(inner := _parse(s, end + len(op), depth + 1, errors), str):
            if depth:
                return inner
            if inner == "open":
                errors.append(_unterminated(s[j:]))
            return [*parts, s[j:]], len(s)
        else:
            parts.append(_Var(name, op, inner[0]))
            i = inner[1]
    return "open" if depth else ([*parts, s[i:]], len(s))


def _unterminated(rest: str) -> str:
    return f"unterminated variable reference {rest[:40]!r}: no closing '}}' (write $$ for a literal $)"


def _evaluate(parts: list[str | _Var], variables: Mapping[str, str], missing: list[str]) -> str:
    out: list[str] = []
    for p in parts:
        if isinstance(p, str):
            out.append(p)
            continue
        v = variables.get(p.name)
        if v is None or (v == "" and p.op == ":-"):
            if p.op:
                out.append(_evaluate(p.default, variables, missing))
                continue
            missing.append(p.name)
            v = ""
        out.append(v)
    return "".join(out)


def expand(value: str, variables: Mapping[str, str]) -> tuple[str, list[str], list[str]]:
    """Expand references in ``value``: (text, names missing without a default, syntax errors)."""
    if "$" not in value:
        return value, [], []
    errors: list[str] = []
    parts = _parse(value, 0, 0, errors)
    missing: list[str] = []
    assert not isinstance(parts, str)  # (only a default is open or too deep)
    return _evaluate(parts[0], variables, missing), missing, errors

