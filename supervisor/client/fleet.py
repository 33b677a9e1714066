"""The fleet: many runs on many pods watched (and steered) from one place; headless (no textual).

One reconnecting :class:`~rlsup.supervisor.client.session.Session` per pod (:class:`Fleet`), each pod's events
folded as the supervisor folds them (:class:`PodState`), identical failures across pods grouped into fleet flags
(:func:`correlate`). An ended pod answers too (``rlsup bridge`` serves it from disk); a pod's failures are what
it has on record (``last_exit``, replayed events, its journal), one per (component, attempt).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..records import state as run_state
from ..records.events import (
    ComponentExited,
    ComponentSpawnFailed,
    Record,
    RunEnded,
    RunStarted,
    as_record,
    part_dict,
)
from ..records.phrases import end_note
from .session import Connector, Session, SessionListener
from .ssh import SshTarget, attach_command, ssh_connector

FLAG_TYPE = "fleet_repeated_error"
MAX_FAILURES = 200  # failures remembered per pod (only signatures matter; the newest win)
HISTORY_EVENTS = 5000  # the newest journal events read from each pod for its past failures
ENDED_RECHECK_S = 60.0  # how often a pod whose run ended is looked at again (a resumed run shows up)
_RETRY_SUFFIX = re.compile(r"; retrying in [0-9.]+s$")

# ---------------------------------------------------------------------------------------------
# The fleet file.


@dataclass(frozen=True)
class PodSpec:
    """One pod of the fleet file. ``host`` may be an ``~/.ssh/config`` alias."""

    host: str
    user: str | None = None
    port: int | None = None
    run_dir: str | None = None
    label: str = ""
    # A pod with no run to reach, and why (a Slurm job pending, or cancelled before it started): said instead of
    # a connection error, and not a failure of the fleet.
    no_run: str | None = None
    attach: str | None = None  # the command that attaches to it, where that is not `rlsup attach HOST` (Slurm)

    def target_label(self) -> str:
        return SshTarget(self.host, self.user, self.port).label()

    def attach_hint(self, *, identity: str | None = None, remote_cmd: str | None = None) -> str:
        """``rlsup attach`` to this pod, with the options the fleet reached it with (pastes as printed)."""
        if self.attach is not None:
            return self.attach
        return attach_command(self.target_label(), run_dir=self.run_dir, identity=identity, remote_cmd=remote_cmd)


def load_fleet(path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None) -> list[PodSpec]:
    """Read and validate a fleet file; raises :class:`~rlsup.supervisor.config.loader.ConfigError` listing
    every problem as ``FILE:LINE:COL: key.path: message``. ``${VAR}`` expands in string values."""
    from ..config.fleetfile import read_pods  # pydantic: not at CLI start-up

    return [PodSpec(p.host, p.user, p.port, p.run_dir, p.label or p.host) for p in read_pods(path, environ=environ)]


# ---------------------------------------------------------------------------------------------
# One pod: a SessionListener that keeps the pod's state and failures.


@dataclass
class Failure:
    """One failed exit of a pod's component (``attempt`` None where the record does not say)."""

    component: str
    ts: float
    diagnosis: dict[str, Any]
    exit_code: int | None = None
    signal: str | None = None
    attempt: int | None = None


def failure_of(component: str, exit_info: Mapping[str, Any], attempt: int | None = None) -> Failure | None:
    """The failure an exit record stands for, or None for a clean exit or a requested stop."""
    diag = exit_info.get("diagnosis") or {}
    if not isinstance(diag, dict) or diag.get("category") in (None, "none"):
        return None
    attempt = exit_info.get("attempt") if attempt is None else attempt
    return Failure(component, float(exit_info.get("ts") or 0.0), diag, exit_info.get("exit_code"),
                   exit_info.get("signal"), attempt if isinstance(attempt, int) and attempt > 0 else None)


def failure_in(rec: Record) -> Failure | None:
    """The failure an ``exited`` or ``spawn_failed`` record with a diagnosis stands for, or None."""
    e = rec.event
    if not isinstance(e, (ComponentExited, ComponentSpawnFailed)) or not e.component:
        return None
    return failure_of(e.component, {**e.payload(), "ts": rec.ts, "diagnosis": part_dict(rec, "diagnosis")})


def failures_in_events(events: Iterable[Record | Mapping[str, Any]]) -> list[Failure]:
    """The failures among journal events (``exited`` and ``spawn_failed`` with a diagnosis)."""
    return [f for e in events if (f := failure_in(as_record(e))) is not None]


