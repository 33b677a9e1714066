"""The run's Slurm job: the batch script, ``sbatch``, and the job's state from ``squeue --json``.

A run's job is named ``rlsup:<run name>`` and carries ``rlsup run_dir=<abs run dir>`` in its comment,
so that ``rlsup attach/status/logs/down`` and ``rlsup fleet --slurm`` find it from a login node with
``squeue --json`` alone (no state file of ours to go stale). The batch script runs
``rlsup up CONFIG --headless`` on the job's first node: the supervisor, in the shared run dir, for as
long as the run lasts; its exit is the job's end, so the allocation is released the moment the run
ends (completed, fatal, or stopped).
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

JOB_PREFIX = "rlsup:"
COMMENT_PREFIX = "rlsup run_dir="
SUPERVISOR_RESTARTS = 5
ENV_BATCH = "RLSUP_SLURM_BATCH"  # set in the batch script: this process is the job's supervisor
SBATCH_TIMEOUT_S = 60.0
SQUEUE_TIMEOUT_S = 20.0
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
          "RESIZING", "SUSPENDED", "STAGE_OUT", "SIGNALING", "RESV_DEL_HOLD", "STOPPED"}


class SlurmError(Exception):
    pass


def tool(name: str) -> str:
    return shutil.which(name) or name


def run(argv: list[str], timeout: float = SQUEUE_TIMEOUT_S) -> subprocess.CompletedProcess[str] | None:
    """``argv`` (its program found by :func:`tool`) run to its end, output as text (bytes that are not UTF-8
    replaced: never an error); None where it cannot run or end."""
    try:
        return subprocess.run([tool(argv[0]), *argv[1:]], capture_output=True, text=True, errors="replace",
                              timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None


def batch_script(config: str, run_dir: str, *, python: str | None = None, extra: list[str] | None = None) -> str:
    """The job's batch script: the supervisor, headless, on the first node, in the shared run dir.
    A requeued job (``SLURM_RESTART_COUNT`` > 0) continues the same run: same journal, resume from
    checkpoints."""
    py = shlex.quote(python or sys.executable)
    args = " ".join(shlex.quote(a) for a in (extra or []))
    up = (f"{py} -m rlsup.supervisor.cli up {shlex.quote(os.path.abspath(config))} --run-dir {shlex.quote(run_dir)} "
          f"--headless --skip-checks $resume {args}").rstrip()
    return "\n".join([
        "#!/bin/bash",
        "# written by rlsup up: the supervisor of this run, in the job's batch step",
        f"export {ENV_BATCH}=1",
        'resume=""',
        'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then resume="--resume"; fi',
        "# Slurm's notice (--signal=B:USR1@N: the time limit is near, or a preemption) comes to this shell only:",
        "# it is passed on to the supervisor, which checkpoints, stops in order and requeues the job.",
        'pid=""',
        "trap '[ -n \"$pid\" ] && kill -USR1 \"$pid\" 2>/dev/null' USR1",
        "n=0",
        "while :; do",
        f"    {up} &",
        "    pid=$!",
        "    wait $pid; rc=$?",
        '    while [ $rc -gt 128 ] && kill -0 "$pid" 2>/dev/null; do wait $pid; rc=$?; done  # a notice woke the wait',
        "    # Killed by a signal other than Slurm's SIGTERM (kill -9, a crash): the components run on under",
        "    # their monitors; another supervisor takes them over (adoption), as `rlsup up` would on one machine.",
        f'    if [ $rc -gt 128 ] && [ $rc -ne 143 ] && [ $n -lt {SUPERVISOR_RESTARTS} ]; then',
        '        n=$((n + 1)); resume=""',
        '        echo "rlsup: the supervisor ended with status $rc; starting another that takes the components over" >&2',
        "        continue",
        "    fi",
        "    exit $rc",
        "done",
        "",
    ])


def sbatch_argv(cfg: Any, run_dir: str, cwd: str) -> list[str]:
    s = cfg.slurm
    # Slurm's notice, to the batch shell, which passes it on: before the time limit, and at a preemption
    # where the cluster sends it then (``preempt_send_user_signal``; else every task gets SIGTERM at once,
    # the trainer's included, and no checkpoint is asked for first). rlsup checkpoints and requeues the job
    # itself, so a run longer than the partition's limit, or preempted, goes on in the next job.
    notice = s.time or any(c.preempt is not None for c in cfg.components.values())
    out = [tool("sbatch"), "--parsable", f"--job-name={JOB_PREFIX}{cfg.name}", f"--nodes={s.nodes}",
           "--ntasks-per-node=1", "--exclusive",
           # A lost node must not end the job under the supervisor: rlsup sees it (srun's "Node failure
           # on X") and, with requeue: true, requeues the job itself.
           "--no-kill", f"--comment={COMMENT_PREFIX}{run_dir}", f"--chdir={cwd}",
           f"--output={run_dir}/slurm-%j.out", "--open-mode=append",
           "--requeue" if s.requeue or notice else "--no-requeue"]
    optional = (("gres", s.gpus_per_node and f"gpu:{s.gpus_per_node}"), ("partition", s.partition),
                ("time", s.time), ("signal", notice and f"B:USR1@{s.warn_s()}"))
    return out + [f"--{option}={value}" for option, value in optional if value] + list(s.sbatch_args)


def submit(cfg: Any, config_path: str, *, extra: list[str] | None = None) -> str:
    """Submit the run's job; its id. Raises :class:`SlurmError` with sbatch's own message."""
    run_dir = cfg.run_dir
    Path(run_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        p = subprocess.run(sbatch_argv(cfg, run_dir, os.getcwd()), capture_output=True, text=True,
                           input=batch_script(config_path, run_dir, extra=extra), timeout=SBATCH_TIMEOUT_S)
    except FileNotFoundError:
        raise SlurmError("sbatch not found: run `rlsup up` on a Slurm login node (or remove the `slurm:` "
                         "block to run on this machine)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"sbatch did not answer within {SBATCH_TIMEOUT_S:g}s") from None
    if p.returncode != 0:
        raise SlurmError(f"sbatch failed: {(p.stderr or p.stdout).strip()}")
    return p.stdout.strip().split(";")[0]


def squeue_json(*, job: str | None = None, user: str | None = None) -> list[dict[str, Any]]:
    """The jobs ``squeue --json`` reports (all states it still holds)."""
    p = run(["squeue", "--json", *(["--jobs", job] if job else []), *(["--users", user] if user else [])])
    if p is None:
        raise SlurmError(f"squeue failed: it could not be run, or did not answer within {SQUEUE_TIMEOUT_S:g}s")
    if p.returncode != 0:
        if job and "Invalid job id" in p.stderr:
            return []
        raise SlurmError(f"squeue failed: {p.stderr.strip()}")
    try:
        return list(json.loads(p.stdout).get("jobs") or [])
    except ValueError as e:
        raise SlurmError(f"squeue --json gave no JSON: {e}") from None


def describe(j: Mapping[str, Any]) -> dict[str, Any]:
    """The fields rlsup shows of a job, whatever squeue's JSON version spells them."""
    comment, state = str(j.get("comment") or ""), j.get("job_state")
    if isinstance(state, list):  # newer Slurm: a list of flags
        state = state[0] if state else ""
    return {
        "job_id": str(j.get("job_id")),
        "name": str(j.get("name") or ""),
        "state": str(state or ""),
        "reason": str(j.get("state_reason") or ""),
        "nodes": str(j.get("nodes") or ""),
        "batch_host": str(j.get("batch_host") or ""),
        "run_dir": comment[len(COMMENT_PREFIX):] if comment.startswith(COMMENT_PREFIX) else None,
        "restarts": j.get("restart_cnt"),
        "user": j.get("user_name"),
        "start_time": j.get("start_time"),
    }


