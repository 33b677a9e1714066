"""Live artefact and checkpoint watches for every component (``watch:`` entries, ``resume.checkpoints``).

Every directory is watched on the supervisor's loop (:mod:`.dirwatch`); a change is recorded on the
component and folded into its next progress event: ``watch: {path: {step, mtime}}`` and ``checkpoint:
{step, path, mtime}`` (the latest *complete* checkpoint, re-discovered on each change).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from typing import Any, Protocol

CHECKPOINT_NAMES = r"(?:step_|global_step_|checkpoint-|globalstep)(?P<step>\d+)"


class Watched(Protocol):
    """What a watch needs of a component: its config and the two fields it keeps up to date."""

    name: str
    cfg: Any
    watch_info: dict[str, dict[str, Any]]
    checkpoint_info: dict[str, Any] | None

    def progress_changed(self) -> None: ...


class Watches:
    def __init__(self, components: Mapping[str, Watched], loop: asyncio.AbstractEventLoop):
        self.components = components
        self.loop = loop
        self._watcher: Any = None

    def start(self) -> None:
        from .dirwatch import DirWatches

        self._watcher = DirWatches(self.loop)
        for c in self.components.values():
            for w in c.cfg.watch:
                self._add(c, w.path, w.pattern, kind="watch")
            if c.cfg.resume is not None:
                self._add(c, c.cfg.resume.checkpoints, CHECKPOINT_NAMES, kind="checkpoint")

    def _add(self, c: Watched, path: str, pattern: str, *, kind: str) -> None:
        from .dirwatch import DirWatch

        def on_change(step: int | None, mtime: float | None) -> None:
            if kind == "watch":
                c.watch_info[path] = {"step": step, "mtime": mtime}
                c.progress_changed()
            else:
                asyncio.ensure_future(self._rediscover(c))

        try:
            self._watcher.add(DirWatch(path, pattern, on_change))
        except Exception as e:  # a broken watch must not stop supervision
            print(f"rlsup: cannot watch {path} for {c.name}: {e}", file=sys.stderr)

    async def _rediscover(self, c: Watched) -> None:
        r = c.cfg.resume
        if r is None:
            return
        from .checkpoints import discover

        loop = asyncio.get_running_loop()
        try:
            found = await loop.run_in_executor(None, lambda: discover(r.checkpoints, r.layout,
                                                                      step_pattern=r.step_pattern))
        except (OSError, ValueError):
            return
        if found.skipped:  # something still settling: look again once it may have settled
            loop.call_later(6.0, lambda: asyncio.ensure_future(self._rediscover(c)))
        ck = found.latest
        info = {"step": ck.step, "path": ck.path, "mtime": ck.mtime} if ck else None
        if info != c.checkpoint_info:
            c.checkpoint_info = info
            c.progress_changed()

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
