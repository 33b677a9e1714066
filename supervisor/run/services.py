"""What the run offers outside itself: notifications, the control socket and the Prometheus endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..config.model import Config
from ..records import events as ev
from ..records.redact import Redactor
from .ending import Ending
from .server import RunView

if TYPE_CHECKING:
    from .notify import Notifier
    from .server import ControlServer


class Offering(RunView, Protocol):
    """What the services see of the run: what its control server sees, and what it is configured with."""

    cfg: Config
    redactor: Redactor
    end: Ending
    loop: asyncio.AbstractEventLoop

    def emit(self, event: ev.Event) -> dict[str, Any]: ...

    def snapshot_state(self, with_positions: bool = False) -> dict[str, Any]: ...


class Services:
    """Opened once the run may start (none for a run refused before any start); closed at its end."""

    def __init__(self, serve: bool) -> None:
        self.serve = serve  # whether the run opens its control socket
        self.notifier: Notifier | None = None
        self.server: ControlServer | None = None
        self.stop_metrics: Callable[[], None] | None = None

    async def open(self, run: Offering) -> None:
        cfg = run.cfg
        if cfg.notify is not None and (cfg.notify.webhook or cfg.notify.command):
            from .notify import Notifier

            self.notifier = Notifier(cfg.notify, run_name=cfg.name, run_dir=str(run.paths.root),
                                     redactor=run.redactor)
        if run.end.refused:
            return
        if cfg.metrics is not None:
            self._serve_metrics(run)
        if self.serve:
            from .server import ControlServer

            self.server = server = ControlServer(run, run.paths.sock)
            await server.start()

    def _serve_metrics(self, run: Offering) -> None:
        """Scrapes read the state on the loop's thread."""
        from .prometheus import serve

        m = run.cfg.metrics
        assert m is not None

        async def snap() -> dict[str, Any]:
            return run.snapshot_state(with_positions=True)

        def threadsafe() -> dict[str, Any]:
            return asyncio.run_coroutine_threadsafe(snap(), run.loop).result(timeout=10)
        try:
            self.stop_metrics = serve(threadsafe, m.host, m.port)
        except OSError as e:  # taken since `rlsup check`: the run goes on without it
            run.emit(ev.FlagRaised(None, type="metrics_unavailable", message=(
                f"metrics endpoint {m.host}:{m.port} could not be opened: {e.strerror or e}"),
                action="set another `metrics: port:` in the config"))

    @property
    def watched(self) -> bool:
        """Whether a client is connected (the GPUs are sampled faster then)."""
        return self.server is not None and bool(self.server.conns)

    async def close_socket(self) -> None:
        if self.server is not None:
            await asyncio.sleep(0.1)  # let clients see run_ended before the socket goes away
            await self.server.close()

    def close(self) -> None:
        if self.stop_metrics is not None:
            self.stop_metrics()
        if self.notifier is not None:
            self.notifier.close(5.0)  # waits (up to 5 s) for the notifications under way
