"""The run as its clients see it: what the control server (:class:`~.server.RunView`) may read of a
live run, and its one way in (commands).

The run's rings, journal position and log files, the greeting a client gets, and the pages of a
component's log on disk older than its ring holds. Read-only: every change goes through
:meth:`Run.command <.run.Run.command>`, the supervisor being the single authority.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from ..config.model import Config
from ..records.redact import Redactor
from ..records.version import VERSION
from ..rundir.journal import Journal
from ..rundir.layout import RunPaths
from ..rundir.logpages import LogPages
from ..rundir.logs import LogRing, Position
from .component import Component


class Run(Protocol):
    """What of a live run (:class:`.run.Run`) its clients are served from."""

    paths: RunPaths
    cfg: Config
    state: dict[str, Any]
    components: dict[str, Component]
    journal: Journal | None
    redactor: Redactor
    subscribers: list[Callable[[dict[str, Any]], None]]
    line_listeners: list[Callable[[Component], None]]

    @property
    def ending(self) -> bool: ...

    def snapshot_state(self, with_positions: bool = False) -> dict[str, Any]: ...

    def command(self, cmd: str, name: str | None = None, by: str = "user", client: str | None = None,
                **args: Any) -> dict[str, Any] | Awaitable[dict[str, Any]]: ...

    def watchers_changed(self) -> None: ...


class Served:
    def __init__(self, run: Run):
        self.run = run
        self.paths = run.paths
        self.subscribers: list[Callable[[dict[str, Any]], None]] = run.subscribers  # the same lists: the
        self.line_listeners: list[Callable[[Any], None]] = run.line_listeners  # run calls them
        self._pages: dict[str, LogPages] = {}

    def snapshot_state(self) -> dict[str, Any]:
        return self.run.snapshot_state()

    def rings(self) -> Mapping[str, LogRing]:
        return {n: c.ring for n, c in self.run.components.items()}

    @property
    def journal_seq(self) -> int:
        return self.run.journal.last_seq if self.run.journal else 0

    def hello(self) -> dict[str, Any]:
        r = self.run
        run = r.state.get("run", {})
        return {"pid": os.getpid(), "host": run.get("host") or socket.gethostname(), "name": r.cfg.name,
                "run_dir": str(r.paths.root), "config": r.cfg.source, "rlsup": VERSION, "ended": False,
                # The run decided to end (it may still be stopping): `up` tells the user instead of
                # claiming a run it "supervises in the background" that ended as it started.
                "ending": r.ending}

    def redact_lines(self, lines: list[str]) -> list[str]:
        return self.run.redactor.redact_lines(lines)

    def command(self, cmd: str, name: str | None = None, by: str = "user", client: str | None = None,
                **args: Any) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        return self.run.command(cmd, name, by=by, client=client, **args)

    def watchers_changed(self) -> None:
        self.run.watchers_changed()

    def log_pages(self, name: str) -> tuple[LogPages, Position] | None:
        """A component's log on disk and the position its ring has read to (the control server's
        ``log_read``: clients page older lines than the ring holds)."""
        c = self.run.components.get(name)
        if c is None:
            return None
        if name not in self._pages:
            self._pages[name] = LogPages(self.paths.log(name), c.logs_cfg.line_cap)
        return self._pages[name], c.position()
