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
    text until the next ``$`` (or, inside a default, ``}``), then one method per thing that can start there."""

    def __init__(self, s: str, errors: list[str]) -> None:
        self.s, self.errors = s, errors
        self.parts: list[str | _Var] = []
        # (start of the reference, name, op, parts collected so far) for each open ${NAME:-...
        self.stack: list[tuple[int, str, str, list[str | _Var]]] = []
        self.cur = self.parts
        self.buf: list[str] = []
        self.i = 0

    def parse(self) -> list[str | _Var]:
        s = self.s
        while self.i < len(s):
            j = s.find("$", self.i) if not self.stack else _next_special(s, self.i)
            if j < 0:
                self.buf.append(s[self.i:])
                break
            self.buf.append(s[self.i:j])
            self.i = j
            if s[j] == "}":
                self._close_default()
            elif not s.startswith("${", j):
                self._dollar()
            elif not self._reference():
                return self._as_written()
        if self.stack:  # the string ended inside ${NAME:-...: keep that text as written
            start = self.stack[0][0]
            self.errors.append(f"unterminated variable reference {s[start:start + 40]!r}: no closing '}}' "
                               "(write $$ for a literal $)")
            return self._as_written()
        self._flush()
        return self.parts

    def _flush(self) -> None:
        if self.buf:
            self.cur.append("".join(self.buf))
            self.buf.clear()

    def _as_written(self) -> list[str | _Var]:
        """What was read before the outermost open default, then the rest of ``s`` as it is written."""
        start, _, _, outer = self.stack[0]
        return [*outer, self.s[start:]]

    def _close_default(self) -> None:
        """A ``}`` closes the innermost open default."""
        start, name, op, outer = self.stack.pop()
        self._flush()
        var = _Var(name, op, self.cur)
        self.cur = outer
        self.cur.append(var)
        self.i += 1

    def _dollar(self) -> None:
        """``$$`` is a literal ``$``; so is a ``$`` that starts no reference."""
        self.buf.append("$")
        self.i += 2 if self.s.startswith("$$", self.i) else 1

    def _reference(self) -> bool:
        """At ``${``: a reference, the start of one with a default, or a bad one (reported, kept as
        text). False where defaults nest too deep: the caller keeps the rest as written."""
        s, i = self.s, self.i
        m = _NAME_AT.match(s, i + 2)
        end = m.end() if m else i + 2
        if m and s.startswith("}", end):
            self._flush()
            self.cur.append(_Var(m.group(0), "", []))
            self.i = end + 1
            return True
        op = ":-" if s.startswith(":-", end) else "-" if s.startswith("-", end) else ""
        if not (m and op):
            self._bad_reference()
            return True
        if len(self.stack) >= MAX_EXPANSION_DEPTH:
            self.errors.append(f"variable defaults nested more than {MAX_EXPANSION_DEPTH} deep")
            return False
        self._flush()
        self.stack.append((i, m.group(0), op, self.cur))
        self.cur = []
        self.i = end + len(op)
        return True

    def _bad_reference(self) -> None:
        s, i = self.s, self.i
        close = s.find("}", i)
        shown = s[i:close + 1] if close >= 0 else s[i:i + 40]
        if close < 0:
            self.errors.append(f"unterminated variable reference {shown!r}: no closing '}}' "
                               "(write $$ for a literal $)")
        else:
            self.errors.append(f"bad variable reference {shown!r}: use ${{VAR}}, ${{VAR:-default}} or "
                               "${VAR-default} (write $$ for a literal $)")
        self.buf.append(s[i:i + 2])
        self.i += 2


def _next_special(s: str, i: int) -> int:
    """Index of the next ``$`` or ``}`` at or after ``i`` (-1 if none): inside a default, ``}`` ends it."""
    return min((j for j in (s.find("$", i), s.find("}", i)) if j >= 0), default=-1)


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


def interpolate(value: str, variables: Mapping[str, str]) -> tuple[str, list[str]]:
    """Expand ``${VAR}``/``${VAR:-default}``/``$$``; return (text, names that were missing).

    A malformed reference is left as written; :func:`expand` also reports it.
    """
    text, missing, _ = expand(value, variables)
    return text, missing
