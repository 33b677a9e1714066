"""The launcher seam: an attempt as an ``srun`` step of the run's allocation, stopped through ``scancel``.

The monitor (shim) runs ``srun`` on the batch node as the attempt's command, so the step's output
comes down srun's pipe into the same log, and the monitor records srun's exit as it would any
command's: logs, adoption after a supervisor crash, progress, stall detection and diagnosis are the
one-machine ones. What differs is only how an attempt is launched and signalled:

- the argv: ``srun --jobid=J --job-name=rlsup:<component>:<attempt> --nodes=N --nodelist=... --ntasks-per-node=1
  --exact --gres=gpu:G -l --kill-on-bad-exit=1 -- <command>``; the step name makes the step findable
  (``squeue --steps``) by any supervisor, the one that started it or one that adopted it;
- a stop signal goes to the step's tasks with ``scancel --signal=SIG J.S`` and never to the ``srun``
  client: srun takes SIGTERM as "cancel the step" and the tasks get SIGKILL with no grace period
  (Slurm's srun man page, SIGNALS AND ESCAPE SEQUENCES); SIGKILL is ``scancel J.S``, then the client.

Nothing here chooses nodes: the config names how many of the allocation's nodes a component takes
(:mod:`.placement`) and Slurm binds everything inside a node.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal as signal_mod
import time
from collections.abc import Mapping
from typing import Any

from ..config.placement import expand_hostlist
from ..diagnosis import slurm as diagnosis_slurm
from ..records.events import FlagRaised
from .jobs import SlurmError, job, job_steps, requeue, run, tool

SLURM_TIMEOUT_S = 10.0  # for each squeue/scancel the launcher runs
STEP_WAIT_S = 5.0


def step_name(component: str, attempt: int) -> str:
    return f"rlsup:{component}:{attempt}"


class SlurmLauncher:
    """Launches and signals the attempts of one run as steps of job ``job_id``."""

    def __init__(self, job_id: str, placement: Mapping[str, list[str]], gpus: Mapping[str, int | None], *,
                 requeue: bool = False):
        self.job_id = job_id
        self.placement = dict(placement)
        self.gpus = dict(gpus)
        self.requeue = requeue
        self.steps: dict[tuple[str, int], str] = {}  # (component, attempt) -> "J.S"
        self.requeued = False

    @classmethod
    def for_run(cls, cfg: Any, environ: Mapping[str, str] | None = None) -> SlurmLauncher | None:
        """The run's launcher: a ``slurm:`` block and an allocation to start steps in; else None
        (a plain process per attempt, as on one machine)."""
        found = running_job(cfg, environ)
        if found is None:
            return None
        return cls(found[0], cfg.placement,
                   {n: c.gpu_count for n, c in cfg.components.items()}, requeue=cfg.slurm.requeue)

    # ------------------------------------------------------------------ launching

    def nodes(self, component: str) -> list[str]:
        return self.placement.get(component) or []

    def argv(self, component: str, attempt: int, command: list[str]) -> list[str]:
        nodes = self.nodes(component)
        g = self.gpus.get(component)
        out = [tool("srun"), f"--jobid={self.job_id}", f"--job-name={step_name(component, attempt)}",
               f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1", "--exact",
               # A step takes every GPU of the job unless it names its own: `none` for a CPU component.
               f"--gres=gpu:{g}" if g else "--gres=none",
               "-l", "--kill-on-bad-exit=1"]
        if nodes:
            out.append(f"--nodelist={','.join(nodes)}")
        return out + ["--", *command]

    # ------------------------------------------------------------------ finding and signalling steps

    def step_of(self, component: str, attempt: int) -> str | None:
        """``J.S`` of the attempt's step while it runs (None before it is created or once it ended)."""
        key = (component, attempt)
        if key in self.steps:
            return self.steps[key]
        want = step_name(component, attempt)
        sid = next((sid for sid, name in job_steps(self.job_id, SLURM_TIMEOUT_S) or () if name == want), None)
        if sid is not None:
            self.steps[key] = sid
        return sid

    def wait_step(self, component: str, attempt: int, read_record: Any) -> str | None:
        """The attempt's step id once Slurm created it; None after :data:`STEP_WAIT_S` (its step still pending
        on resources) or once the attempt ended (``read_record()`` says exited)."""
        deadline = time.monotonic() + STEP_WAIT_S
        while True:
            sid = self.step_of(component, attempt)
            if sid is not None or time.monotonic() >= deadline:
                return sid
            if (read_record() or {}).get("status") == "exited":
                return None
            time.sleep(0.1)

    def signal(self, att: Any, signum: int) -> bool:
        """Signal the attempt's step; True when Slurm took it (the caller must not signal the srun client)."""
        sid = self.step_of(att.component, att.attempt)
        if sid is None:
            return False  # no step (yet, or any more): what is left is the local srun client
        if signum == signal_mod.SIGKILL:
            run(["scancel", "--quiet", sid], SLURM_TIMEOUT_S)
            return False  # and the client too: its step is gone
        name = signal_mod.Signals(signum).name.removeprefix("SIG")
        # Whatever scancel answers, the srun client must not get the signal: it would cancel the step
        # without a grace period. (Slurm 22.05's scancel may exit non-zero, "Invalid job id specified",
        # after the tasks got the signal.) If the step ignores it, the stop timeout's SIGKILL follows.
        run(["scancel", "--quiet", f"--signal={name}", sid], SLURM_TIMEOUT_S)
        sent = att.signalled.setdefault(signum, set())
        with contextlib.suppress(Exception):
            sent.update(att.members())
        return True

    # ------------------------------------------------------------------ a step's end

    # Slurm's view of a step's end from its output (node failure, launch failure, time limit, oom_kill, with
    # rank and node): what :meth:`ended` takes.
    refine = staticmethod(diagnosis_slurm.refine)

    @staticmethod
    def needs_job_nodes(diag: dict[str, Any]) -> bool:
        """Whether judging this (refined) end needs the job's node list (:meth:`job_nodes`, a squeue call:
        the caller makes it off the event loop): a step that could not be launched."""
        return diag.get("category") == "step_launch_failure"

    def job_nodes(self) -> str | None:
        """The job's node list as squeue has it now (a hostlist); None when unknown. Blocking."""
        try:
            now = job(self.job_id)
        except SlurmError:
            return None
        return str(now["nodes"]) if now and now.get("nodes") else None

    def ended(self, comp: Any, att: Any, ex: dict[str, Any], diag: dict[str, Any],
              job_nodes: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """A step's end, with the diagnosis :meth:`refine` gave: a launch failure on a node the job lost
        (``job_nodes``: the job's node list, looked up where :meth:`needs_job_nodes` says so) is a node
        failure, and a node failure with ``requeue: true`` requeues the job, so that the next supervisor
        continues the run on healthy nodes."""
        self.steps.pop((att.component, att.attempt), None)
        cat = diag.get("category")
        if cat == "step_launch_failure" and job_nodes is not None:
            diag = self._lost_nodes(comp.name, diag, job_nodes)
            cat = diag.get("category")
        if cat in ("node_failure", "step_launch_failure") and ex.get("exit_code") == 0:
            # srun exits 0 when Slurm reports the node lost (measured: Slurm 22.05): never a success.
            ex = {**ex, "exit_code": None}
        if cat == "node_failure" and self.requeue and not self.requeued:
            self.requeued = True
            comp.ctx.emit(FlagRaised(
                comp.name, type="node_failure", message=str(diag.get("summary")),
                evidence=list(diag.get("evidence") or [])[:5],
                action=f"requeueing job {self.job_id} (slurm.requeue: true): Slurm starts it again when nodes "
                       "allow, and the next supervisor continues this run from the newest checkpoints"))
            loop = asyncio.get_running_loop()
            step = step_name(att.component, att.attempt)
            # A moment for the journal to take the events above: the requeue ends this batch step.
            loop.call_later(1.0, lambda: loop.run_in_executor(None, self._requeue, comp, step, loop))
        return ex, diag

    def _requeue(self, comp: Any, step: str, loop: Any) -> None:
        """``scontrol requeue`` once the failed step has ended in Slurm too (:func:`.jobs.requeue`); where it
        could not be requeued, or the step was still ending when the wait ran out, the journal says so."""
        ok, said = requeue(self.job_id, only={step})
        if ok and not said:
            return
        message = (f"job {self.job_id} requeued ({said})" if ok else
                   f"job {self.job_id} could not be requeued ({said or 'scontrol requeue failed'})")
        loop.call_soon_threadsafe(comp.ctx.emit, FlagRaised(
            comp.name, type="requeue", message=message, evidence=[said],
            action="the next supervisor continues this run" if ok else
                   "`rlsup up` continues this run from its newest checkpoints"))

    def _lost_nodes(self, component: str, diag: dict[str, Any], job_nodes: str) -> dict[str, Any]:
        """A step that could not be created because the job no longer has one of its nodes: a node
        failure. With ``--no-kill`` Slurm drops a failed node from the job and keeps the job running;
        a step on that node is then refused (measured on 22.05.8: ``Unable to create step for job 4:
        Requested node configuration is not available``, the words of a step that asks for more than
        its nodes have, too: only the job's node list tells the two apart)."""
        mine = self.nodes(component)
        lost = [n for n in mine if n not in expand_hostlist(job_nodes)]
        if not lost:
            return diag
        on = ",".join(lost)
        return {**diag, "category": "node_failure", "node": on,
                "summary": f"node failure on {on}: the job lost the node (Slurm removed it from job "
                           f"{self.job_id}: now {job_nodes}), so the step could not start there",
                "evidence": [f"job {self.job_id} runs on {job_nodes}; {component}'s nodes are {','.join(mine)}",
                             *list(diag.get("evidence") or [])[:5]]}


def running_job(cfg: Any, environ: Mapping[str, str] | None = None) -> tuple[str, list[str]] | None:
    """The id and the nodes of the Slurm job a run with a ``slurm:`` block runs in; None outside a job (or
    without the block)."""
    env = os.environ if environ is None else environ
    if getattr(cfg, "slurm", None) is None or not env.get("SLURM_JOB_ID"):
        return None
    return env["SLURM_JOB_ID"], expand_hostlist(env.get("SLURM_JOB_NODELIST", ""))


def slurm_job_info(cfg: Any) -> dict[str, Any] | None:
    """What the journal records of the job this supervisor runs in (``run_started.slurm``)."""
    found = running_job(cfg)
    if found is None:
        return None
    return {"job_id": found[0], "nodes": found[1], "restart_count": int(os.environ.get("SLURM_RESTART_COUNT") or 0),
            "placement": dict(cfg.placement)}
