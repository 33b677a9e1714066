"""Atomic publication of files and directories: write to a temp name, fsync, rename.

A reader that looks up the final name sees either nothing or the complete content, never a torn
write, because ``rename`` within one filesystem is atomic and the data is on disk before it.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

MARKER = "STABLE"  # written last into a published step dir (weights, checkpoints): everything else is there


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: Path, text: str) -> None:
    """Write ``path`` so that readers see the old content or the new, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(text.encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # (a full disk: no half-written sibling left behind)
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def temp_dir_for(final: Path) -> Path:
    """A fresh, empty sibling of ``final`` to fill before ``publish_dir`` (hidden: ``.NAME.tmp-PID``)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    return tmp


def steps(root: Path) -> list[int]:
    """The N of every ``step_N`` entry of ``root``, ascending; none when ``root`` cannot be listed."""
    try:
        return sorted(int(m.group(1)) for p in Path(root).iterdir() if (m := re.match(r"step_(\d+)\Z", p.name)))
    except OSError:
        return []


def prune(root: Path, found: list[int], keep: int, current: int) -> None:
    """Remove ``root/step_N`` for all but the newest ``keep`` of the steps ``found``, never ``current``'s."""
    for old in found[:-keep]:
        if old != current:
            shutil.rmtree(Path(root) / f"step_{old}", ignore_errors=True)


def fsync_tree(directory: Path) -> None:
    """fsync every file and directory below ``directory``, and ``directory`` itself."""
    for p in directory.rglob("*"):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
        elif p.is_dir():
            fsync_dir(p)
    fsync_dir(directory)


def publish_dir(tmp: Path, final: Path) -> None:
    """Move the filled ``tmp`` dir to ``final`` atomically, replacing an existing ``final``.

    Replacing is two renames (old out of the way, new in): a reader sees the old dir, then briefly
    none, then the new one — never a partial one.
    """
    fsync_tree(tmp)
    trash = None
    if final.exists():
        trash = final.with_name(f".{final.name}.old-{os.getpid()}")
        if trash.exists():
            shutil.rmtree(trash)
        os.rename(final, trash)
    os.rename(tmp, final)
    fsync_dir(final.parent)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)
