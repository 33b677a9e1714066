"""The preemption's wait: the platform takes the machine, and what is worth keeping is checkpointed first.

A preemption is a SIGTERM to the supervisor from outside ``rlsup down`` (a spot VM's shutdown, a pod's
eviction, ``docker stop``), or Slurm's notice (SIGUSR1: the job is being preempted, or its time limit is near).
The lifecycle asked each component with ``preempt:`` to checkpoint (``checkpoint_requested``: its
``preempt.signal``); before the ordered stop the run waits, for each, until a complete checkpoint newer than
the one it had when asked is there, its attempt has ended, or ``preempt.wait`` has passed
(:func:`~rlsup.supervisor.rules.detectors.checkpoint_waited`, pure). Then the run stops in order as any
shutdown does, and ``run_ended`` says where each resumable component stands (:func:`standing`): the next
``rlsup up`` continues from there without asking. In a job that ``rlsup up`` submitted, the job is then
requeued (:func:`requeue`), so a run longer than the partition's time limit goes on across jobs.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..config.model import Component as ComponentCfg
from ..config.model import Config
from ..records import events as ev
from ..records.clock import Clock
from ..rules.detectors import Mark, checkpoint_waited
from ..rundir.checkpoints import Checkpoint, discover

if TYPE_CHECKING:
    from .component import Component


def newest(cfg: ComponentCfg, *, writer_alive: bool = True) -> Checkpoint | None:
    """The component's newest complete checkpoint (None without ``resume:``, or none complete)."""
    r = cfg.resume
    if r is None:
        return None
    try:
        return discover(r.checkpoints, r.layout, r.step_pattern, writer_alive=writer_alive).latest
    except (OSError, ValueError):
        return None


def mark(ck: Checkpoint | None) -> Mark | None:
    return None if ck is None else (ck.step, ck.mtime)


def baselines(components: Mapping[str, Component]) -> dict[str, Mark | None]:
    """What each component that a preemption will ask to checkpoint has now (read before it is asked)."""
    return {n: mark(newest(c.cfg)) for n, c in components.items()
            if c.rules.preempt_signal is not None and c.current is not None}


async def wait_for_checkpoints(components: Mapping[str, Component], before: Mapping[str, Mark | None], clock: Clock,
                               emit: Callable[[ev.Event], Any]) -> None:
    """Return once every component asked to checkpoint has written a new one, ended, or had its wait."""
    waiting = {n: c for n, c in components.items() if c.life.checkpoint_asked is not None}
    while waiting:
        now = clock.monotonic()
        for n, c in list(waiting.items()):
            asked = c.life.checkpoint_asked
            assert asked is not None
            latest = mark(await asyncio.to_thread(newest, c.cfg))
            verdict = checkpoint_waited(asked_at=asked, wait=c.rules.preempt_wait, now=now, before=before.get(n),
                                        latest=latest, exited=c.current is None)
            if verdict is None:
                continue
            del waiting[n]
            if verdict != "written":
                emit(_no_checkpoint(c, verdict, before.get(n)))
        if waiting:
            await asyncio.sleep(0.2)  # each checkpoint directory looked at again


def _no_checkpoint(c: Component, verdict: str, before: Mark | None) -> ev.FlagRaised:
    sig, wait = c.rules.preempt_signal, c.rules.preempt_wait
    stands = f"its newest checkpoint is step {before[0]}" if before else "it has no complete checkpoint"
    if verdict == "exited" and c.unhandled_checkpoint_signal:
        message = (f"{c.name} had no handler for {sig} when the preemption sent it, so {sig} ended it at once, without "
                   f"a new checkpoint ({stands}); set `preempt.signal` to the signal it checkpoints on")
    elif verdict == "exited":
        message = (f"{c.name} ended after {sig} without writing a new checkpoint ({stands}); is {sig} the signal it "
                   f"checkpoints on? (`preempt.signal`)")
    else:
        message = f"{c.name} wrote no new checkpoint within {wait:g}s of {sig} ({stands})"
    goes_on = f"the run continues from {f'step {before[0]}' if before else 'the start'}"
    action = goes_on if verdict == "exited" else \
        f"stopping it now; {goes_on} (`preempt.wait` longer than {wait:g}s gives it more time)"
    return ev.FlagRaised(c.name, type="checkpoint_problem", message=message, evidence=[message], action=action)


def standing(cfg: Config) -> dict[str, Any] | None:
    """Where each component with ``resume:`` stands once the run has stopped: its newest complete checkpoint
    (``{"step", "path"}``) or None; None for a run without one."""
    out: dict[str, Any] = {}
    for n, c in cfg.components.items():
        if c.resume is not None:
            ck = newest(c, writer_alive=False)
            out[n] = None if ck is None else {"step": ck.step, "path": ck.path}
    return out or None


def requeue(launcher: Any, environ: Mapping[str, str] | None = None) -> str | None:
    """In a job that ``rlsup up`` submitted (its batch script sets ``RLSUP_SLURM_BATCH``), ask Slurm to requeue
    it: the next supervisor continues the run. Words for the run's end reason; None outside such a job."""
    env = os.environ if environ is None else environ
    from ..slurm.jobs import ENV_BATCH
    from ..slurm.jobs import requeue as scontrol_requeue

    if launcher is None or env.get(ENV_BATCH) != "1":
        return None

    ok, said = scontrol_requeue(launcher.job_id)  # once the components' steps have ended in Slurm too
    if ok:
        return (f"job {launcher.job_id} requeued{f' ({said})' if said else ''}: the next supervisor continues the "
                "run from these checkpoints")
    return (f"job {launcher.job_id} could not be requeued ({said or 'scontrol requeue failed'}): "
            "`rlsup up` continues the run from these checkpoints")
