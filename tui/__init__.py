"""The Textual front end: never imported by the headless core (tests/test_layers.py).

Frame pacing. Textual repaints a screen at most ``TEXTUAL_FPS`` times a second (60 unless set:
``MAX_FPS`` in textual/constants.py, read once at import; ``Screen._update_timer`` in
textual/screen.py waits out the rest of the period since the last frame). rlsup already batches
its own repaints (``MainScreen.flush``, 20 Hz, floods at 5 Hz), so under a flood the cap did not
save any work: it only held back the frame that answers a key press, by up to 16.7 ms whenever
a flush had painted just before (measured in tmux: key to visible, tests/perf/bench_tui_keys.py).
rlsup's own TUIs therefore run at a 240 fps cap. A ``TEXTUAL_FPS`` in the environment wins, and
the value is set only while Textual reads it, so no child process inherits it.

The screen's size. Textual asks ``shutil.get_terminal_size``, which believes ``COLUMNS`` and ``LINES`` before
the terminal: exported by a shell profile (or by readline in whatever process started this one), they would
pin the TUI at that size through every resize. :func:`sized_by_the_terminal` drops them first.
"""

from __future__ import annotations

import os
import sys

FPS = 240

if "textual.constants" not in sys.modules and "TEXTUAL_FPS" not in os.environ:
    os.environ["TEXTUAL_FPS"] = str(FPS)
    try:
        import textual.constants  # noqa: F401  (reads the cap now)
    finally:
        del os.environ["TEXTUAL_FPS"]


def sized_by_the_terminal() -> None:
    """Before a TUI runs on a terminal: its size is the terminal's, not a ``COLUMNS``/``LINES`` left in the
    environment (see above)."""
    if sys.stdout.isatty():
        for name in ("COLUMNS", "LINES"):
            os.environ.pop(name, None)
