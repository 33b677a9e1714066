"""The fleet after the fact: pods whose runs have ended answer with their final state and how they
ended, and their failures (from each pod's record: last exits, replayed events, the journal; each exit
once) are grouped with live pods' failures. Unit tests over the real Fleet with scripted sessions, and
an end-to-end test over the real sshd with two runs that ended with the same AttributeError."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from rlsup.supervisor.cli.fleet import format_text
from rlsup.supervisor.client.fleet import (
    FLAG_TYPE,
    Failure,
    Fleet,
    PodSpec,
    PodState,
    failures_in_events,
    failures_in_state,
)
from rlsup.supervisor.records import state as run_state
from tests.conftest import PATIENCE, PY, Headless, cli_env, write_config

FIXTURES = Path(__file__).parent.parent.parent / "fixtures" / "fleet"
REMOTE = f"{PY} -m rlsup.supervisor.cli"
T0 = 1_700_000_000.0  # 22:13:20 UTC

ATTR = {"category": "python_exception", "summary": "AttributeError: 'Policy' object has no attribute 'x'",
        "exception": "AttributeError: 'Policy' object has no attribute 'x'", "location": "train.py:12",
        "step": 40, "evidence": ["Traceback (most recent call last):", "AttributeError: ..."]}
STOPPED = {"category": "none", "summary": "stopped by shutdown (killed by SIGTERM)"}


def utc_hm(ts: float) -> str:
    return time.strftime("%H:%M", time.gmtime(ts))


# ------------------------------------------------------------------------------- journals, as a run writes them


class Journal:
    """Events of one run with increasing seq, and its final state through the real reducer."""

    def __init__(self, name: str, components: tuple[str, ...] = ("inference", "trainer")):
        self.events: list[dict[str, Any]] = []
        self.name = name
        self.add(T0 - 100, "run_started", None, name=name, components=list(components))

    def add(self, ts: float, kind: str, component: str | None, **fields: Any) -> Journal:
        self.events.append({"ts": ts, "seq": len(self.events) + 1, "kind": kind, "component": component, **fields})
        return self

    def start(self, ts: float, component: str, attempt: int) -> Journal:
        return self.add(ts, "started", component, pid=1000 + attempt, attempt=attempt, resume=None)

    def crash(self, ts: float, component: str, attempt: int, diag: dict[str, Any] = ATTR) -> Journal:
        return self.add(ts, "exited", component, exit_code=1, signal=None, uptime_s=5.0, step=40, diagnosis=diag,
                        attempt=attempt)

    def end(self, ts: float) -> Journal:
        self.add(ts, "fatal", "trainer", reason="exit 1; gave up after 2 restarts")
        self.add(ts + 0.1, "stopping", "inference", by="shutdown", signal="SIGTERM")
        self.add(ts + 0.4, "exited", "inference", exit_code=None, signal="SIGTERM", uptime_s=99.0, step=None,
                 diagnosis=STOPPED, attempt=1)
        self.add(ts + 0.4, "stopped", "inference", by="shutdown")
        return self.add(ts + 0.5, "run_ended", None, exit_code=1,
                        reason="trainer fatal: exit 1; gave up after 2 restarts",
                        root={"component": "trainer", "reason": "exit 1; gave up after 2 restarts"})

    def state(self) -> dict[str, Any]:
        st = run_state.initial({}, [])
        for e in self.events:
            run_state.apply(st, e)
        return run_state.view(st, T0 + 60)


def crashed(name: str, first: float, attempts: int, *, ended: bool) -> Journal:
    """inference up; trainer crashing `attempts` times with the same AttributeError from `first` on."""
    j = Journal(name).start(T0 - 99, "inference", 1)
    for a in range(1, attempts + 1):
        j.start(first - 5 + (a - 1) * 10, "trainer", a).crash(first + (a - 1) * 10, "trainer", a)
    if ended:
        j.end(first + (attempts - 1) * 10 + 1)
    return j


# ------------------------------------------------------------------------------- scripted sessions


class Refused(Exception):
    pass


class ScriptedClient:
    """The part of :class:`rlsup.supervisor.client.session.Client` the fleet uses after a snapshot."""

    def __init__(self, journal: list[dict[str, Any]] | None):
        self.journal = journal  # None: an older supervisor that does not answer `events`
        self.asked: list[tuple[int, int]] = []

    async def events(self, since: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        self.asked.append((since, limit))
        if self.journal is None:
            raise ConnectionError("bad events request")
        return [e for e in self.journal if e["seq"] > since][-limit:]


class ScriptedSession:
    """What :class:`rlsup.supervisor.client.session.Session` tells its listener, in the same order, for one pod:

    - ``live``: a running supervisor; the snapshot replays its events (the server's recent ones);
    - ``archive``: ``rlsup bridge`` on an ended run: hello ``ended`` with the note, the final state,
      no replayed events; the journal only through ``events``;
    - ``ends``: live, then the run ends while connected (exits, ``run_ended``), the supervisor goes away.
    """

    def __init__(self, listener: PodState, mode: str, journal: Journal, *, answers_events: bool = True):
        self.listener = listener
        self.mode = mode
        self.journal = journal
        self.client: ScriptedClient | None = None
        self.server: dict[str, Any] = {}
        self.closed_by_fleet = False
        self.answers_events = answers_events
        self._stop = asyncio.Event()

    async def run(self) -> None:
        L = self.listener
        L.on_connection("connecting", "")
        events = self.journal.events
        cut = len(events)
        if self.mode == "ends":  # connected before the crash; the rest arrives live
            cut = next(i for i, e in enumerate(events) if e["kind"] == "exited")
        self.client = ScriptedClient(events[:cut] if self.answers_events else None)
        self.server = {"host": "pod", "name": self.journal.name}
        if self.mode == "archive":
            self.server.update(ended=True, ended_note=f"ended at <when>: {events[-1]['reason']} (exit code 1)")
        replay = [] if self.mode == "archive" else events[:cut]
        for e in replay:
            L.on_event(e)
        st = run_state.initial({}, [])
        for e in events[:cut]:
            run_state.apply(st, e)
        L.on_snapshot({"state": run_state.view(st, T0 + 60), "events": replay}, False)
        L.on_connection("attached", "pod")
        if self.mode == "ends":
            for e in events[cut:]:
                L.on_event(e)
            L.on_connection("ended", "connection closed by the supervisor")
            return
        await self._stop.wait()
        L.on_connection("closed", "")

    async def command(self, command: str, component: str | None = None, **args: Any) -> dict[str, Any]:
        return {"ok": False, "error": "read-only"}

    def close(self) -> None:
        self.closed_by_fleet = True
        self._stop.set()


def run_fleet(specs: list[PodSpec], factory: Any, until: Any, look: Any, **kw: Any) -> Any:
    """Run a Fleet on its own loop until `until(fleet)` holds and every pod has answered (or fail
    after a generous guard); returns `look(fleet)`, taken while the fleet still runs."""
    fleet = Fleet(specs, lambda s: None, session_factory=factory, clock=lambda: T0 + 60, timefmt=utc_hm, **kw)
    seen: list[Any] = []

    async def go() -> None:
        task = asyncio.ensure_future(fleet.run())
        try:
            for _ in range(2000):
                if until(fleet) and all(p.settled for p in fleet.pods):
                    seen.append(look(fleet))
                    return
                await asyncio.sleep(0.005)
            raise AssertionError("the fleet never got there")
        finally:
            fleet.close()
            await asyncio.wait_for(task, PATIENCE)

    asyncio.run(go())
    return seen[0]


# ------------------------------------------------------------------------------- unit tests


def test_failures_from_last_exit_know_their_attempt():
    j = crashed("r", T0, 3, ended=False)
    [f] = failures_in_state(j.state())  # inference's clean start has no exit; trainer's last is attempt 3
    assert (f.component, f.attempt, f.ts, f.exit_code) == ("trainer", 3, T0 + 20, 1)
    j.start(T0 + 25, "trainer", 4)  # a newer attempt running: the last exit was the one before
    [f] = failures_in_state(j.state())
    assert (f.attempt, f.ts) == (3, T0 + 20)
    assert [(f.component, f.attempt) for f in failures_in_events(j.events)] == [("trainer", a) for a in (1, 2, 3)]
    ended = crashed("r", T0, 1, ended=True)
    assert [f.component for f in failures_in_events(ended.events)] == ["trainer"]  # a shutdown stop is no failure


def test_each_exit_counts_once_however_it_was_seen():
    pod = PodState(PodSpec(host="h", label="p"))
    j = crashed("r", T0, 3, ended=True)
    pod.on_event(next(e for e in j.events if e["kind"] == "exited"))  # attempt 1 seen live
    pod.on_snapshot({"state": j.state()}, False)  # last_exit: attempt 3
    pod.add_history(j.events)  # the journal: attempts 1, 2, 3 again
    pod.add_history(j.events)
    assert [(f.attempt, f.ts) for f in pod.failures] == [(1, T0), (2, T0 + 10), (3, T0 + 20)]
    # A record without an attempt (an older journal) is the same exit when the time matches.
    pod.add_failures([Failure("trainer", T0 + 10, ATTR, 1)])
    pod.add_failures([Failure("trainer", T0 + 30, ATTR, 1)])
    assert [(f.attempt, f.ts) for f in pod.failures] == [(1, T0), (2, T0 + 10), (3, T0 + 20), (None, T0 + 30)]


def test_four_pods_dead_within_30s_live_and_ended_give_one_flag():
    """The incident: four pods die within 30 s of the same AttributeError at train.py:12, and the
    fleet is opened a minute later. Two runs have ended (one served from its run dir with the
    journal, one from a pod whose rlsup does not answer `events`), one supervisor is still up (its
    inference running), and one run ends while the fleet watches."""
    journals = {
        "pod-a": crashed("a", T0 + 12, 2, ended=False),  # live: trainer fatal, inference still running
        "pod-b": crashed("b", T0, 3, ended=True),
        "pod-c": crashed("c", T0 + 29, 1, ended=True),
        "pod-d": crashed("d", T0 + 5, 2, ended=True),
    }
    modes = {"pod-a": "live", "pod-b": "archive", "pod-c": "archive", "pod-d": "ends"}
    sessions: dict[str, list[ScriptedSession]] = {k: [] for k in journals}

    def factory(connect: Any, listener: PodState) -> ScriptedSession:
        s = ScriptedSession(listener, modes[listener.label], journals[listener.label],
                            answers_events=listener.label != "pod-c")
        sessions[listener.label].append(s)
        return s

    snap, let_go = run_fleet(
        [PodSpec(host=label, label=label) for label in journals], factory,
        until=lambda f: f.pod("pod-d").ended and all(s[0].client for s in sessions.values()),
        look=lambda f: (f.snapshot(), {k: s[0].closed_by_fleet for k, s in sessions.items()}))

    [flag] = snap["flags"]
    assert flag["type"] == FLAG_TYPE
    assert flag["pods"] == ["pod-b", "pod-d", "pod-a", "pod-c"]  # in the order they first failed
    assert flag["message"] == "AttributeError at train.py:12 on 4/4 pods, first at 22:13"
    counts = {e["pod"]: e["count"] for e in flag["evidence"]}
    assert counts == {"pod-a": 2, "pod-b": 3, "pod-c": 1, "pod-d": 2}  # every attempt, none twice
    assert {e["pod"]: e["ts"] for e in flag["evidence"]} == {
        "pod-a": T0 + 22, "pod-b": T0 + 20, "pod-c": T0 + 29, "pod-d": T0 + 15}

    pods = {p["label"]: p for p in snap["pods"]}
    assert all(p["connected"] and p["error"] is None for p in pods.values())
    assert pods["pod-a"]["ended"] is None and pods["pod-a"]["connection"] == "attached"
    for label in ("pod-b", "pod-c", "pod-d"):
        p = pods[label]
        assert p["connection"] == "ended", p
        assert p["ended"]["exit_code"] == 1 and p["ended"]["component"] == "trainer"
        assert p["ended"]["diagnosis"]["location"] == "train.py:12"
        assert p["components"]["trainer"]["state"] == "fatal"
        assert p["components"]["inference"]["state"] == "stopped"
    assert pods["pod-b"]["ended"]["note"].startswith("ended at <when>: trainer fatal")  # the bridge's own note
    assert pods["pod-d"]["ended"]["note"].startswith("ended at ")  # from the run_ended it saw
    assert pods["pod-d"]["ended"]["note"].endswith(": trainer fatal: exit 1; gave up after 2 restarts (exit code 1)")
    # The journal was asked once per pod; the read-only sessions were let go after it, the live one kept.
    assert [len(sessions[k][0].client.asked) for k in journals] == [1, 1, 1, 1]
    assert let_go == {"pod-a": False, "pod-b": True, "pod-c": True, "pod-d": False}  # pod-d's supervisor left
    assert all(len(s) == 1 for s in sessions.values())  # no second look within ENDED_RECHECK_S

    text = format_text(snap)
    assert "FLEET FLAG fleet_repeated_error: AttributeError at train.py:12 on 4/4 pods" in text
    assert f"{'pod-b':<16} b: ended at <when>: trainer fatal" in text
    assert "trainer=fatal | trainer: AttributeError" in text


def test_a_pod_whose_run_ended_is_looked_at_again_and_a_resumed_run_shows_live():
    archive = crashed("r", T0, 2, ended=True)
    resumed = crashed("r", T0, 2, ended=True)
    resumed.add(T0 + 200, "run_started", None, name="r", components=["inference", "trainer"], how="resumed")
    resumed.start(T0 + 201, "trainer", 3)
    sessions: list[ScriptedSession] = []

    def factory(connect: Any, listener: PodState) -> ScriptedSession:
        s = ScriptedSession(listener, "archive" if not sessions else "live", archive if not sessions else resumed)
        sessions.append(s)
        return s

    live_let_go, j, failures = run_fleet(
        [PodSpec(host="h", label="p")], factory, ended_recheck_s=0.01,
        until=lambda f: len(sessions) >= 2 and f.pods[0].state is not None
        and f.pods[0].state["components"]["trainer"]["attempt"] == 3,
        look=lambda f: (sessions[1].closed_by_fleet, f.pods[0].to_json(T0 + 300),
                        [(x.attempt, x.ts) for x in f.pods[0].failures]))
    assert sessions[0].closed_by_fleet  # the read-only answer was let go once its journal was read
    assert not live_let_go  # a live supervisor's session is kept
    assert j["connected"] is True and j["connection"] == "attached" and j["ended"] is None
    assert j["components"]["trainer"]["state"] == "starting" and j["run"]["ended_at"] is None
    assert failures == [(1, T0), (2, T0 + 10)]  # the past failures stay


def test_a_run_ending_while_watched_is_not_an_error():
    j = crashed("r", T0, 1, ended=True)
    pod = PodState(PodSpec(host="h", label="p"))
    pod.on_connection("connecting", "")
    pod.on_snapshot({"state": Journal("r").state()}, False)
    pod.on_connection("attached", "h")
    for e in j.events[1:]:
        pod.on_event(e)
    pod.on_connection("ended", "connection closed by the supervisor")
    j2 = pod.to_json(T0 + 60)
    assert j2["connected"] is True and j2["error"] is None and j2["connection"] == "ended"
    assert j2["ended"]["reason"] == "trainer fatal: exit 1; gave up after 2 restarts"
    assert j2["ended"]["diagnosis"]["exception"].startswith("AttributeError")
    assert pod.settled
    # Unreachable later: the error shows, the final state stays.
    pod.on_connection("reconnecting", "cannot connect to h:22: [Errno 111] Connection refused; retrying in 1.0s")
    j3 = pod.to_json(T0 + 90)
    assert j3["connected"] is False and j3["error"].startswith("cannot connect") and j3["ended"] is not None


# ------------------------------------------------------------------------------- end to end over SSH

ENDS_FATAL = """
name: {name}
components:
  inference:
    command: ["{py}", "-c", "import time; time.sleep(1000)"]
  trainer:
    command: ["{py}", "-u", "%s"]
    restart: {policy: on-failure, backoff: {initial: 0.1, max: 0.2}, max_restarts: 1, window: 600}
    exit_on_end: true
""" % (FIXTURES / "crash_train.py")


@pytest.mark.slow
def test_fleet_of_two_ended_runs_shows_their_end_and_one_flag(sshd, tmp_path):
    """Two pods whose runs already ended the same way (the trainer's AttributeError at
    crash_train.py:13, twice each, then fatal): the fleet opened afterwards shows both as answered,
    with their final state and how they ended, and one fleet flag naming both."""
    sshd.trust()
    run_dirs = {}
    for name in ("qwen-a", "qwen-b"):
        config = write_config(tmp_path, ENDS_FATAL.replace("{name}", name), name=f"{name}.yaml")
        run = Headless(config, tmp_path / name)
        rc = run.wait(120)
        assert rc == 1, run.output  # fatal: the run failed
        assert "run ended: trainer fatal" in run.output
        run_dirs[name] = run.run_dir
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("pods:\n" + "".join(f"  - {{host: testpod, run_dir: {d}, label: {n}}}\n"
                                         for n, d in run_dirs.items()))
    args = [PY, "-m", "rlsup.supervisor.cli", "fleet", str(fleet), "--timeout", "30", "--remote-cmd", REMOTE]
    env = cli_env({"HOME": str(sshd.home)})
    r = subprocess.run([*args, "--json"], capture_output=True, text=True, timeout=90, env=env)
    assert r.returncode == 0, r.stderr  # both answered: an ended run is an answer
    snap = json.loads(r.stdout)
    pods = {p["label"]: p for p in snap["pods"]}
    assert list(pods) == ["qwen-a", "qwen-b"]
    for name, p in pods.items():
        assert p["connected"] is True and p["error"] is None and p["connection"] == "ended", p
        assert p["run"]["name"] == name and p["run"]["exit_code"] == 1 and p["run"]["ended_at"]
        assert p["components"]["trainer"]["state"] == "fatal"
        assert p["components"]["inference"]["state"] == "stopped"
        ended = p["ended"]
        assert ended["note"].startswith("ended at ") and "trainer fatal" in ended["note"]
        assert ended["exit_code"] == 1 and ended["component"] == "trainer"
        assert ended["diagnosis"]["location"].endswith("crash_train.py:13")
        assert ended["diagnosis"]["exception"].startswith("AttributeError")

    [flag] = snap["flags"]
    assert flag["type"] == FLAG_TYPE
    assert sorted(flag["pods"]) == ["qwen-a", "qwen-b"]
    assert flag["message"].startswith("AttributeError at crash_train.py:13 on 2/2 pods, first at ")
    # Both attempts of each pod, read from its journal and its last exit, each counted once.
    assert {e["pod"]: e["count"] for e in flag["evidence"]} == {"qwen-a": 2, "qwen-b": 2}
    assert all(any("generate_batch" in line for line in e["evidence"]) for e in flag["evidence"])

    r = subprocess.run(args, capture_output=True, text=True, timeout=90, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert "FLEET FLAG fleet_repeated_error: AttributeError at crash_train.py:13 on 2/2 pods" in r.stdout
    for name in ("qwen-a", "qwen-b"):
        assert f"{name:<16} {name}: ended at " in r.stdout
    assert "no supervisor is running" not in r.stdout + r.stderr
