"""Run artefacts besides checkpoints: cleaning up future steps on resume, and watching step folders.

``clean_after`` removes what a resumed trainer would otherwise trip over (rollouts of steps after the
resume step). It deletes only inside the ``allowed_roots`` the caller names (the run's configured
directories), checks every path after resolving symlinks, and never follows a symlink while deleting.

``ArtifactWatch`` reports the newest step present in a directory (``rollouts/step_12``) and when it
appeared, from file-system notifications (inotify through watchfiles' Rust ``notify``): no polling,
no CPU while nothing changes. ``scan_newest`` is the same answer as a pure function.
"""

from __future__ import annotations

import glob as _glob
import logging
import os
import re
import shutil
import stat
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from .checkpoints import is_temp_name

log = logging.getLogger(__name__)

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
    if "step" in rx.groupindex:
        text = m.group("step")
    elif rx.groups:
        text = m.group(1)
    else:
        text = m.group(0)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _compile(pattern: str) -> re.Pattern[str]:
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
    parts = []
    for part in Path(pattern).parts:
        if _glob.has_magic(part):
            break
        parts.append(part)
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
    rx = _compile(step_pattern)
    base = Path(os.path.realpath(Path(base).expanduser()))
    roots = [Path(os.path.realpath(Path(r).expanduser())) for r in allowed_roots]
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
            if not _inside(located, roots):
                refused.append((path, "resolves outside the run's directories " + _roots_text(roots)))
            elif any(located == r or located in r.parents for r in roots):
                refused.append((path, "is (or contains) one of the run's directories"))
            else:
                targets[located] = path
    if refused:
        raise CleanRefused(refused)

    deleted: list[Path] = []
    failed: list[tuple[Path, str]] = []
    # Parents first; anything under an already deleted directory went with it.
    for located in sorted(targets, key=lambda p: len(p.parts)):
        if any(d in located.parents for d in deleted):
            continue
        try:
            st = located.lstat()
        except FileNotFoundError:
            continue
        except OSError as exc:
            failed.append((located, str(exc)))
            continue
        try:
            if stat.S_ISDIR(st.st_mode):
                errors: list[str] = []
                _rmtree(located, errors)
                if errors:
                    failed.append((located, "; ".join(errors[:3])))
                    continue
            else:
                located.unlink()  # a file or a symlink (to anything): the link goes, never the target
        except OSError as exc:
            failed.append((located, str(exc)))
            continue
        deleted.append(located)
    if failed:
        raise CleanRefused(failed, sorted(deleted))
    return sorted(deleted)


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

    The step is ``pattern`` searched in each entry name (named group ``step``, else the first group).
    Hidden and temporary names (``.step_13.tmp-PID``, ``step_13.partial``) are not published steps and
    are ignored. The mtime is the entry's own (``lstat``), i.e. when it appeared or last changed.
    """
    rx = _compile(pattern) if isinstance(pattern, str) else pattern
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


OnChange = Callable[[int | None, float | None], None]


class ArtifactWatch:
    """Watch one directory for the newest step present; call ``on_change(step, mtime)`` on changes.

    ``start()`` scans once and calls ``on_change`` with the initial value (also when that is
    ``(None, None)``), then a daemon thread waits on file-system notifications and calls it again,
    from that thread, whenever the newest (step, mtime) differs from the last reported one. Only the
    directory's own entries are watched (not recursively). If the directory does not exist, its
    nearest existing ancestor is watched until it appears; if it is removed, that happens again and
    ``(None, None)`` is reported. ``stop()`` returns within about ``step_ms`` milliseconds.

    ``on_change`` must be quick and thread-safe (for asyncio: ``loop.call_soon_threadsafe``); an
    exception from it is logged and the watch goes on. The last value is also in ``newest``.
    """

    def __init__(
        self,
        path: str | Path,
        pattern: str = r"(?P<step>\d+)",
        on_change: OnChange | None = None,
        *,
        debounce_ms: int = 300,
        step_ms: int = 100,
    ) -> None:
        self.path = Path(path).expanduser().absolute()
        self.pattern = pattern
        self._rx = _compile(pattern)
        self.on_change = on_change
        self.debounce_ms = debounce_ms
        self.step_ms = step_ms
        self.newest: tuple[int | None, float | None] = (None, None)
        self.error: str | None = None  # why watching failed, if it did (permissions, inotify limits)
        self._reported = False
        self._setup: tuple[tuple[Path, ...], tuple[int, int] | None] = ((), None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- public

    def start(self) -> ArtifactWatch:
        if self._thread is not None:
            raise RuntimeError("ArtifactWatch already started")
        self._rescan()
        self._thread = threading.Thread(target=self._run, name=f"watch:{self.path.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> ArtifactWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- thread

    def _rescan(self) -> None:
        value = scan_newest(self.path, self._rx) if self.path.is_dir() else (None, None)
        if self._reported and value == self.newest:
            return
        self.newest, self._reported = value, True
        if self.on_change is not None:
            try:
                self.on_change(*value)
            except Exception:  # a broken consumer must not end the watch
                log.exception("ArtifactWatch on_change for %s failed", self.path)

    def _identity(self) -> tuple[tuple[Path, ...], tuple[int, int] | None]:
        """What should be watched now: the paths, and the directory's inode if it exists.

        The directory and its parent (where its own removal or replacement shows up), or else its
        nearest existing ancestor. A directory replaced by a new one (``rm -r d; mkdir d``) has a new
        inode and needs a new watch, so the inode is part of the identity.
        """
        try:
            st = self.path.stat()
        except OSError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            parent = self.path.parent
            paths = (self.path, parent) if parent != self.path else (self.path,)
            return paths, (st.st_dev, st.st_ino)
        anc = self.path.parent
        while not anc.is_dir() and anc != anc.parent:
            anc = anc.parent
        return (anc,), None

    def _relevant(self, changes: object) -> bool:
        """Whether a batch of raw changes concerns the directory, its entries, or the way to it."""
        if not isinstance(changes, set):
            return True
        for _kind, p in changes:
            q = Path(p)
            if q == self.path or q.parent == self.path or q in self.path.parents:
                return True
        return False

    def _run(self) -> None:
        try:
            from watchfiles._rust_notify import RustNotify  # the watcher object watchfiles.watch uses
        except ImportError:  # pragma: no cover - a future watchfiles without it
            RustNotify = None  # noqa: N806
        while not self._stop.is_set():
            self._setup = self._identity()
            paths = self._setup[0]
            try:
                if RustNotify is not None:
                    self._watch_rust(RustNotify, paths)
                else:  # pragma: no cover
                    self._watch_public(paths)
                self.error = None
            except Exception as exc:  # inotify limit, permission denied, path vanished during setup
                if self._identity() != self._setup:
                    continue  # the tree changed under us: just set up again
                self.error = f"{type(exc).__name__}: {exc}"
                log.warning("watching %s failed (%s); retrying in 5 s", self.path, self.error)
                self._stop.wait(5.0)

    def _watch_rust(self, rust_notify: type, paths: tuple[Path, ...]) -> None:
        # Construct first (the inotify watches exist from here on), then scan: nothing created
        # between the scan and the watch can be missed.
        with rust_notify([str(p) for p in paths], False, False, 300, False, False) as watcher:
            self._rescan()
            if self._identity() != self._setup:
                return
            while not self._stop.is_set():
                # timeout 0 = none: blocks in Rust until changes or stop; it wakes every step_ms
                # only to look at the stop event, which costs no measurable CPU.
                changes = watcher.watch(self.debounce_ms, self.step_ms, 0, self._stop)
                if changes in ("stop", "signal") or self._stop.is_set():
                    return
                if not self._relevant(changes):
                    continue
                self._rescan()
                if self._identity() != self._setup:
                    return

    def _watch_public(self, paths: tuple[Path, ...]) -> None:  # pragma: no cover
        import watchfiles

        self._rescan()
        for _ in watchfiles.watch(
            *paths, watch_filter=None, debounce=self.debounce_ms, step=self.step_ms,
            stop_event=self._stop, recursive=False, raise_interrupt=False,
        ):
            self._rescan()
            if self._identity() != self._setup:
                return
