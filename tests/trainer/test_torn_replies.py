"""A server that dies mid-reply, on a real socket: the trainer's and orchestrator's HTTP helpers treat it
as "no answer", like a refused connection, and never raise. http.client raises IncompleteRead (a body
shorter than its Content-Length) and BadStatusLine from `resp.read()` and `urlopen`, and neither is an
OSError: CI caught the trainer dying of it at step 18 when the chaos demo's inference server died under
a weight push (tests/trainer/test_trainer_under_rlsup.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlsup.trainer import orchestrator, sync
from tests.conftest import torn_server

# Each is what a client reads from a server killed at that point of its reply.
TORN = {
    "body cut short": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"ok\"",
    "error body cut short": b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 100\r\n\r\n{\"det",
    "status line cut short": b"HTTP/1.1 2",
    "nothing after the request": b"",
}


@pytest.fixture(params=list(TORN))
def torn(request: pytest.FixtureRequest) -> Iterator[str]:
    with torn_server(TORN[request.param]) as s:
        yield s.url


def test_sync_request_reads_a_torn_reply_as_no_answer(torn: str) -> None:
    r = sync.request("POST", f"{torn}/update_weights_from_disk", {"model_path": "/w"}, timeout=5)
    assert not r.ok and not r.refused  # it may have acted on the request: not "refused"
    if r.status is None:
        assert r.error and r.error.startswith(torn)
        assert "the reply broke off" in r.error or "Connection reset" in r.error
    else:  # the status line came whole; the body did not
        assert r.status == 500 and r.data is None


def test_orchestrator_reads_a_torn_reply_as_the_server_down(torn: str) -> None:
    with pytest.raises(orchestrator.ServerDown):
        orchestrator.http_json(f"{torn}/v1/completions", {"prompt": "x"}, timeout=5)
    assert orchestrator.reported_step(torn) is None
