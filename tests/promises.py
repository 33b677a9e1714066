"""What rlsup promises about a run (docs/lifecycle.md), as checks a machine runs on any journal.

Shared by the deterministic simulator (tests/sim) and the real-process fault explorer
(tests/explorer): ``check_journal(events)`` takes the journal as dicts (events.jsonl's lines) and
returns the promises it breaks, each naming the seqs involved. Promises about what only a simulator
or a real run can know (what a process really did, what a client showed) are checked there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlsup.supervisor.records.events import RUN_OUTCOMES, run_outcome

STOP_WORDS = ("stop_all",)


@dataclass(frozen=True)
class Violation:
    promise: str
    what: str
    seqs: tuple[int, ...] = ()

    def __str__(self) -> str:
        at = f" (seq {', '.join(map(str, self.seqs))})" if self.seqs else ""
        return f"{self.promise}: {self.what}{at}"


def check_journal(events: Sequence[Mapping[str, Any]]) -> list[Violation]:
    """Every journal-level promise, over the whole journal (all its runs)."""
    out: list[Violation] = []
    out += seqs_gapless(events)
    every = runs(events)
    for i, run in enumerate(every):
        out += completed_only_by_itself(run)
        out += attempts_in_order(run)
        out += ended_run_is_what_it_says(run)
        out += nothing_after_the_end(run)
        if i + 1 < len(every):
            out += a_preempted_run_goes_on_where_it_stood(run, every[i + 1])
    return out


def runs(events: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The journal cut at each ``run_started``."""
    out: list[list[Mapping[str, Any]]] = []
    for e in events:
        if e.get("kind") == "run_started" or not out:
            out.append([])
        out[-1].append(e)
    return out


def seqs_gapless(events: Iterable[Mapping[str, Any]]) -> list[Violation]:
    """Journal seqs start at 1 and go up by one."""
    want = 1
    for e in events:
        if e.get("seq") != want:
            return [Violation("seqs are gapless and ordered", f"seq {e.get('seq')} where {want} was due",
                              (int(e.get("seq") or 0),))]
        want += 1
    return []


def completed_only_by_itself(run: Sequence[Mapping[str, Any]]) -> list[Violation]:
    """A component is ``completed`` only if its attempt exited 0 by itself: no stop of it, no shutdown of
    the run (a down, a signal, a requeue, a preemption) under way, no false success."""
    out = []
    run_stopping: int | None = None  # seq of the event that began the run's shutdown
    stopping: dict[str, int] = {}  # component -> seq of its `stopping`
    last_exit: dict[str, Mapping[str, Any]] = {}
    false_success: dict[str, int] = {}
    for e in run:
        kind, c, seq = e.get("kind"), e.get("component"), int(e.get("seq") or 0)
        if kind == "command" and e.get("command") in STOP_WORDS and run_stopping is None:
            run_stopping = seq
        elif (kind == "stopping" and c and e.get("by") in ("shutdown", "preemption")) or kind == "checkpoint_requested":
            run_stopping = run_stopping or seq
        if not c:
            continue
        if kind == "started":
            stopping.pop(c, None)
            false_success.pop(c, None)
        elif kind == "stopping":
            stopping[c] = seq
        elif kind == "exited":
            last_exit[c] = e
        elif kind == "flag" and e.get("type") == "false_success":
            false_success[c] = seq
        elif kind == "completed":
            x = last_exit.get(c)
            if x is None or x.get("exit_code") != 0 or x.get("signal"):
                out.append(Violation("completed only by itself", f"{c} completed without an exit 0", (seq,)))
            elif c in stopping:
                out.append(Violation("completed only by itself", f"{c} completed while rlsup was stopping it",
                                     (stopping[c], seq)))
            elif run_stopping is not None and run_stopping < int(x.get("seq") or 0):
                out.append(Violation("completed only by itself",
                                     f"{c} completed on an exit during the run's shutdown", (run_stopping, seq)))
            elif c in false_success:
                out.append(Violation("completed only by itself", f"{c} completed after a false success",
                                     (false_success[c], seq)))
    return out


