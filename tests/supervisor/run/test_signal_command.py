"""Issue 26 item 7: the socket's ``signal`` command sends only real signals.

``SIG_IGN`` (and ``SIG_DFL``, ``SIG_BLOCK``...) are attributes of Python's ``signal`` module that are
small integers: the command used to send SIGHUP for ``SIG_IGN``. Against a real daemon, over the real
socket, with a component that reports every signal it gets.
"""

from __future__ import annotations

import signal

import pytest

from rlsup.supervisor.records import protocol
from rlsup.supervisor.run.commands import parse_signal
from tests.conftest import wait_for, write_config
from tests.supervisor.run.test_server import hello, raw

CATCHER = """
name: sig
components:
  catcher:
    command: ["{py}", "-u", "-c", "import signal, time\\nfor s in (signal.SIGHUP, signal.SIGINT, signal.SIGUSR1):\\n    signal.signal(s, lambda n, f: print('got', signal.Signals(n).name, flush=True))\\nprint('ready', flush=True)\\nwhile True:\\n    time.sleep(1)"]
"""


@pytest.mark.parametrize("text", ["SIG_IGN", "SIG_DFL", "SIG_BLOCK", "SIG_SETMASK", "0", "999", "NSIG", "SIGRTMAX+1",
                                  "", "TERM; rm -rf /"])
def test_parse_signal_refuses_what_is_not_a_signal(text: str) -> None:
    with pytest.raises(ValueError, match="signal"):
        parse_signal(text)


@pytest.mark.parametrize("text", ["TERM", "SIGTERM", "sigterm", "term", " 15 "])
def test_parse_signal_names_and_numbers(text: str) -> None:
    assert parse_signal(text) is signal.SIGTERM


def test_the_socket_refuses_sig_ign_and_sends_real_signals(tmp_path, daemon) -> None:
    d = daemon(write_config(tmp_path, CATCHER))
    wait_for(lambda: "ready" in d.cli("logs", "catcher", "-n", "20").stdout, what="the catcher's handlers set")

    def command(rid: int, sig: str) -> dict:
        return raw(d.sock, hello(rid), protocol.encode({"id": rid + 1, "op": "command", "command": "signal",
                                                        "component": "catcher", "args": {"signal": sig}}))[-1]

    for rid, bad in ((10, "SIG_IGN"), (20, "SIG_DFL"), (30, "0")):
        r = command(rid, bad)
        assert not r["ok"] and "signal" in r["error"], r
    r = command(40, "usr1")
    assert r["ok"] and "SIGUSR1" in r["message"], r
    def delivered() -> str | None:
        out = d.cli("logs", "catcher", "-n", "20").stdout
        return out if "got SIGUSR1" in out else None

    logs = wait_for(delivered, what="SIGUSR1 delivered")
    assert "got SIGHUP" not in logs and "got SIGINT" not in logs, logs  # SIG_IGN / SIG_DFL sent nothing
