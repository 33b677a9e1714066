"""Notifications: POST a Slack-compatible JSON message and/or run a command on chosen events.

:meth:`Notifier.handle` never blocks and never raises: it puts the event on a bounded queue
(dropping the oldest, and saying so in the next message, when the queue is full) and a daemon
thread delivers it. A webhook gets ``{"text", "event", "run"}`` with retries (1, 2, 4 s backoff,
10 s timeout each try); a command gets ``RLSUP_EVENT`` (JSON), ``RLSUP_EVENT_TEXT``,
``RLSUP_RUN`` and ``RLSUP_RUN_DIR`` in its environment and 30 s to finish. Delivery failures are
printed to stderr once per outage. Every event is redacted before it leaves.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Mapping, Sequence
from typing import IO, Any

from ..config.model import NotifyCfg
from ..records.events import describe
from ..records.redact import Redactor


class Notifier:
    """Delivers matching events of one run to ``cfg.webhook`` and/or ``cfg.command``.

    ``env`` is the run's environment (default: this process's): its secret values are masked in
    everything sent, and it is the base environment of the command. ``backoff`` and the timeouts
    are for tests; ``stderr`` is where delivery failures are reported.
    """

    def __init__(self, cfg: NotifyCfg, *, run_name: str, run_dir: str, env: Mapping[str, str] | None = None,
                 max_queue: int = 100, backoff: Sequence[float] = (1.0, 2.0, 4.0), webhook_timeout: float = 10.0,
                 command_timeout: float = 30.0, stderr: IO[str] | None = None, redactor: Redactor | None = None):
        self.cfg = cfg
        self.run_name = run_name
        self.run_dir = run_dir
        self.env = dict(os.environ if env is None else env)
        self.on = frozenset(cfg.on)
        self.backoff = tuple(backoff)
        self.webhook_timeout = webhook_timeout
        self.command_timeout = command_timeout
        self.stderr = stderr
        self.redactor = redactor or Redactor.for_run([self.env], [])
        self.max_queue = max(1, max_queue)
        self.sent = 0
        self.failed = 0
        self.dropped = 0
        self._dropped_unreported = 0
        self._queue: deque[dict[str, Any]] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._closing = False
        self._abort = threading.Event()
        self._failing: set[str] = set()  # channels whose failure was already reported
        self._thread: threading.Thread | None = None
        if cfg.webhook or cfg.command:
            self._thread = threading.Thread(target=self._run, name="rlsup-notify", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ producer side (supervisor loop)

    def handle(self, event: Mapping[str, Any]) -> None:
        """Queue ``event`` for delivery if its kind is one of ``cfg.on``; returns at once."""
        if self._thread is None or self._closing or event.get("kind") not in self.on:
            return
        with self._cond:
            if len(self._queue) >= self.max_queue:
                self._queue.popleft()
                self.dropped += 1
                self._dropped_unreported += 1
            self._queue.append(dict(event))
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + (1 if self._busy else 0)

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued, for at most ``timeout`` seconds; then give up on the rest."""
        if self._thread is None:
            return
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._abort.set()  # cut retry waits short; the thread is a daemon either way
            with self._cond:
                left = len(self._queue) + (1 if self._busy else 0)
                self._queue.clear()
            if left:
                self._report("close", f"{left} notification(s) not delivered before shutdown")

    # ------------------------------------------------------------------ worker thread

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                event = self._queue.popleft()
                dropped, self._dropped_unreported = self._dropped_unreported, 0
                self._busy = True
            try:
                self._deliver(event, dropped)
            except Exception as e:  # never let one bad event end notifications
                self._report("internal", f"notification failed: {e!r}")
            finally:
                with self._cond:
                    self._busy = False

    def _deliver(self, event: dict[str, Any], dropped: int) -> None:
        safe = self.redactor.redact_obj(event)
        # One line for a chat message: ``[rlsup demo] trainer: FATAL: ...``.
        line = f"[rlsup {self.run_name}] {safe.get('component') or 'run'}: {describe(safe)}".replace("\n", " ")
        text = self.redactor.redact_text(line)
        if dropped:
            text += f" ({dropped} earlier notification(s) dropped: queue full)"
        ok = True
        if self.cfg.webhook:
            # Slack treats &, < and > as control characters in message text.
            slack = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            ok = self._post(self.cfg.webhook, {"text": slack, "event": safe, "run": self.run_name}) and ok
        if self.cfg.command:
            ok = self._command(self.cfg.command, safe, text) and ok
        if ok:
            self.sent += 1
        else:
            self.failed += 1

    def _post(self, url: str, payload: dict[str, Any]) -> bool:
        data = json.dumps(payload, default=str, ensure_ascii=False).encode()
        where = _host_of(url)
        last = ""
        for i in range(len(self.backoff) + 1):
            if i and self._abort.wait(self.backoff[i - 1]):
                break
            req = urllib.request.Request(url, data=data, method="POST",
                                         headers={"Content-Type": "application/json", "User-Agent": "rlsup"})
            try:
                with urllib.request.urlopen(req, timeout=self.webhook_timeout) as resp:
                    resp.read(65536)
                self._failing.discard("webhook")  # it works again: its next failure is reported
                return True
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}"
                if 400 <= e.code < 500 and e.code not in (408, 425, 429):
                    break  # the request itself is wrong: retrying will not help
            except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:
                reason = getattr(e, "reason", e)
                last = str(reason) or type(e).__name__
                if isinstance(e, http.client.HTTPException):  # no OSError: a reply that broke off
                    last = f"the reply broke off ({type(e).__name__}: {e})"
        self._report("webhook", f"webhook to {where} failed after retries: {last}")
        return False

    def _command(self, command: str | list[str], event: dict[str, Any], text: str) -> bool:
        argv = ["sh", "-c", command] if isinstance(command, str) else [str(x) for x in command]
        env = {**self.env, "RLSUP_EVENT": json.dumps(event, default=str, ensure_ascii=False),
               "RLSUP_EVENT_TEXT": text, "RLSUP_RUN": self.run_name, "RLSUP_RUN_DIR": self.run_dir}
        try:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
        except OSError as e:
            self._report("command", f"notify command could not start: {e}")
            return False
        try:
            _, err = proc.communicate(timeout=self.command_timeout)
        except subprocess.TimeoutExpired:
            # Its own session: end the whole group, not just the shell.
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            self._report("command", f"notify command timed out after {self.command_timeout:g} s")
            return False
        if proc.returncode != 0:
            lines = (err or b"").decode("utf-8", "replace").strip().splitlines()
            tail = self.redactor.redact_text(lines[-1]) if lines else ""
            self._report("command", f"notify command exited {proc.returncode}" + (f": {tail}" if tail else ""))
            return False
        self._failing.discard("command")
        return True

    # ------------------------------------------------------------------ reporting

    def _report(self, channel: str, msg: str) -> None:
        if channel in self._failing:
            return
        self._failing.add(channel)
        with contextlib.suppress(OSError, ValueError):
            print(f"rlsup: notify: {msg} (further failures not reported until it works again)",
                  file=self.stderr or sys.stderr, flush=True)


def _host_of(url: str) -> str:
    """Where a webhook goes, without its path: Slack's path is the secret."""
    try:
        p = urllib.parse.urlsplit(url)
        return f"{p.scheme}://{p.hostname}" + (f":{p.port}" if p.port else "")
    except ValueError:
        return "?"
