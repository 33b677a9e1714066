"""Tracebacks cut off before their exception line, and ones too garbled to parse.

Users paste the part of a traceback they think matters, a tail ends in the middle of one, several
processes write theirs into one pipe at once: what is left is frames and no ``Type: message``
line. It still says the program failed, of a kind the log does not name, and its innermost user
frame says where. These are the weakest failures a log can name: any failure that says more
outranks them, and one that training went on from is history.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .normalize import Line
from .tracebacks import FRAME, Exc, Frame, is_user_frame

# a frame's pieces out of place: several processes' frames written into one line at once, by chunk
# ('.../scheduler.py/sgl-workspace/...scheduler.py  File ", line  in , line   File run_event_loop"')
_FRAME_PIECE = re.compile(r'File "|", line|\.py", line|\.py"')
_GARBLED_MIN_PIECES = 2  # pieces on one line that no frame line holds
_GARBLED_MIN_LINES = 2  # such lines near the end of a stream
_GARBLED_SCAN = 20  # how far from a stream's end they are looked for


@dataclass(frozen=True)
class CutTraceback:
    """A traceback with no exception line: its frames (outermost first, empty when garbled), where
    it starts and ends, its stream."""

    frames: tuple[Frame, ...]
    start: int
    end: int
    stream: str
    garbled: bool = False

    @classmethod
    def of(cls, exc: Exc) -> CutTraceback:
        return cls(tuple(exc.frames), exc.start, exc.end, exc.stream)

    def user_location(self) -> str | None:
        return next((f.location for f in reversed(self.frames) if is_user_frame(f.file)), None)

    def funcs(self) -> set[str]:
        return {f.func or "" for f in self.frames}


def _garbled(text: str) -> bool:
    return not FRAME.match(text) and len(_FRAME_PIECE.findall(text)) >= _GARBLED_MIN_PIECES


def find_garbled(lines: list[Line]) -> list[CutTraceback]:
    """Per stream, frames garbled together at its end (the stream's last line holds frame pieces and
    at least two lines near it are frame pieces run together): a traceback nobody can read, but one."""
    by_stream: dict[str, list[Line]] = {}
    for ln in lines:
        if ln.text.strip():
            by_stream.setdefault(ln.stream, []).append(ln)
    out: list[CutTraceback] = []
    for stream, sl in by_stream.items():
        near = sl[-_GARBLED_SCAN:]
        garbled = [ln for ln in near if _garbled(ln.text)]
        if len(garbled) >= _GARBLED_MIN_LINES and _FRAME_PIECE.search(sl[-1].text) and not FRAME.match(sl[-1].text):
            out.append(CutTraceback((), garbled[0].index, sl[-1].index, stream, garbled=True))
    return out