def failures_in_state(state: Mapping[str, Any] | None) -> list[Failure]:
    """Each component's ``last_exit`` that is a failure, with the attempt it ended: the current one, or the
    one before where a newer attempt started after the exit."""
    out = []
    for name, c in ((state or {}).get("components") or {}).items():
        if not (le := c.get("last_exit")):
            continue
        attempt = c.get("attempt") if isinstance(c.get("attempt"), int) else None
        started, ts = c.get("started_at"), le.get("ts")
        if attempt and started is not None and ts is not None and started > ts:
            attempt -= 1
        if (f := failure_of(name, le, attempt or None)) is not None:
            out.append(f)
    return out


class PodState:
    """What the fleet knows about one pod (state, failed exits, its end, its connection; no log lines);
    the pod's :class:`Session` calls into it."""

    def __init__(self, spec: PodSpec, on_change: Callable[[], None] | None = None):
        self.spec = spec
        self.on_change = on_change or (lambda: None)
        self.connection = "connecting"
        self.error: str | None = None  # why it is not connected (None while attached)
        self.state: dict[str, Any] | None = None
        self.failures: list[Failure] = []
        self.ended_note: str | None = None  # set while the pod's run is known to have ended
        self.archived = False  # the last answer came from a run dir no supervisor owns (read-only)
        self.history_pending = False  # the pod's journal is being read for its past failures
        self.session: Any = None  # the pod's current Session (set by the Fleet): its hello, its journal
        self.history_task: asyncio.Future[None] | None = None

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def ended(self) -> bool:
        return self.ended_note is not None

    @property
    def connected(self) -> bool:
        """Answered: attached to a live supervisor, or its run's final state is known (and it is reachable)."""
        return self.connection == "attached" or (self.ended and self.error is None)

    @property
    def settled(self) -> bool:
        """Has an answer: a snapshot (and the journal's failures), or at least one failed connection attempt."""
        return (self.connected and self.state is not None and not self.history_pending) or self.error is not None

    # SessionListener --------------------------------------------------------------------------
    def on_connection(self, status: str, detail: str) -> None:
        self.connection = status
        if status in ("attached", "ended"):
            self.error = None  # "ended": the run ended while we watched and its supervisor went away: an answer
        if status == "ended" and self.ended_note is None:
            self.ended_note = end_note((self.state or {}).get("run") or {}) or detail or "the run has ended"
        elif status in ("reconnecting", "closed") and detail:
            self.error = _RETRY_SUFFIX.sub("", detail)
        self.on_change()

    def on_snapshot(self, snapshot: dict[str, Any], resumed: bool) -> None:
        self.state = st = snapshot.get("state") or run_state.initial({}, [])
        self.add_failures(failures_in_state(st))
        hello = getattr(self.session, "server", None) or {}
        run = st.get("run") or {}
        self.archived = bool(hello.get("ended"))
        # a live supervisor: ended only if its run ended and it is still shutting down
        self.ended_note = str(hello.get("ended_note") or end_note(run) or "the run has ended") if self.archived \
            else end_note(run)
        # Session delivers `attached` after the snapshot; a snapshot means the link works.
        self.connection, self.error = "attached", None
        client = getattr(self.session, "client", None)
        # A reconnect replays what it missed; a session without a client has no journal to ask.
        if not resumed and client is not None and hasattr(client, "events"):
            self.history_pending = True
            self.history_task = asyncio.ensure_future(self._load_history(self.session, client))
        self.on_change()

    def on_event(self, event: Record | dict[str, Any]) -> None:
        rec = as_record(event)  # parsed once, at the socket's edge
        if (failure := failure_in(rec)) is not None:
            self.add_failures([failure])
        if self.state is not None:
            run_state.apply(self.state, rec)
            if isinstance(rec.event, RunEnded):
                self.ended_note = end_note(self.state.get("run") or {})
            elif isinstance(rec.event, RunStarted):
                self.ended_note, self.archived = None, False
        self.on_change()

    def on_logs(self, component: str, seq: int, lines: list[str]) -> None:
        pass  # the fleet shows state, not logs; Enter on a pod opens its full TUI

    def on_gap(self, component: str, from_seq: int, to_seq: int) -> None:
        pass

    def add_history(self, events: Iterable[Record | Mapping[str, Any]]) -> None:
        """The failures recorded in the pod's journal (read after a session's first snapshot)."""
        self.add_failures(failures_in_events(events))
        self.history_pending = False
        self.on_change()

    async def _load_history(self, session: Any, client: Any) -> None:
        """Read the pod's journal for its past failures, then let go of an ended run."""
        events: list[dict[str, Any]] = []
        try:
            with contextlib.suppress(Exception):  # a dropped link, an older supervisor: the last exits still count
                events = await client.events(since=0, limit=HISTORY_EVENTS)
        finally:
            self.add_history(events)
            if self.archived:
                session.close()  # an ended run read from disk sends nothing more; Fleet.run looks again later

    def add_failures(self, failures: Iterable[Failure]) -> None:
        """Remember failures, each exit once however many ways it was seen: the same component and attempt, or,
        where an attempt is unknown, the same component and time."""
        known = self.failures
        # Indexed, as a journal read back can hold thousands of exits.
        by_attempt = {(f.component, f.attempt): i for i, f in enumerate(known) if f.attempt is not None}
        by_ts: dict[tuple[str, float], list[int]] = {}
        for n, f in enumerate(known):
            by_ts.setdefault((f.component, round(f.ts, 6)), []).append(n)
        for f in failures:
            at = (f.component, round(f.ts, 6))
            i = by_attempt.get((f.component, f.attempt)) if f.attempt is not None else None
            if i is None:
                i = next((j for j in by_ts.get(at, ()) if None in (known[j].attempt, f.attempt)), None)
            if i is None:
                known.append(f)
                i = len(known) - 1
                by_ts.setdefault(at, []).append(i)
            elif known[i].attempt is not None or f.attempt is None:
                continue
            else:
                known[i] = f  # the record that knows its attempt wins
            if f.attempt is not None:
                by_attempt[(f.component, f.attempt)] = i
        known.sort(key=lambda f: f.ts)
        del self.failures[:-MAX_FAILURES]

    # views ------------------------------------------------------------------------------------
    def ended_json(self) -> dict[str, Any] | None:
        """How the pod's run ended, with the diagnosis of the root component's last exit (else the newest failure)."""
        if self.ended_note is None:
            return None
        run = (self.state or {}).get("run") or {}
        comps = (self.state or {}).get("components") or {}
        root = run.get("root") or {}
        component = root.get("component") if isinstance(root, dict) else None
        d = (comps[component].get("last_exit") or {}).get("diagnosis") or {} if component in comps else {}
        diag = d if d.get("category") not in (None, "none") else None
        if diag is None and self.failures:
            component, diag = self.failures[-1].component, self.failures[-1].diagnosis
        return {"note": self.ended_note, "at": run.get("ended_at"), "exit_code": run.get("exit_code"),
                "reason": run.get("end_reason"), "component": component, "diagnosis": diag}

    def to_json(self, now: float) -> dict[str, Any]:
        """This pod's entry of ``rlsup fleet --json`` (docs/contract.md)."""
        v = run_state.view(self.state, now) if self.state is not None else None
        s = self.spec
        return {
            "label": s.label, "host": s.host, "user": s.user, "port": s.port, "run_dir": s.run_dir,
            "connected": self.connected,
            "connection": "no_run" if s.no_run and not self.connected else (
                "ended" if self.ended and self.error is None else self.connection),
            "error": s.no_run if s.no_run and not self.connected else self.error, "ended": self.ended_json(),
            "run": v["run"] if v else None, "components": v["components"] if v else {},
            "gpus": v.get("gpus", []) if v else [],
        }


