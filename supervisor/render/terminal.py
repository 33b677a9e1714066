"""Text for a terminal: control characters shown, never obeyed (``ESC c`` would reset it, OSC 52 set the
clipboard, a carriage return make ``SAFE`` show as ``EVIL``). As ``less`` does, every control character but tab
and newline is written visibly: C0 and DEL in caret notation (``^[``, ``^?``), C1 controls and bidirectional
overrides as ``<U+XXXX>``. Only on a terminal (a pipe gets the text as it is; ``--raw`` asks for that too).
"""

from __future__ import annotations

import re
from typing import Any, TextIO

_TABLE: dict[int, str] = {c: "^" + chr(c + 64) for c in range(0x20) if c not in (0x09, 0x0A)}
_TABLE[0x7F] = "^?"
_TABLE.update({c: f"<U+{c:04X}>" for c in (*range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A))})
_ANY = re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(_TABLE)) + "]")


def escape_controls(text: str) -> str:
    """``text`` with every character a terminal would obey written as visible text (tab and newline kept)."""
    return text.translate(_TABLE) if _ANY.search(text) else text


class EscapingStream:
    """A text stream that writes :func:`escape_controls` of everything written to it (for ``sys.stdout``
    and ``sys.stderr`` when they are a terminal)."""

    def __init__(self, inner: TextIO):
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(escape_controls(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, ...
        return getattr(self.inner, name)
