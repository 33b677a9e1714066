"""Fault injection for demos and tests: real failures of the real processes.

Spec: comma-separated ``kind@when``.  Step faults (trainer, orchestrator) — ``crash@57`` (Python
exception, traceback, exit 1), ``hang@20`` (alive, no progress), ``oom@30`` (prints an allocation,
then SIGKILLs itself like the kernel OOM killer), ``exit0@40`` (exits 0 early), ``slow@10`` or
``slow@10:5`` (every step from 10 on takes ``5`` s longer, default 3).  Time faults (server) —
``die@30s`` (dies 30 s after start).

One-shot faults fire once per run dir: before firing, a marker ``CHAOS_DIR/<component>-<fault>``
is written, and a marker found at start disarms the fault, so a resumed run gets past it.
``slow`` is a condition, not an event, and applies on every run.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rlsup.trainer import atomic

STEP_KINDS = {"crash", "hang", "oom", "exit0", "slow"}
TIME_KINDS = {"die"}


class ChaosCrash(RuntimeError):
    """The exception ``crash@N`` raises."""


@dataclass(frozen=True)
class Fault:
    kind: str
    at: float  # step number, or seconds for time faults
    arg: float | None = None

    @property
    def name(self) -> str:
        at = f"{self.at:g}s" if self.kind in TIME_KINDS else str(int(self.at))
        return f"{self.kind}@{at}"


def parse(spec: str | None) -> list[Fault]:
    """Parse a chaos spec; raises ``ValueError`` with the bad item for anything unknown."""
    faults: list[Fault] = []
    for item in (spec or "").split(","):
        item = item.strip()
        if not item or item == "none":  # "none" lets a config default be switched off from the env
            continue
        kind, sep, rest = item.partition("@")
        when, _, arg = rest.partition(":")
        try:
            if not sep or kind not in STEP_KINDS | TIME_KINDS:
                raise ValueError
            at = float(when.removesuffix("s")) if kind in TIME_KINDS else int(when)
            faults.append(Fault(kind, at, float(arg) if arg else None))
        except ValueError:
            raise ValueError(
                f"bad chaos item {item!r}: expected crash@N, hang@N, oom@N, exit0@N, slow@N[:SECONDS] or die@Ns"
            ) from None
    return faults


class Chaos:
    """The faults armed for one component of one run dir."""

    def __init__(self, spec: str | None, state_dir: Path, component: str) -> None:
        self.faults = parse(spec)
        self.state_dir = Path(state_dir)
        self.component = component

    def _arm_once(self, fault: Fault) -> bool:
        """True if ``fault`` has not fired in this run dir yet; records it as fired."""
        marker = self.state_dir / f"{self.component}-{fault.name}"
        if marker.exists():
            return False
        atomic.write_text(marker, f"{time.time()}\n")
        return True

    def step(self, step: int) -> None:
        """Call at the start of each step; fires any fault due at ``step``."""
        for fault in self.faults:
            if fault.kind == "slow" and step >= fault.at:
                time.sleep(fault.arg if fault.arg is not None else 3.0)
            elif fault.kind in STEP_KINDS - {"slow"} and step >= fault.at and self._arm_once(fault):
                _fire(fault, step)

    def start_timers(self) -> None:
        """Start the time faults (``die@Ns``) as daemon timers counted from now (one that fired is disarmed)."""
        for fault in self.faults:
            if fault.kind == "die":
                t = threading.Timer(fault.at, self._die, args=(fault,))
                t.daemon = True
                t.start()

    def _die(self, fault: Fault) -> None:
        if self._arm_once(fault):
            print("ERROR Engine core proc EngineCore_0 died unexpectedly, shutting down client. "
                  f"(chaos {fault.name})", file=sys.stderr, flush=True)
            os._exit(1)


def _fire(fault: Fault, step: int) -> None:
    sys.stdout.flush()
    if fault.kind == "crash":
        raise ChaosCrash(f"injected failure at step {step} (chaos {fault.name})")
    if fault.kind == "exit0":
        print(f"Stopping early at step {step} (chaos {fault.name})", flush=True)
        sys.exit(0)
    if fault.kind == "oom":
        print(f"Allocating 61.5 GiB host buffer for step {step} rollout cache (chaos {fault.name})", flush=True)
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    if fault.kind == "hang":
        print(f"Entering barrier for step {step} (chaos {fault.name})", flush=True)
        while True:
            time.sleep(3600)
