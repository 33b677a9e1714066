"""The fleet: fleet-file errors, cross-pod correlation (pure), and `rlsup fleet --json` against
real supervisors behind a real sshd on 127.0.0.1 (two pods failing the same way, one healthy,
one with nothing listening, one that accepts TCP and never speaks SSH)."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from rlsup.supervisor.cli.fleet import format_text
from rlsup.supervisor.client.fleet import (
    FLAG_TYPE,
    Failure,
    PodSpec,
    PodState,
    correlate,
    gpu_summary,
    load_fleet,
    signature,
)
from rlsup.supervisor.client.ssh import CONNECT_TIMEOUT_S
from rlsup.supervisor.config.loader import ConfigError
from tests.conftest import PY, cli_env, free_port, write_config

FIXTURES = Path(__file__).parent.parent.parent / "fixtures" / "fleet"
REMOTE = f"{PY} -m rlsup.supervisor.cli"


def utc_hm(ts: float) -> str:
    return time.strftime("%H:%M", time.gmtime(ts))


# ------------------------------------------------------------------------------- fleet file


def test_example_fleet_file_loads():
    pods = load_fleet(FIXTURES / "fleet.yaml")
    assert pods[0] == PodSpec(host="gpu-pod-1", user="root", port=22, run_dir="/workspace/runs/qwen-0.5b",
                              label="qwen-0.5b")
    assert pods[1].label == "qwen-1.5b" and pods[1].user is None and pods[1].port is None
    assert pods[2] == PodSpec(host="gpu-pod-3", label="gpu-pod-3")  # a bare host name
    assert pods[0].attach_hint() == "rlsup attach root@gpu-pod-1:22 --run-dir /workspace/runs/qwen-0.5b"


def test_fleet_file_errors_have_positions(tmp_path):
    p = tmp_path / "f.yaml"
    p.write_text("pods:\n"
                 "  - host: a\n"
                 "    prot: 22\n"             # typo
                 "  - host: b\n"
                 "    port: 70000\n"          # out of range
                 "  - user: root\n"           # no host
                 "  - host: a\n"              # duplicate label
                 "  - host: root@c:22\n"      # user/port belong in their own keys
                 "  - host: d\n"
                 "    run_dir: ${NOPE_UNSET_VAR}\n"
                 "extra: 1\n")
    with pytest.raises(ConfigError) as exc:
        load_fleet(p, environ={})
    text = str(exc.value).splitlines()
    assert f"{p}:3:5: pods[0].prot: unknown key 'prot'; did you mean 'port'?" in text
    assert any(line.startswith(f"{p}:5:11: pods[1].port: port must be a number") for line in text)
    assert any(line.startswith(f"{p}:6:5: pods[2]: missing required key 'host'") for line in text)
    assert any(line.startswith(f"{p}:7:11: pods[3].host: two pods named 'a'") for line in text)
    assert any(line.startswith(f"{p}:8:11: pods[4].host: write the host alone") for line in text)
    assert any(line.startswith(f"{p}:10:14: pods[5].run_dir: undefined variable NOPE_UNSET_VAR") for line in text)
    assert any(line.startswith(f"{p}:11:1: extra: unknown key 'extra'") for line in text)
    assert len(text) == 7


@pytest.mark.parametrize(("text", "message"), [
    ("", "the file is empty"),
    ("- a\n", "the top level must be a mapping"),
    ("pods: []\n", "`pods` must be a non-empty list"),
    ("pods: [a\n", "YAML syntax error"),
])
def test_fleet_file_shape_errors(tmp_path, text, message):
    p = tmp_path / "f.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_fleet(p)
    assert message in str(exc.value) and str(exc.value).startswith(f"{p}:")


def test_cli_reports_fleet_file_errors_without_traceback(tmp_path):
    p = tmp_path / "f.yaml"
    p.write_text("pods:\n  - hots: a\n")
    r = subprocess.run([PY, "-m", "rlsup.supervisor.cli", "fleet", str(p), "--json"], capture_output=True, text=True,
                       env=cli_env(), timeout=30)
    assert r.returncode == 2
    assert f"{p}:2:5: pods[0].hots: unknown key 'hots'; did you mean 'host'?" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


# ------------------------------------------------------------------------------- correlation

ATTR = {"category": "python_exception", "summary": "AttributeError: 'Policy' object has no attribute 'x'",
        "exception": "AttributeError: 'Policy' object has no attribute 'x'", "location": "train.py:12",
        "step": 40, "evidence": ["Traceback (most recent call last):", "AttributeError: ..."]}
OOM = {"category": "cuda_oom", "summary": "CUDA out of memory", "exception": "torch.OutOfMemoryError: CUDA",
       "location": "train.py:80", "step": 3, "evidence": []}
T0 = 1_700_000_000.0  # 22:13:20 UTC


def fail(ts: float, diag: dict, component: str = "trainer") -> Failure:
    return Failure(component, ts, diag, exit_code=1)


def test_identical_failures_on_several_pods_become_one_flag():
    other_msg = dict(ATTR, exception="AttributeError: 'Policy' object has no attribute 'y'")
    flags = correlate({
        "a": [fail(T0 + 60, ATTR), fail(T0 + 120, ATTR)],
        "b": [fail(T0, other_msg)],  # same type and line, other message: the same failure
        "c": [fail(T0 + 30, OOM)],
        "d": [],
    }, 4, timefmt=utc_hm)
    assert len(flags) == 1
    f = flags[0]
    assert f["type"] == FLAG_TYPE
    assert f["message"] == "AttributeError at train.py:12 on 2/4 pods, first at 22:13"
    assert f["pods"] == ["b", "a"]  # in the order they first failed
    assert f["diagnosis"]["category"] == "python_exception" and f["diagnosis"]["location"] == "train.py:12"
    ev = {e["pod"]: e for e in f["evidence"]}
    assert ev["a"]["count"] == 2 and ev["a"]["ts"] == T0 + 120 and ev["a"]["evidence"] == ATTR["evidence"]
    assert ev["b"]["component"] == "trainer" and ev["b"]["step"] == 40


def test_correlation_keys_and_what_it_ignores():
    elsewhere = dict(ATTR, location="train.py:13")
    unknown = {"category": "unknown", "summary": "exit 1", "exception": None, "location": None}
    stopped = {"category": "none", "summary": "stopped by user"}
    killed = {"category": "killed", "summary": "killed by SIGKILL", "exception": None, "location": None}
    flags = correlate({
        "a": [fail(T0, ATTR), fail(T0, unknown), fail(T0, stopped), fail(T0 + 5, killed)],
        "b": [fail(T0, elsewhere), fail(T0, unknown), fail(T0, stopped), fail(T0 + 1, killed)],
        "c": [fail(T0 + 2, killed)],
    }, 3, timefmt=utc_hm)
    # Another line is another failure; bare unknowns and requested stops group nothing; a signal
    # with no traceback groups by category.
    assert [f["message"] for f in flags] == ["killed on 3/3 pods, first at 22:13"]
    assert flags[0]["pods"] == ["b", "c", "a"]
    assert signature(ATTR) == ("python_exception", "AttributeError", "train.py:12")


def test_same_file_checked_out_in_other_directories_is_the_same_failure():
    a = dict(ATTR, location="/home/alice/sweep/train.py:12")
    b = dict(ATTR, location="/workspace/sweep/train.py:12")
    [flag] = correlate({"a": [fail(T0, a)], "b": [fail(T0 + 1, b)]}, 2, timefmt=utc_hm)
    assert flag["message"] == "AttributeError at train.py:12 on 2/2 pods, first at 22:13"
    assert [e["location"] for e in flag["evidence"]] == [a["location"], b["location"]]


def test_most_widespread_flag_first():
    flags = correlate({"a": [fail(T0, OOM), fail(T0 + 9, ATTR)], "b": [fail(T0 + 1, OOM), fail(T0 + 8, ATTR)],
                       "c": [fail(T0 + 7, ATTR)]}, 3, timefmt=utc_hm)
    assert [f["pods"] for f in flags] == [["c", "b", "a"], ["a", "b"]]


def test_pod_state_collects_failures_from_events_and_last_exit():
    changes = []
    pod = PodState(PodSpec(host="h", label="p"), on_change=lambda: changes.append(1))
    exited = {"ts": T0, "seq": 5, "kind": "exited", "component": "trainer", "exit_code": 1, "signal": None,
              "uptime_s": 1.0, "step": 40, "diagnosis": ATTR}
    pod.on_connection("connecting", "")
    assert not pod.settled
    pod.on_event(exited)  # replayed before the snapshot, as Session does
    snap_state = {"run": {"name": "r"}, "components": {"trainer": {"state": "fatal", "last_exit": {
        "exit_code": 1, "signal": None, "uptime_s": 1.0, "step": 40, "diagnosis": ATTR, "ts": T0}},
        "inference": {"state": "running", "last_exit": {"exit_code": None, "signal": "SIGTERM", "ts": T0 - 9,
                                                        "diagnosis": {"category": "none"}}}}, "gpus": []}
    pod.on_snapshot({"state": snap_state}, False)
    pod.on_connection("attached", "host")
    assert pod.settled and pod.connected and pod.error is None
    assert [(f.component, f.ts) for f in pod.failures] == [("trainer", T0)]  # once, not twice
    pod.on_connection("reconnecting", "cannot connect to h:22: [Errno 111] Connection refused; retrying in 1.0s")
    assert pod.error == "cannot connect to h:22: [Errno 111] Connection refused" and not pod.connected
    j = pod.to_json(T0 + 10)
    assert j["label"] == "p" and j["connected"] is False and j["run"]["name"] == "r"
    assert j["components"]["trainer"]["state"] == "fatal"  # the last known state stays visible
    assert changes


def test_summaries():
    assert gpu_summary([]) == "-"
    assert gpu_summary([{"util_pct": 80}, {"util_pct": 90}]) == "2 GPU 85%"
    text = format_text({"flags": [{"type": FLAG_TYPE, "message": "m", "pods": ["a", "b"]}],
                        "pods": [{"label": "a", "connected": False, "connection": "reconnecting", "error": "refused"}]})
    assert "FLEET FLAG fleet_repeated_error: m (a, b)" in text and "reconnecting: refused" in text


# ------------------------------------------------------------------------------- end to end over SSH

CRASHING = """
name: {name}
components:
  inference:
    command: ["{py}", "-c", "import time; time.sleep(1000)"]
  trainer:
    command: ["{py}", "-u", "%s"]
    restart: {policy: never}
