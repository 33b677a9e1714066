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


class _RefParser:
    """A string split into literal text and variable references (bad references stay as text): literal
    text until the next ``$`` (or, inside a default, ``}``), then what can start there."""

    def __init__(self, s: str, errors: list[str]) -> None:
        self.s, self.errors, self.i = s, errors, 0
        self.cur: list[str | _Var] = []
        # (start of the reference, name, op, parts collected so far) for each open ${NAME:-...
        self.stack: list[tuple[int, str, str, list[str | _Var]]] = []

    def parse(self) -> list[str | _Var]:
        s = self.s
        while self.i < len(s):
            j = min((k for k in (s.find("$", self.i), s.find("}", self.i) if self.stack else -1) if k >= 0), default=-1)
            if j < 0:
                self.cur.append(s[self.i:])
                break
            self.cur.append(s[self.i:j])
            self.i = j
            if s[j] == "}":  # closes the innermost open default
                _, name, op, outer = self.stack.pop()
                outer.append(_Var(name, op, self.cur))
                self.cur, self.i = outer, j + 1
            elif not s.startswith("${", j):  # $$ is a literal $; so is a $ that starts no reference
                self.cur.append("$")
                self.i += 2 if s.startswith("$$", j) else 1
            elif not self._reference():
                return self._as_written()
        if self.stack:  # the string ended inside ${NAME:-...: keep that text as written
            self.errors.append(_unterminated(s[self.stack[0][0]:]))
            return self._as_written()
        return self.cur

    def _as_written(self) -> list[str | _Var]:
        """What was read before the outermost open default, then the rest of ``s`` as it is written."""
        start, _, _, outer = self.stack[0]
        return [*outer, self.s[start:]]

    def _reference(self) -> bool:
        """At ``${``: a reference, the start of one with a default, or a bad one (reported, kept as
        text). False where defaults nest too deep: the caller keeps the rest as written."""
        s, i = self.s, self.i
        m = _NAME_AT.match(s, i + 2)
        name, end = (m.group(0), m.end()) if m else ("", i + 2)
        op = ":-" if s.startswith(":-", end) else "-" if s.startswith("-", end) else ""
        if name and s.startswith("}", end):
            self.cur.append(_Var(name, "", []))
            self.i = end + 1
        elif not (name and op):
            close = s.find("}", i)
            self.errors.append(_unterminated(s[i:]) if close < 0 else f"bad variable reference {s[i:close + 1]!r}: use "
                               "${VAR}, ${VAR:-default} or ${VAR-default} (write $$ for a literal $)")
            self.cur.append(s[i:i + 2])
            self.i += 2
        elif len(self.stack) >= MAX_EXPANSION_DEPTH:
            self.errors.append(f"variable defaults nested more than {MAX_EXPANSION_DEPTH} deep")
            return False
        else:
            self.stack.append((i, name, op, self.cur))
            self.cur = []
            self.i = end + len(op)
        return True


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
    parts = _RefParser(value, errors).parse()
    missing: list[str] = []
    return _evaluate(parts, variables, missing), missing, errors

