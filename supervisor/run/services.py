"""What a run offers outside itself: notifications, the control socket and the Prometheus endpoint."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Services:
    """The run's notifier (None: none configured), its control server (None: not served; ``serve``: whether the
    run opens one) and what stops its metrics endpoint (None: none open)."""

    def __init__(self, serve: bool = True) -> None:
        self.serve = serve
        self.notifier: Any = None
        self.server: Any = None
        self.stop_metrics: Callable[[], None] | None = None

    @property
    def watched(self) -> bool:
        """Whether a client is connected to the control socket now."""
        return self.server is not None and bool(self.server.conns)

    def notify(self, e: dict[str, Any]) -> None:
        if self.notifier is not None:
            self.notifier.handle(e)
