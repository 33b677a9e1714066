"""One attempt of one component, from its ``started`` record to its exit: the one model the
lifecycle's crash patterns (:mod:`.diagnosis.patterns`), the report and the run diagnosis judge.

An attempt is judged on its own evidence: its diagnosis is the one of its own exit, never its
predecessor's. :func:`from_records` rebuilds a run's attempts from its journal; the lifecycle
builds one at each exit from what it saw.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from .events import (
    ComponentCompleted,
    ComponentExited,
    ComponentFatal,
    ComponentReady,
    ComponentStarted,
    ComponentStopped,
    Diagnosis,
    FlagRaised,
    Record,
    RestartScheduled,
)
from .phrases import describe_exit

_OUTCOMES = (ComponentCompleted, ComponentFatal, ComponentStopped, RestartScheduled)  # what rlsup did after the exit


@dataclass(frozen=True)
class Attempt:
    attempt: int
    started_at: float
    ended_at: float | None  # None: still running
    ready: bool
    exit_code: int | None
    signal: str | None
    step: int | None  # at the exit
    resumed_step: int | None
    diagnosis: Diagnosis
    # From the journal (the report): the records of its start and exit, when it became ready, what
    # rlsup did after the exit, the flags raised while it ran.
    component: str = ""
    ready_at: float | None = None
    start: Record | None = None
    exit: Record | None = None
    outcome: Record | None = None
    flags: tuple[Record, ...] = ()

    @property
    def started(self) -> ComponentStarted | None:
        return self.start.event if self.start is not None and isinstance(self.start.event, ComponentStarted) else None

    @property
    def exited(self) -> ComponentExited | None:
        return self.exit.event if self.exit is not None and isinstance(self.exit.event, ComponentExited) else None

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    @property
    def uptime_s(self) -> float:
        return max(0.0, (self.ended_at if self.ended_at is not None else self.started_at) - self.started_at)

    @property
    def failed(self) -> bool:
        """Its exit status says it failed (a signal or a non-zero code)."""
        return self.signal is not None or (self.exit_code is not None and self.exit_code != 0)

    @property
    def false_success(self) -> FlagRaised | None:
        """The ``false_success`` flag of this attempt: an exit 0 before the last step is a failure."""
        return next((f.event for f in self.flags
                     if isinstance(f.event, FlagRaised) and f.event.type == "false_success"), None)

    @property
    def judged_failed(self) -> bool:
        """It ended and counts as a failure: its exit status, or a false success; never an attempt
        stopped on purpose."""
        if not self.ended or (self.outcome is not None and isinstance(self.outcome.event, ComponentStopped)):
            return False
        return self.failed or self.false_success is not None

    def exit_text(self, *, bare_signal: bool = False) -> str:
        """``"killed by SIGKILL"`` (``"SIGKILL"`` with ``bare_signal``), ``"exit 1"``; ``"running"``."""
        if not self.ended:
            return "running"
        return describe_exit(self.exit_code, self.signal, bare_signal=bare_signal)


def _follow(a: Attempt, rec: Record) -> Attempt:
    """``a`` with what ``rec`` (a record of its component after its start) says about it."""
    e = rec.event
    if isinstance(e, ComponentReady):
        return replace(a, ready=True, ready_at=rec.ts)
    if isinstance(e, ComponentExited):
        return replace(a, ended_at=rec.ts, exit_code=e.exit_code, signal=e.signal, step=e.step, exit=rec,
                       diagnosis=e.diagnosis or Diagnosis.from_dict({}))
    if isinstance(e, _OUTCOMES) and a.ended and a.outcome is None:
        return replace(a, outcome=rec)
    if isinstance(e, FlagRaised):
        return replace(a, flags=(*a.flags, rec))
    return a


def from_records(records: Iterable[Record]) -> dict[str, list[Attempt]]:
    """Every component's attempts, in order, from a run's journal."""
    out: dict[str, list[Attempt]] = {}
    for rec in records:
        name = rec.component
        if not name:
            continue
        atts = out.get(name)
        if isinstance(e := rec.event, ComponentStarted):
            out.setdefault(name, []).append(Attempt(
                attempt=e.attempt or len(atts or []) + 1, started_at=rec.ts, ended_at=None, ready=False,
                exit_code=None, signal=None, step=None, resumed_step=e.resume.step if e.resume else None,
                diagnosis=Diagnosis.from_dict({}), component=e.component or "", start=rec))
        elif atts:
            atts[-1] = _follow(atts[-1], rec)
    return out
