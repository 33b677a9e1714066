"""Run artefacts besides checkpoints: cleaning up future steps on resume, and watching step folders.

``clean_after`` removes what a resumed trainer would otherwise trip over (rollouts of steps after the
resume step), only inside the run's configured directories.

``scan_newest`` is the newest step in a directory, asked again by :mod:`.dirwatch` on each change.
"""

from __future__ import annotations

import glob as _glob
import itertools
import os
import re
import shutil
import stat
import sys
from collections.abc import Iterable
from pathlib import Path

from .checkpoints import is_temp_name

DEFAULT_STEP_PATTERN = r"(\d+)"


class CleanRefused(Exception):
    """``clean_after`` would reach outside the allowed roots (nothing was deleted), or some deletions
    failed (``deleted`` lists what was removed before that).

    ``refused`` holds ``(path, reason)`` for each path or glob that was refused or failed.
    """

    def __init__(self, refused: list[tuple[Path, str]], deleted: list[Path] | None = None) -> None:
        self.refused = refused
        self.deleted = deleted or []
        lines = "; ".join(f"{p}: {r}" for p, r in refused[:5])
        more = f" (and {len(refused) - 5} more)" if len(refused) > 5 else ""
        super().__init__(f"resume.clean refused: {lines}{more}")


def _step_of(rx: re.Pattern[str], name: str) -> int | None:
    """The step in ``name``: named group ``step``, else the first group, else the whole match."""
    m = rx.search(name)
    if m is None:
        return None
    text = m.group("step" if "step" in rx.groupindex else 1 if rx.groups else 0)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def compile_step_pattern(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled, or ValueError saying it is not a valid regex."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"step pattern {pattern!r} is not a valid regex ({exc})") from None


def _inside(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _located(path: Path) -> Path:
    """Where ``path`` itself lives: its parent resolved through symlinks, plus its own name.

    The last component is not resolved: a symlink is judged (and deleted) as the link, not its target.
    """
    return Path(os.path.realpath(path.parent)) / path.name


def _fixed_prefix(pattern: str) -> str:
    """The leading part of a glob without wildcards (a directory every match lies under)."""
    parts = list(itertools.takewhile(lambda part: not _glob.has_magic(part), Path(pattern).parts))
    return os.path.join(*parts) if parts else ""


def clean_after(
    globs: list[str],
    step: int,
    *,
    base: Path,
    allowed_roots: list[Path],
    step_pattern: str = DEFAULT_STEP_PATTERN,
) -> list[Path]:
    """Delete the files and directories matched by ``globs`` whose step is greater than ``step``.

    Globs are relative to ``base`` (``**`` allowed); the step is ``step_pattern`` searched in the
    matched entry's *name* (named group ``step``, else the first group); a match without a step is
    left alone. Returns the deleted paths (the matched entries, not what was inside them), sorted.

    Safety, checked for every glob and every match before anything is deleted: each must lie, after
    resolving symlinks in its parent directories, inside one of ``allowed_roots`` (also resolved), and
    may not be one of them or contain one. Otherwise :class:`CleanRefused` is raised and nothing is
    deleted. A matched symlink is removed as a link (its target is untouched); directory trees are
    removed with ``shutil.rmtree``, which does not follow symlinks inside them. Deletion errors are
    collected and raised as :class:`CleanRefused` after the rest was attempted, with ``deleted`` set.
    """
    rx = compile_step_pattern(step_pattern)
    base = Path(os.path.realpath(Path(base).expanduser()))
    roots = [Path(os.path.realpath(Path(r).expanduser())) for r in allowed_roots]
    targets, refused = _targets(globs, step, rx, base, roots)
    if refused:
        raise CleanRefused(refused)
    deleted, failed = _delete(targets)
    if failed:
        raise CleanRefused(failed, sorted(deleted))
    return sorted(deleted)


def _targets(
    globs: list[str], step: int, rx: re.Pattern[str], base: Path, roots: list[Path]
) -> tuple[list[Path], list[tuple[Path, str]]]:
    """What ``globs`` match past ``step`` (as located paths), and what was refused and why.

    A glob whose fixed prefix lies outside ``roots`` is refused whole, before it is expanded.
    """
    refused: list[tuple[Path, str]] = []
    targets: dict[Path, Path] = {}  # located path -> path as matched
    for pattern in globs:
        full = os.path.join(base, os.path.expanduser(pattern))  # an absolute pattern stays absolute
        prefix = _fixed_prefix(full)
        if prefix and not _inside(_located(Path(os.path.normpath(prefix))), roots):
            refused.append((Path(pattern), "reaches outside the run's directories " + _roots_text(roots)))
            continue
        for match in sorted(_glob.glob(full, recursive=True)):
            path = Path(match)
            s = _step_of(rx, path.name)
            if s is None or s <= step:
                continue
            located = _located(Path(os.path.normpath(match)))
            problem = _target_problem(located, roots)
            if problem:
                refused.append((path, problem))
            else:
                targets[located] = path
    return list(targets), refused


def _target_problem(located: Path, roots: list[Path]) -> str | None:
    """Why ``located`` may not be deleted (outside every root, or a root or above one); None if it may."""
    if not _inside(located, roots):
        return "resolves outside the run's directories " + _roots_text(roots)
    if any(located == r or located in r.parents for r in roots):
        return "is (or contains) one of the run's directories"
    return None


def _delete(targets: list[Path]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Delete ``targets``, parents first (anything under a deleted directory went with it).

    Returns what was deleted and ``(path, error)`` for what could not be; one failure stops nothing.
    """
    deleted: list[Path] = []
    failed: list[tuple[Path, str]] = []
    for located in sorted(targets, key=lambda p: len(p.parts)):
        if any(d in located.parents for d in deleted):
            continue
        try:
            gone = _delete_one(located)
        except OSError as exc:
            failed.append((located, str(exc)))
            continue
        if gone:
            deleted.append(located)
    return deleted, failed


def _delete_one(located: Path) -> bool:
    """Remove one entry without following it (a link goes, never its target): True if removed, False if
    it was already gone. Raises OSError saying what failed."""
    try:
        st = located.lstat()
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        errors: list[str] = []
        _rmtree(located, errors)
        if errors:
            raise OSError("; ".join(errors[:3]))
    else:
        located.unlink()
    return True


def _rmtree(path: Path, errors: list[str]) -> None:
    """rmtree that collects errors; it removes symlinks inside as links and never follows them."""
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=lambda _f, p, e: errors.append(f"{p}: {e}"))
    else:
        shutil.rmtree(path, onerror=lambda _f, p, e: errors.append(f"{p}: {e[1]}"))


def _roots_text(roots: list[Path]) -> str:
    return "(" + ", ".join(str(r) for r in roots) + ")" if roots else "(none allowed)"


# ---------------------------------------------------------------------------------------------
# watching a step directory


def scan_newest(
    path: str | Path, pattern: str | re.Pattern[str] = r"(?P<step>\d+)"
) -> tuple[int | None, float | None]:
    """(newest step, its mtime) among the entries of directory ``path``; (None, None) if none/missing.

    The step is as :func:`_step_of` finds it in each entry name. Hidden and temporary names (``.step_13.tmp-PID``, ``step_13.partial``) are not published steps and
    are ignored. The mtime is the entry's own (``lstat``), i.e. when it appeared or last changed.
    """
    rx = compile_step_pattern(pattern) if isinstance(pattern, str) else pattern
    best: tuple[int, float] | None = None
    try:
        it = os.scandir(path)
    except OSError:
        return None, None
    with it:
        for e in it:
            if e.name.startswith(".") or is_temp_name(e.name):
                continue
            s = _step_of(rx, e.name)
            if s is None or (best is not None and s < best[0]):
                continue
            try:
                mtime = e.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            if best is None or s > best[0] or mtime > best[1]:
                best = (s, mtime)
    return (best[0], best[1]) if best is not None else (None, None)
