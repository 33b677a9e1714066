"""Text for a terminal: control characters shown, never obeyed.

A component's output reaches the user's terminal through ``rlsup logs``, ``events``, ``why``, ``report``
and ``diagnose``. Written as it is, ``ESC c`` would reset the terminal (a tmux pane loses its history),
OSC 52 would set the clipboard, OSC 0/2 the title, ``ESC[?1049h`` switch to the alternate screen,
``ESC[?2004h`` turn on bracketed paste, and backspaces or a carriage return would make ``SAFE`` show as
``EVIL``. As ``less`` does (and ``cat -v``), every control character but tab and newline is written as
visible text instead: C0 and DEL in caret notation (``^[`` for ESC, ``^H`` for backspace, ``^M`` for a
carriage return, ``^?`` for DEL), the C1 controls (which some terminals obey as ESC sequences) and the
bidirectional overrides (which reorder what is shown) as ``<U+XXXX>``. Only when writing to a terminal:
a pipe or a file gets the text as it is (as ``less``, ``git`` and ``journalctl`` do); ``--raw`` asks for
it on a terminal too. The log files themselves are never touched.
"""

from __future__ import annotations

import re
from typing import Any, TextIO

_TABLE: dict[int, str] = {c: "^" + chr(c + 64) for c in range(0x20) if c not in (0x09, 0x0A)}
_TABLE[0x7F] = "^?"
_TABLE.update({c: f"<U+{c:04X}>" for c in range(0x80, 0xA0)})
_TABLE.update({c: f"<U+{c:04X}>" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))})
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