# ---------------------------------------------------------------------------------------------
# Cross-pod correlation (pure).


def signature(diag: Mapping[str, Any]) -> tuple[str, str | None, str | None]:
    """(category, exception type, file name:line): what makes two failures on two pods "the same" (the file's
    name only: the same code checked out under different directories is the same bug)."""
    from ..records.diagnosis import Diagnosis

    category, exc, loc = Diagnosis.from_dict(dict(diag)).signature()
    return category, exc, (loc.replace("\\", "/").rsplit("/", 1)[-1] if loc else None)


def _hhmm(ts: float) -> str:
    return time.strftime("%H:%M", time.localtime(ts))


def correlate(pod_failures: Mapping[str, Iterable[Failure]], n_pods: int, *,
              timefmt: Callable[[float], str] = _hhmm) -> list[dict[str, Any]]:
    """Group identical failures (:func:`signature`) seen on two or more pods into ``fleet_repeated_error``
    flags, most widespread first; pods in the order they first failed, each with its latest such failure as
    evidence. A bare ``unknown`` (no exception, no location) shares nothing worth grouping."""
    groups: dict[tuple[str, str | None, str | None], dict[str, list[Failure]]] = {}
    for label, failures in pod_failures.items():
        for f in failures:
            sig = signature(f.diagnosis)
            if sig[0] == "none" or sig == ("unknown", None, None):
                continue
            groups.setdefault(sig, {}).setdefault(label, []).append(f)
    flags: list[dict[str, Any]] = []
    for sig, by_pod in groups.items():
        if len(by_pod) < 2:
            continue
        firsts = sorted(((min(f.ts for f in fs), label) for label, fs in by_pod.items()))
        first_ts = firsts[0][0]
        pods = [label for _, label in firsts]
        latest = {label: max(by_pod[label], key=lambda f: f.ts) for label in pods}
        evidence = [{
            "pod": label, "component": f.component, "ts": f.ts, "count": len(by_pod[label]),
            "exit_code": f.exit_code, "signal": f.signal, "summary": f.diagnosis.get("summary"),
            "step": f.diagnosis.get("step"), "location": f.diagnosis.get("location"),
            "evidence": list(f.diagnosis.get("evidence") or []),
        } for label, f in latest.items()]
        base = latest[pods[0]].diagnosis
        diagnosis = {"category": sig[0], "exception": base.get("exception"), "location": sig[2],
                     "summary": base.get("summary")}
        what = sig[1] or sig[0]
        flags.append({
            "type": FLAG_TYPE,
            "message": f"{what}{f' at {sig[2]}' if sig[2] else ''} on {len(pods)}/{n_pods} pods, first at "
                       f"{timefmt(first_ts)}",
            "pods": pods, "diagnosis": diagnosis, "first_ts": first_ts, "evidence": evidence,
        })
    flags.sort(key=lambda f: (-len(f["pods"]), f["first_ts"]))
    return flags


