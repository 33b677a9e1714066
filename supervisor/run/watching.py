"""What the run has the kernel watch for it: its monitors (pidfds), its logs and monitor records (inotify) and its
artefacts (checkpoints and the files of each component's ``watch``)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ..rundir.layout import RunPaths
from .component import Component
from .filewatch import FileWatch
from .monitorwatch import MonitorWatch


class Watching:
    """The run's watches: ``monitors`` from the start, ``files`` and ``artefacts`` once :meth:`start` ran."""

    def __init__(self) -> None:
        self.monitors = MonitorWatch()
        self.files: FileWatch | None = None
        self.artefacts: Any = None  # rundir.watches.Watches

    def start(self, loop: asyncio.AbstractEventLoop, paths: RunPaths, components: Mapping[str, Component]) -> None:
        self.files = FileWatch(loop, paths, components, self.monitors)
        self.files.start()
        from ..rundir.watches import Watches

        self.artefacts = Watches(components, loop)
        self.artefacts.start()

    def stop_artefacts(self) -> None:
        if self.artefacts is not None:
            self.artefacts.stop()

    def close(self) -> None:
        """The log and record watches and the monitors' pidfds closed."""
        if self.files is not None:
            self.files.close()
        self.monitors.close()