def job(job_id: str) -> dict[str, Any] | None:
    return next((describe(j) for j in squeue_json(job=job_id) if str(j.get("job_id")) == str(job_id)), None)


def runs() -> list[dict[str, Any]]:
    """Every rlsup job of this user that the controller still knows."""
    return [describe(j) for j in squeue_json(user=getpass.getuser()) if str(j.get("name") or "").startswith(JOB_PREFIX)]


def job_of_run(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The newest live job of a run dir (this user's), or None."""
    want = os.path.abspath(run_dir)
    found = [j for j in runs() if j["run_dir"] == want and j["state"] in ACTIVE]
    return max(found, key=lambda j: int(j["job_id"])) if found else None


def job_steps(job_id: str, timeout: float = SQUEUE_TIMEOUT_S) -> list[tuple[str, str]] | None:
    """The job's steps as squeue lists them, ``(J.S, name)`` each; None where squeue does not answer (or fails:
    its controller out of reach)."""
    if (p := run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i|%j"], timeout)) is None or p.returncode != 0:
        return None
    return [(sid, name) for sid, _, name in (line.strip().partition("|") for line in p.stdout.splitlines())
            if sid]


def cancel(job_id: str) -> bool:
    return (p := run(["scancel", job_id])) is not None and p.returncode == 0


# Steps that run until the batch step ends, by design: rlsup's GPU samplers and `rlsup attach`'s bridges
# (``--overlap``). The requeue ends them with the batch step, as it always did; nothing to wait for.
SAMPLER_STEP, BRIDGE_STEP = "rlsup:gpus", "rlsup:bridge"
TO_THE_END = (SAMPLER_STEP, BRIDGE_STEP)
STEPS_END_WAIT_S = 10.0
STEPS_POLL_S = 0.25


def in_the_way(listed: Iterable[tuple[str, str]], only: Collection[str] | None = None) -> list[str]:
    """The steps of ``listed`` (:func:`job_steps`'s ``(J.S, name)``) that a requeue must wait for: those that
    ``only`` names (by id or name) where given, else every step but the job's batch and extern steps
    (``J.batch``, ``J.extern``) and the helpers in :data:`TO_THE_END`."""
    if only is not None:
        return [sid for sid, name in listed if sid in only or name in only]
    return [sid for sid, name in listed
            if sid.rpartition(".")[2] not in ("batch", "extern") and name not in TO_THE_END]


def still_ending(left: Collection[str] | None, waited_s: float) -> str:
    """The words for the steps still listed when the wait ran out ("" where none was; None: squeue never
    answered)."""
    if left is None:
        return f"squeue did not list the job's steps within {waited_s:g} s"
    if not left:
        return ""
    many = len(left) > 1
    return f"step{'s' if many else ''} {', '.join(left)} {'were' if many else 'was'} still ending after {waited_s:g} s"


def wait_steps_ended(job_id: str, *, only: Collection[str] | None = None, timeout: float = STEPS_END_WAIT_S,
                     steps: Callable[[str, float], list[tuple[str, str]] | None] = job_steps,
                     clock: Callable[[], float] = time.monotonic,
                     sleep: Callable[[float], None] = time.sleep) -> list[str] | None:
    """Wait (up to ``timeout``) until Slurm lists none of the job's steps :func:`in_the_way` of a requeue: a step
    whose srun has ended may still be ending in its slurmstepd (measured: 2-3 s after rlsup's SIGKILL of a step
    whose srun was gone), and the requeue would cut that end short. Returns the steps still listed when the
    wait ran out ([] once none is; None where squeue never answered). ``steps`` is :func:`job_steps` (asked
    again where squeue does not answer)."""
    deadline = clock() + timeout
    left: list[str] | None = None
    while True:
        listed = steps(job_id, max(1.0, deadline - clock()))
        if listed is not None:
            left = in_the_way(listed, only)
            if not left:
                return []
        if clock() >= deadline:
            return left
        sleep(min(STEPS_POLL_S, max(0.0, deadline - clock())))


def requeue(job_id: str, *, only: Collection[str] | None = None, wait_s: float | None = None) -> tuple[bool, str]:
    """Ask Slurm to requeue the job (the batch step ends; the job starts again when nodes allow), once its
    steps have ended (:func:`wait_steps_ended`, up to ``wait_s``: :data:`STEPS_END_WAIT_S` by default; ``only``:
    those steps). ``(done, words)``: the words say what scontrol said where it failed, and which steps were
    still ending where the wait ran out ("" when all is well)."""
    wait_s = STEPS_END_WAIT_S if wait_s is None else wait_s
    late = still_ending(wait_steps_ended(job_id, only=only, timeout=wait_s), wait_s)
    p = run(["scontrol", "requeue", job_id])
    if p is None:
        said = f"scontrol requeue could not be run, or did not answer within {SQUEUE_TIMEOUT_S:g}s"
    else:
        said = "" if p.returncode == 0 else (p.stderr or p.stdout).strip()
    return p is not None and p.returncode == 0, "; ".join(w for w in (said, late) if w)


def key_values(line: str) -> dict[str, str]:
    """The ``Key=Value`` fields of one line of ``scontrol ... -o`` (a value holds no space)."""
    return dict(x.split("=", 1) for x in line.split() if "=" in x)


# Why a job pends that no waiting will clear (squeue's reason): the job must change, not the cluster's load.
NEVER_CLEARS = {
    "PartitionNodeLimit": "it asks for more nodes than its partition has or allows a job",
    "PartitionTimeLimit": "its time limit is above the partition's",
    "PartitionConfig": "it asks for what its partition is not configured for",
    "BadConstraints": "no node satisfies its constraints",
    "QOSMaxNodePerJobLimit": "it asks for more nodes than its QOS allows a job",
    "AssocMaxNodesPerJobLimit": "it asks for more nodes than its account allows a job",
    "QOSMaxWallDurationPerJobLimit": "its time limit is above what its QOS allows",
    "AssocMaxWallDurationPerJobLimit": "its time limit is above what its account allows",
    "InvalidAccount": "its account is not valid",
    "InvalidQOS": "its QOS is not valid",
}


def node_addresses(nodes: list[str]) -> dict[str, str]:
    """Node name -> Slurm's ``NodeAddr`` (what reaches it where names do not resolve); {} when Slurm does not
    answer. ``scontrol show node -o`` prints one ``Key=Value`` line per node."""
    p = run(["scontrol", "show", "node", "-o", ",".join(nodes)]) if nodes else None
    fields = map(key_values, p.stdout.splitlines()) if p is not None and p.returncode == 0 else ()
    return {f["NodeName"]: f["NodeAddr"] for f in fields if f.get("NodeName") and f.get("NodeAddr")}


def show_job(job_id: str) -> dict[str, str]:
    """``scontrol show job -o J`` as its ``Key=Value`` fields (empty when Slurm does not answer)."""
    p = run(["scontrol", "show", "job", "-o", str(job_id)])
    return key_values(p.stdout) if p is not None and p.returncode == 0 else {}


def notice_reason(job_id: str) -> str:
    """Why Slurm sent the job its warning signal (``--signal=B:USR1@N``, which rlsup asks for): the job is
    being preempted (Slurm has set its ``PreemptTime``; ``preempt_send_user_signal`` sends the warning then), or
    its time limit is near. The words of the run's end."""
    fields = show_job(job_id)
    if fields.get("PreemptTime", "None") not in ("None", "Unknown", ""):
        return f"job {job_id} is being preempted (Slurm's notice, SIGUSR1)"
    if fields.get("TimeLimit"):
        return f"job {job_id} reaches its time limit ({fields['TimeLimit']}) soon (Slurm's notice, SIGUSR1)"
    return f"job {job_id}: Slurm's notice (SIGUSR1): it is being preempted or its time limit is near"