# ---------------------------------------------------------------------------------------------
# The fleet: one Session per pod, run in parallel.


async def answer(request: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """A request's reply; one that raised (a broken link, a session bug) as a refusal that says why."""
    try:
        return await request
    except Exception as e:
        return {"ok": False, "error": str(e) or type(e).__name__}


class _DaemonThreadExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs each blocking call (an SSH dial) on its own daemon thread: a pod that black-holes SSH must not
    delay the other pods' dials (a bounded pool) nor the exit of ``--json`` (a joined one)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def work() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(fn(*args, **kwargs))
            except BaseException as e:  # handed to the awaiting coroutine
                fut.set_exception(e)

        threading.Thread(target=work, daemon=True, name="rlsup-fleet-io").start()
        return fut

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


SessionFactory = Callable[[Connector, SessionListener], Any]


# lines=0, logs=False: the fleet's rows need no log lines; backoff grows to 30 s for pods that stay unreachable.
_default_session: SessionFactory = partial(Session, lines=0, backoff=(1.0, 30.0), logs=False)


class Fleet:
    """Every pod's :class:`PodState`, fed by one session per pod, all on one event loop; ``on_change`` is
    called (on the loop) whenever any pod's state changes. After a session's first snapshot the pod's journal
    is read once for its past failures; a pod whose run has ended is then let go and looked at again every
    ``ended_recheck_s`` (a run resumed there shows up as live)."""

    def __init__(self, specs: Sequence[PodSpec], connector_for: Callable[[PodSpec], Connector], *,
                 session_factory: SessionFactory = _default_session, clock: Callable[[], float] = time.time,
                 timefmt: Callable[[float], str] = _hhmm, on_change: Callable[[], None] | None = None,
                 ended_recheck_s: float = ENDED_RECHECK_S):
        self.clock = clock
        self.timefmt = timefmt
        self.on_change = on_change or (lambda: None)
        self.session_factory = session_factory
        self.ended_recheck_s = ended_recheck_s
        self.pods = [PodState(s, lambda: self.on_change()) for s in specs]  # (FleetApp sets on_change later)
        self.connectors = {s.label: connector_for(s) for s in specs}
        for p in self.pods:
            p.session = session_factory(self.connectors[p.label], p)
        self._closed = False
        self._wake: asyncio.Event | None = None

    def pod(self, label: str) -> PodState:
        return next(p for p in self.pods if p.label == label)

    async def run(self) -> None:
        """Run every pod's session until :meth:`close`; one pod failing never stops the others."""
        asyncio.get_running_loop().set_default_executor(_DaemonThreadExecutor())
        self._wake = asyncio.Event()
        if self._closed:
            self._wake.set()

        async def one(pod: PodState) -> None:
            while True:
                try:
                    await pod.session.run()
                except Exception as e:  # a session bug on one pod must not take the fleet down
                    pod.on_connection("closed", f"session failed: {e}")
                    return
                if self._closed or not pod.ended:
                    return
                # The run ended: look again now and then, a run resumed there shows up as live.
                assert self._wake is not None
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.ended_recheck_s)
                if self._closed:
                    return
                pod.session = self.session_factory(self.connectors[pod.label], pod)

        await asyncio.gather(*map(one, self.pods))

    def close(self) -> None:
        self._closed = True
        if self._wake is not None:
            self._wake.set()
        for p in self.pods:
            if p.history_task is not None:
                p.history_task.cancel()
            p.session.close()
        for remote in filter(None, (getattr(c, "remote", None) for c in self.connectors.values())):
            with contextlib.suppress(Exception):
                remote.close()

    async def wait_settled(self, timeout: float) -> bool:
        """Until every pod has an answer (attached, or failed once) or ``timeout``; True if all have."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not all(p.settled for p in self.pods):
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return False
            await asyncio.sleep(min(0.05, left))
        return True

    async def command(self, labels: Sequence[str], command: str, component: str | None = None,
                      **args: Any) -> dict[str, dict[str, Any]]:
        """Send one command to several pods at once; each pod's reply (``ok`` + message/error)."""
        replies = await asyncio.gather(*(answer(self.pod(label).session.command(command, component, **args))
                                         for label in labels))
        return dict(zip(labels, replies, strict=True))

    def flags(self) -> list[dict[str, Any]]:
        return correlate({p.label: p.failures for p in self.pods}, len(self.pods), timefmt=self.timefmt)

    def snapshot(self) -> dict[str, Any]:
        """What ``rlsup fleet --json`` prints: ``{"pods": [...], "flags": [...]}``."""
        now = self.clock()
        return {"pods": [p.to_json(now) for p in self.pods], "flags": self.flags()}


