"""Getting a log excerpt out of the TUI: the clipboard (OSC 52) or a file.

OSC 52 travels through SSH to the terminal the user sits at, so it works on a pod. Inside tmux
an application's OSC 52 is dropped unless tmux has ``set-clipboard on`` (its default is
``external``), so there the excerpt also goes through ``tmux load-buffer -w -``: it becomes the
paste buffer (prefix ]) and tmux itself forwards it to the outer terminal's clipboard.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


def tmux_load_buffer(text: str, timeout: float = 5.0) -> str | None:
    """Put ``text`` in tmux's paste buffer (and, via tmux, the terminal's clipboard). None when
    not inside tmux; otherwise an error message, or "" on success. Blocking: run it off the loop."""
    if not os.environ.get("TMUX"):
        return None
    try:
        r = subprocess.run(["tmux", "load-buffer", "-w", "-"], input=text.encode(), capture_output=True,
                           timeout=timeout)
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    if r.returncode != 0:  # tmux < 3.2 has no -w: the paste buffer alone
        r = subprocess.run(["tmux", "load-buffer", "-"], input=text.encode(), capture_output=True, timeout=timeout)
    return "" if r.returncode == 0 else (r.stderr.decode(errors="replace").strip() or f"exit {r.returncode}")


def default_path(component: str, now: float) -> str:
    """``rlsup-trainer-103708.log`` in the current directory."""
    return f"rlsup-{component}-{time.strftime('%H%M%S', time.localtime(now))}.log"


def write_excerpt(path: str, lines: list[str]) -> Path:
    """Write the lines (one per line) to ``path`` (``~`` expanded, parents created); the absolute path."""
    p = Path(path).expanduser()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return p.absolute()
