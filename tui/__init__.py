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

The heap. Python's oldest-generation garbage collection walks every object tracked since start-up: Textual,
Rich and their modules, classes and stylesheet, ~65,000 objects in the TUI, 20-35 ms a collection on this
project's 2-core machine. Under a log flood Textual makes thousands of short-lived cycles a second (each
strip and its caches), so one came every few seconds, and landed in a quarter of the frames answering an
unzoom (headless, 200x50, three logs fed 8,000 lines/s each). :func:`freeze_heap`, once the first screen is
up, moves what is alive then out of the collector's sight (``gc.freeze``): a full collection then takes ~4 ms.
"""

from __future__ import annotations

import gc
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


def freeze_heap() -> None:
    """Collect, then leave every object alive now out of future collections (see above): what start-up built
    lives as long as the TUI, and a cycle among those that dies later is never freed (a bounded leak)."""
    gc.collect()
    gc.freeze()