# ---------------------------------------------------------------------------------------------
# Row summaries shared by the TUI and the text output (pure).


def gpu_summary(gpus: Sequence[Mapping[str, Any]] | None) -> str:
    """``"4 GPU 87%"`` (mean utilisation), ``"-"`` without GPUs."""
    if not gpus:
        return "-"
    utils = [u for g in gpus if isinstance(u := g.get("util_pct"), int | float)]
    return f"{len(gpus)} GPU" + (f" {sum(utils) / len(utils):.0f}%" if utils else "")


def main_component(components: Mapping[str, Mapping[str, Any]]) -> tuple[str, Mapping[str, Any]] | None:
    """The component whose progress stands for the pod: the one with a total, else a step, else the last."""
    items = list(components.items())
    return next((i for want in ("total", "step") for i in reversed(items) if i[1].get(want) is not None),
                items[-1] if items else None)


def latest_problem(pod: Mapping[str, Any]) -> str:
    """The newest flag and the newest failure diagnosis of a pod: ``"trainer step_crash · trainer: CUDA ..."``."""
    comps = (pod.get("components") or {}).items()
    flags = [(float(f.get("ts") or 0), f"{name} {f.get('type')}") for name, c in comps for f in c.get("flags") or []]
    exits = [(name, le, le.get("diagnosis") or {}) for name, c in comps if (le := c.get("last_exit") or {})]
    diags = [(float(le.get("ts") or 0), f"{name}: {d.get('summary') or d.get('category')}")
             for name, le, d in exits if d.get("category") not in (None, "none")]
    # the newest of each; of equals, the last flag and the first diagnosis
    newest = (max(reversed(flags), key=lambda x: x[0], default=None), max(diags, key=lambda x: x[0], default=None))
    return " · ".join(x[1] for x in newest if x is not None)


def ssh_connectors(*, remote_cmd: str | None, accept_new_host_key: bool, identity: str | None = None,
                   accept_hint: str | None = None) -> Callable[[PodSpec], Connector]:
    """Each pod's SSH connector (``rlsup bridge`` on the pod, as attach does)."""
    return lambda spec: ssh_connector(SshTarget(host=spec.host, user=spec.user, port=spec.port, identity=identity),
                                      run_dir=spec.run_dir, remote_cmd=remote_cmd,
                                      accept_new_host_key=accept_new_host_key, accept_hint=accept_hint)


async def fleet_snapshot(specs: Sequence[PodSpec], connector_for: Callable[[PodSpec], Connector], *,
                         timeout: float) -> dict[str, Any]:
    """Connect to every pod in parallel, wait until each answered (or ``timeout``), snapshot, close."""
    fleet = Fleet(specs, connector_for)
    task = asyncio.ensure_future(fleet.run())
    try:
        await fleet.wait_settled(timeout)
        snap = fleet.snapshot()
    finally:
        fleet.close()
        # Sessions end at once, except one still dialling a silent host: do not wait for that.
        await asyncio.wait({task}, timeout=1.0)
        if not task.done():
            task.cancel()
        with contextlib.suppress(BaseException):
            await task
    for p in snap["pods"]:
        if not p["connected"] and not p["error"]:
            p["error"] = f"no answer within {timeout:g}s"
    return snap