def attempts_in_order(run: Sequence[Mapping[str, Any]]) -> list[Violation]:
    """Each component's attempts count up by one, each ``exited`` ends a ``started`` one, and every start
    says why (``started.cause``)."""
    out = []
    alive: dict[str, int | None] = {}
    for e in run:
        kind, c, seq = e.get("kind"), e.get("component"), int(e.get("seq") or 0)
        if not c:
            continue
        if kind == "started":
            prev = alive.get(c)
            if prev is not None:
                out.append(Violation("attempts in order", f"{c} started again while attempt {prev} runs", (seq,)))
            alive[c] = e.get("attempt")
            if not (e.get("cause") or {}).get("reason"):
                out.append(Violation("every start says why", f"{c} attempt {e.get('attempt')} has no cause", (seq,)))
        elif kind == "adopted":
            alive[c] = e.get("attempt")
        elif kind == "exited":
            if c not in alive or alive[c] is None:
                out.append(Violation("attempts in order", f"{c} exited with no attempt running", (seq,)))
            alive[c] = None
    return out


def ended_run_is_what_it_says(run: Sequence[Mapping[str, Any]]) -> list[Violation]:
    """A ``run_ended`` is ``completed`` only if no component ended fatal or was stopped by a person (unless its
    exit_on_end component completed); ``failed`` names a component that ended fatal. (That a down or a signal
    came before the end was decided is for the simulator's oracle: the journal does not say when it was.)"""
    end = next((e for e in run if e.get("kind") == "run_ended"), None)
    if end is None:
        return []
    outcome = run_outcome(end)
    final: dict[str, str] = {}
    for e in run:
        c = e.get("component")
        if c and e.get("kind") in ("completed", "fatal", "stopped"):
            final[c] = str(e.get("kind")) if e.get("kind") != "stopped" else f"stopped by {e.get('by')}"
    seq = (int(end.get("seq") or 0),)
    out = []
    if outcome not in RUN_OUTCOMES:
        out.append(Violation("the run's end says how it ended", f"outcome {outcome!r}", seq))
    if outcome == "completed":
        # What a person stopped counts against a completion, unless the component whose end is the run's
        # end (exit_on_end) completed: its work is done whatever was stopped beside it.
        by_exit_on_end = str(end.get("reason") or "").endswith("(exit_on_end)")
        bad = {c: s for c, s in final.items() if s == "fatal" or (s == "stopped by user" and not by_exit_on_end)}
        if bad:
            out.append(Violation("an ended run is completed only if its components completed",
                                 f"completed, yet {bad}", seq))
    if outcome == "failed" and not any(s == "fatal" for s in final.values()):
        out.append(Violation("a failed run names a failure", "failed with no component fatal", seq))
    return out


def a_preempted_run_goes_on_where_it_stood(run: Sequence[Mapping[str, Any]],
                                           after: Sequence[Mapping[str, Any]]) -> list[Violation]:
    """A preempted run's ``run_ended`` says where each resumable component stands (``checkpoints``), and the run
    that continues it starts each of them from there (or from a newer checkpoint), never from scratch or from
    an older one: the platform taking the machine loses no work that was checkpointed."""
    end = next((e for e in run if e.get("kind") == "run_ended"), None)
    if end is None or run_outcome(end) != "preempted":
        return []
    seq = int(end.get("seq") or 0)
    stands = end.get("checkpoints")
    if not isinstance(stands, dict):
        return [Violation("a preempted run says where it stands", "run_ended has no checkpoints", (seq,))]
    out = []
    for c, ck in stands.items():
        first = next((e for e in after if e.get("kind") == "started" and e.get("component") == c), None)
        if first is None or not isinstance(ck, dict):
            continue
        got = (first.get("resume") or {}).get("step")
        if got is None or got < int(ck.get("step") or 0):
            out.append(Violation("a preempted run goes on where it stood",
                                 f"{c} stood at checkpoint step {ck.get('step')}, started again from "
                                 f"{'scratch' if got is None else f'step {got}'}", (seq, int(first.get("seq") or 0))))
    return out


def nothing_after_the_end(run: Sequence[Mapping[str, Any]]) -> list[Violation]:
    """After ``run_ended`` nothing happens to a component until the next ``run_started``."""
    out = []
    ended = False
    for e in run:
        if ended and e.get("component"):
            out.append(Violation("nothing after the end", f"{e.get('kind')} of {e.get('component')} after run_ended",
                                 (int(e.get("seq") or 0),)))
        ended = ended or e.get("kind") == "run_ended"
    return out