""" % (FIXTURES / "crash_train.py")

HEALTHY = """
name: healthy
components:
  trainer:
    command: ["{py}", "-u", "-c", "import time\\nfor i in range(1, 100000):\\n    print(f'Step {i}/5000', flush=True)\\n    time.sleep(0.2)"]
    progress: {pattern: 'Step (?P<step>\\d+)/(?P<total>\\d+)'}
"""


@pytest.fixture
def silent_port():
    """A port that accepts TCP connections and never says a word (a hung host, as SSH sees it): (its
    port, the monotonic times it accepted a connection at)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    accepted: list[float] = []
    held: list[socket.socket] = []

    def serve() -> None:
        with contextlib.suppress(OSError):  # closed at the end
            while True:
                held.append(s.accept()[0])
                accepted.append(time.monotonic())

    threading.Thread(target=serve, daemon=True).start()
    yield s.getsockname()[1], accepted
    s.close()
    for c in held:
        c.close()


@pytest.mark.slow
def test_fleet_json_groups_the_same_failure_and_unreachable_pods_do_not_stall(sshd, tmp_path, daemon,
                                                                              silent_port):
    sshd.trust()
    runs = {}
    for name, text in (("qwen-a", CRASHING.replace("{name}", "qwen-a")),
                       ("qwen-b", CRASHING.replace("{name}", "qwen-b")), ("healthy", HEALTHY)):
        d = daemon(write_config(tmp_path, text, name=f"{name}.yaml"), run_dir=tmp_path / name)
        runs[name] = d
    for name in ("qwen-a", "qwen-b"):
        runs[name].wait_event(lambda e: e["kind"] == "fatal" and e["component"] == "trainer", what="trainer fatal")
    runs["healthy"].wait_event(lambda e: e["kind"] == "started", what="healthy started")
    closed = free_port()
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "pods:\n"
        + "".join(f"  - {{host: testpod, run_dir: {runs[n].run_dir}, label: {n}}}\n" for n in runs)
        + f"  - {{host: 127.0.0.1, port: {closed}, label: down}}\n"
        + f"  - {{host: 127.0.0.1, port: {silent_port[0]}, label: hung}}\n")
    r = subprocess.run([PY, "-m", "rlsup.supervisor.cli", "fleet", str(fleet), "--json", "--timeout", "6",
                        "--remote-cmd", REMOTE], capture_output=True, text=True, timeout=60,
                       env=cli_env({"HOME": str(sshd.home)}))
    done = time.monotonic()
    assert r.returncode == 1, r.stderr  # two pods unreachable
    snap = json.loads(r.stdout)
    pods = {p["label"]: p for p in snap["pods"]}
    assert list(pods) == ["qwen-a", "qwen-b", "healthy", "down", "hung"]
    for n in ("qwen-a", "qwen-b", "healthy"):
        assert pods[n]["connected"] is True and pods[n]["error"] is None, pods[n]
        assert pods[n]["run"]["name"] == n
    assert pods["qwen-a"]["components"]["trainer"]["state"] == "fatal"
    assert pods["qwen-a"]["components"]["inference"]["state"] in ("starting", "running")
    assert pods["healthy"]["components"]["trainer"]["state"] in ("starting", "running")
    assert pods["down"]["connected"] is False and "cannot connect" in pods["down"]["error"]
    assert pods["hung"]["connected"] is False and pods["hung"]["error"]
    # The hung pod holds its SSH dial open, yet the answer comes at the 6 s timeout: before that dial could
    # have given up by itself (CONNECT_TIMEOUT_S, counted from when the pod took the connection, so the
    # CLI's start-up on a loaded machine does not count).
    assert silent_port[1] and done - silent_port[1][0] < CONNECT_TIMEOUT_S, (done - silent_port[1][0])

    [flag] = snap["flags"]
    assert flag["type"] == "fleet_repeated_error"
    assert sorted(flag["pods"]) == ["qwen-a", "qwen-b"]
    assert flag["diagnosis"]["location"] == "crash_train.py:13"
    assert flag["diagnosis"]["exception"].startswith("AttributeError")
    assert flag["message"].startswith("AttributeError at crash_train.py:13 on 2/5 pods, first at ")
    assert {e["pod"] for e in flag["evidence"]} == {"qwen-a", "qwen-b"}
    assert all(any("generate_batch" in line for line in e["evidence"]) for e in flag["evidence"])
