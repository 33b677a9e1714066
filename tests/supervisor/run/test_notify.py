"""Notifier against a real local HTTP server and a real command."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rlsup.supervisor.config.model import NotifyCfg
from rlsup.supervisor.run.notify import Notifier
from tests.conftest import PATIENCE, torn_server

FLAG = {"ts": 1.0, "seq": 3, "kind": "flag", "component": "trainer", "type": "repeated_error",
        "message": "AttributeError at train.py:57 on 2 consecutive attempts", "evidence": ["x"],
        "action": "stopped automatic restarts"}


class Hook:
    """A webhook receiver: records bodies; answers ``fail_first`` requests with 500; can block."""

    def __init__(self, fail_first: int = 0):
        self.bodies: list[dict] = []
        self.fail_first = fail_first
        self.requests = 0
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()
        self.got = threading.Condition()
        hook = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                hook.entered.set()
                hook.release.wait(30)
                with hook.got:
                    hook.requests += 1
                    failing = hook.requests <= hook.fail_first
                    if not failing:
                        hook.bodies.append(json.loads(body))
                    hook.got.notify_all()
                self.send_response(500 if failing else 200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *a: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/T000/B000/SECRETPATH"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()  # a quick shutdown()

    def wait_bodies(self, n: int, timeout: float = 10.0) -> list[dict]:
        with self.got:
            self.got.wait_for(lambda: len(self.bodies) >= n, timeout)
        return list(self.bodies)


@pytest.fixture
def hook() -> Iterator[Hook]:
    h = Hook()
    yield h
    h.release.set()
    h.server.shutdown()
    h.server.server_close()


def test_webhook_receives_slack_compatible_json(hook: Hook) -> None:
    n = Notifier(NotifyCfg(webhook=hook.url, on=["flag", "fatal"]), run_name="gsm8k", run_dir="/r", env={})
    n.handle({"ts": 1.0, "seq": 1, "kind": "started", "component": "trainer", "pid": 1, "attempt": 1})
    n.handle(FLAG)
    n.handle({"ts": 2.0, "seq": 4, "kind": "fatal", "component": "trainer", "reason": "repeated_error"})
    n.close(timeout=10)
    bodies = hook.wait_bodies(2)
    assert [b["event"]["kind"] for b in bodies] == ["flag", "fatal"]  # "started" is not in `on`
    assert bodies[0]["run"] == "gsm8k"
    assert bodies[0]["text"].startswith("[rlsup gsm8k] trainer: FLAG repeated_error: AttributeError at train.py:57")
    assert "\n" not in bodies[0]["text"]
    assert bodies[1]["text"] == "[rlsup gsm8k] trainer: FATAL: repeated_error"
    assert n.sent == 2 and n.failed == 0


def test_secrets_never_leave(hook: Hook) -> None:
    env = {"HF_TOKEN": "hf_SuperSecret123"}
    n = Notifier(NotifyCfg(webhook=hook.url, on=["flag"]), run_name="r", run_dir="/r", env=env)
    n.handle({**FLAG, "message": "401 for token hf_SuperSecret123",
              "evidence": ["python train.py --api-key sk-abc12345", "Authorization: Bearer eyJabc.def"]})
    n.close(timeout=10)
    (body,) = hook.wait_bodies(1)
    raw = json.dumps(body)
    for secret in ("hf_SuperSecret123", "sk-abc12345", "eyJabc.def"):
        assert secret not in raw
    assert "401 for token ***" in body["text"]


def test_webhook_retries_until_the_server_answers() -> None:
    h = Hook(fail_first=2)
    try:
        err = io.StringIO()
        n = Notifier(NotifyCfg(webhook=h.url, on=["flag"]), run_name="r", run_dir="/r", env={},
                     backoff=(0.01, 0.01, 0.01), stderr=err)
        n.handle(FLAG)
        n.close(timeout=10)
        assert len(h.wait_bodies(1)) == 1
        assert h.requests == 3
        assert n.sent == 1 and err.getvalue() == ""
    finally:
        h.server.shutdown()
        h.server.server_close()


def test_webhook_failure_is_reported_once_and_never_raised() -> None:
    h = Hook(fail_first=10**6)
    try:
        err = io.StringIO()
        n = Notifier(NotifyCfg(webhook=h.url, on=["flag"]), run_name="r", run_dir="/r", env={},
                     backoff=(0.01, 0.01, 0.01), stderr=err)
        n.handle(FLAG)
        n.handle(FLAG)
        n.close(timeout=10)
        assert h.requests == 8  # 1 + 3 retries, twice
        assert n.failed == 2 and n.sent == 0
        lines = err.getvalue().splitlines()
        assert len(lines) == 1 and "HTTP 500" in lines[0]
        assert "SECRETPATH" not in err.getvalue()  # a Slack webhook's path is its secret
    finally:
        h.server.shutdown()
        h.server.server_close()


def test_hung_webhook_never_blocks_handle_and_queue_stays_bounded(hook: Hook) -> None:
    hook.release.clear()  # the server accepts and then hangs
    n = Notifier(NotifyCfg(webhook=hook.url, on=["flag"]), run_name="r", run_dir="/r", env={},
                 max_queue=10, backoff=(0.01,), webhook_timeout=30)
    n.handle({**FLAG, "seq": 0})
    assert hook.entered.wait(PATIENCE)  # the worker is now stuck inside the first POST
    for i in range(1, 1000):
        n.handle({**FLAG, "seq": i})
    # handle() returned 999 times while one delivery hangs: nothing waited on the network.
    assert n.pending() == 11  # one in flight + a full queue
    assert n.dropped == 1000 - 11
    hook.release.set()
    n.close(timeout=10)
    bodies = hook.wait_bodies(11)
    seqs = [b["event"]["seq"] for b in bodies]
    assert seqs == [0, *range(990, 1000)]  # the newest survive, the oldest were dropped
    assert bodies[1]["text"].endswith("(989 earlier notification(s) dropped: queue full)")
    assert "dropped" not in bodies[2]["text"]


def test_command_gets_event_in_env(tmp_path: Path) -> None:
    out = tmp_path / "got.txt"
    cmd = f'printf "%s\\n%s\\n%s\\n" "$RLSUP_RUN" "$RLSUP_EVENT_TEXT" "$RLSUP_EVENT" >> {out}'
    n = Notifier(NotifyCfg(command=cmd, on=["completed"]), run_name="demo", run_dir=str(tmp_path),
                 env={"PATH": "/usr/bin:/bin", "WANDB_API_KEY": "wk-live-777"})
    n.handle({"ts": 1.0, "seq": 9, "kind": "completed", "component": "trainer"})
    n.handle({**FLAG, "message": "saw wk-live-777"})  # not in `on`
    n.close(timeout=10)
    run, text, ev = out.read_text().splitlines()
    assert run == "demo"
    assert text == "[rlsup demo] trainer: completed"
    assert json.loads(ev)["kind"] == "completed"
    assert n.sent == 1


def test_command_as_list_and_failure(tmp_path: Path) -> None:
    out = tmp_path / "argv.txt"
    err = io.StringIO()
    n = Notifier(NotifyCfg(command=["sh", "-c", f'echo "$RLSUP_RUN_DIR" > {out}; exit 3'], on=["fatal"]),
                 run_name="demo", run_dir="/runs/demo", env={"PATH": "/usr/bin:/bin"}, stderr=err)
    n.handle({"ts": 1.0, "seq": 9, "kind": "fatal", "component": "trainer", "reason": "x"})
    n.close(timeout=10)
    assert out.read_text().strip() == "/runs/demo"
    assert n.failed == 1 and "exited 3" in err.getvalue()


def test_hung_command_is_killed(tmp_path: Path) -> None:
    err = io.StringIO()
    n = Notifier(NotifyCfg(command="sleep 60", on=["fatal"]), run_name="demo", run_dir="/r",
                 env={"PATH": "/usr/bin:/bin"}, stderr=err, command_timeout=0.3)
    n.handle({"ts": 1.0, "seq": 9, "kind": "fatal", "component": "trainer", "reason": "x"})
    n.close(timeout=10)
    assert n.failed == 1 and "timed out" in err.getvalue()


def test_nothing_configured_is_inert() -> None:
    n = Notifier(NotifyCfg(), run_name="r", run_dir="/r", env={})
    n.handle(FLAG)
    assert n.pending() == 0
    n.close()


def test_a_webhook_server_that_dies_mid_reply_is_retried_and_reported() -> None:
    """A status line cut short raises http.client.BadStatusLine, which is no OSError: it went to the
    worker's last-resort handler as "notification failed" without a single retry."""
    with torn_server(b"HTTP/1.1 2") as s:
        err = io.StringIO()
        n = Notifier(NotifyCfg(webhook=f"{s.url}/hook", on=["flag"]), run_name="r", run_dir="/r", env={},
                     backoff=(0.01, 0.01, 0.01), stderr=err)
        n.handle(FLAG)
        n.close(timeout=10)
        assert s.requests == 4 and n.failed == 1 and n.sent == 0, err.getvalue()  # 1 + 3 retries
        assert f"webhook to {s.url} failed after retries: the reply broke off (BadStatusLine" in err.getvalue()
