"""escape_controls: what a terminal would obey is shown as text; everything else is left alone."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from rlsup.supervisor.render.terminal import EscapingStream, escape_controls
from tests.tier import examples


def test_the_sequences_that_matter_are_shown_not_obeyed() -> None:
    assert escape_controls("\x1bc") == "^[c"
    assert escape_controls("\x1b]52;c;cHduZWQ=\x07") == "^[]52;c;cHduZWQ=^G"
    assert escape_controls("SAFE\b\b\b\bEVIL") == "SAFE^H^H^H^HEVIL"
    assert escape_controls("SAFE\rEVIL") == "SAFE^MEVIL"
    assert escape_controls("\u009b2J \x7f \u202eabc") == "<U+009B>2J ^? <U+202E>abc"
    assert escape_controls("step 5/10\tloss 0.25\n") == "step 5/10\tloss 0.25\n"
    assert escape_controls("naïve ✓ 日本") == "naïve ✓ 日本"


@settings(max_examples=examples(500), deadline=None)
@given(st.text())
def test_nothing_a_terminal_obeys_is_left(text: str) -> None:
    out = escape_controls(text)
    assert not any((ord(c) < 0x20 and c not in "\t\n") or 0x7F <= ord(c) < 0xA0
                   or 0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069 for c in out)
    if text.isprintable():
        assert out == text


def test_the_stream_escapes_what_is_written_and_passes_the_rest_on() -> None:
    inner = io.StringIO()
    s = EscapingStream(inner)  # type: ignore[arg-type]
    assert s.write("a\x1bc\n") == 4
    s.flush()
    assert inner.getvalue() == "a^[c\n"
