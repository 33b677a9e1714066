"""dependency_down flag and the DependencyTracker decision clock."""

from __future__ import annotations

from rlsup.supervisor.diagnosis import Flag
from rlsup.supervisor.diagnosis.dependency import DependencyTracker, connection_errors, dependency_down

# Real shapes of these errors (requests/urllib3, aiohttp, vLLM engine client), with rank prefixes.
LINES = [
    "Step 57/200 | reward 0.81",
    "[rank0]: requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=8000): Max retries "
    "exceeded with url: /v1/completions (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object "
    "at 0x7f>: Failed to establish a new connection: [Errno 111] Connection refused'))",
    "aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host 127.0.0.1:30000 ssl:default "
    "[Connect call failed ('127.0.0.1', 30000)]",
    "aiohttp.client_exceptions.ServerDisconnectedError: Server disconnected",
]


def test_connection_errors_strip_prefixes_and_skip_other_lines() -> None:
    errs = connection_errors(LINES)
    assert len(errs) == 3
    assert errs[0].startswith("requests.exceptions.ConnectionError")  # "[rank0]: " stripped
    assert connection_errors(["Server is not up yet", "loss 0.3", "Connected to 127.0.0.1:8000"]) == []


def test_flags_down_dependency_with_duration_and_action() -> None:
    f = dependency_down("orchestrator", lines=LINES, deps={"inference": "backoff", "db": "running"},
                        down_since={"inference": 1000.0}, now=1000.0 + 13 * 3600 + 120)
    assert isinstance(f, Flag) and f.type == "dependency_down" and not f.fatal
    assert f.dependencies == ("inference",)
    assert "orchestrator cannot reach its dependency inference (backoff, down for 13h02m)" in f.message
    assert f.action.startswith("restarting inference, not orchestrator")
    assert f.evidence[-1] == "dependency inference: state backoff"
    assert any("Cannot connect to host" in e for e in f.evidence)


def test_probe_failing_counts_as_down_and_categories_suffice() -> None:
    f = dependency_down("trainer", categories=["connection_refused"], deps={"inference": "running"},
                        probes_failing={"inference": True})
    assert f is not None and "inference (running but its probe fails)" in f.message
    assert "exits diagnosed connection_refused" in f.message
    assert f.evidence == ("dependency inference: state running, probe failing",)


def test_no_flag_when_dependencies_are_up_or_no_connection_errors() -> None:
    assert dependency_down("trainer", lines=LINES, deps={"inference": "running"}) is None
    assert dependency_down("trainer", lines=["loss 0.1"], categories=["python_exception"],
                           deps={"inference": "fatal"}) is None
    assert dependency_down("trainer", lines=LINES, deps={}) is None


def test_evidence_is_recent_and_deduplicated() -> None:
    lines = [f"ConnectionRefusedError: [Errno 111] Connection refused (try {i % 3})" for i in range(50)]
    f = dependency_down("trainer", lines=lines, deps={"inference": "starting"})
    assert f is not None
    shown = [e for e in f.evidence if e.startswith("ConnectionRefusedError")]
    assert len(shown) == 3 and len(set(shown)) == 3


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_watch_restart_first_then_stop_consumers_after_budget() -> None:
    clock = Clock()
    w = DependencyTracker(budget_s=600, clock=clock)
    assert w.observe("inference", down=False) is None
    assert w.observe("inference", down=True) == "restart_dependency"
    clock.t += 30
    assert w.observe("inference", down=True) is None  # once per episode
    assert w.down_for("inference") == 30
    assert w.down_since() == {"inference": 100.0}
    clock.t += 569
    assert w.observe("inference", down=True) is None
    clock.t += 1
    assert w.observe("inference", down=True) == "stop_consumers"
    clock.t += 1000
    assert w.observe("inference", down=True) is None
    assert w.observe("inference", down=False) == "recovered"
    assert w.down_for("inference") is None
    assert w.observe("inference", down=True) == "restart_dependency"  # a new episode


def test_watch_waits_while_consumers_are_fine() -> None:
    clock = Clock()
    w = DependencyTracker(budget_s=60, clock=clock)
    assert w.observe("db", down=True, consumers_failing=False) is None
    assert w.observe("db", down=True, consumers_failing=True) == "restart_dependency"
    assert w.observe("db", down=False) == "recovered"
    w.observe("db", down=True, consumers_failing=False)
    clock.t += 60
    assert w.observe("db", down=True, consumers_failing=False) == "stop_consumers"
    assert w.observe("db", down=False) == "recovered"
    assert w.observe("db", down=False) is None
