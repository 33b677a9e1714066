"""Slurm's own failure lines in a step's output, as diagnosis categories attributed to rank and node.

A component that runs as an ``srun`` step (supervisor.slurm.launcher) has srun's and slurmstepd's
messages in its log next to its own output. They name causes the program cannot print itself, in
Slurm's own words (:data:`_RULES`; src/srun/srun_job.c, the launch plugin, slurmstepd).

srun's ``<node>: task(s) R: <how>`` lines name which rank on which node ended first; that is the
attribution kept in ``rank`` and ``node``. These refine the one-machine diagnosis (a task killed by
SIGKILL reads as ``killed``; Slurm says why) and never replace a primary cause found in the program's
own output (a Python traceback, a CUDA OOM).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("node_failure", re.compile(r"srun: error: Node failure on (?P<node>\S+)")),
    ("node_failure", re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON (?P<node>\S+) CANCELLED AT \S+ DUE TO NODE FAILURE")),
    # srun cannot reach the node's slurmd to launch there: a node lost before Slurm declared it down
    # (slurm_errno.c: SLURM_COMMUNICATIONS_CONNECTION_ERROR and the socket errors; measured on 22.05.8
    # with the node's slurmd killed: "Task launch for StepId=4.0 failed on node wn2: Communication
    # connection failure").
    ("node_failure", re.compile(r"Task launch for \S+ failed on node (?P<node>[^\s:]+): (?:Communication connection "
                                r"failure|Zero Bytes were transmitted or received|Socket timed out on send/recv)")),
    ("step_launch_failure", re.compile(r"Task launch for \S+ failed on node (?P<node>[^\s:]+)")),
    ("step_launch_failure", re.compile(r"srun: error: Unable to create step for job \S+")),
    ("time_limit", re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON (?P<node>\S+) CANCELLED AT \S+ DUE TO TIME LIMIT")),
    ("oom_kill", re.compile(r"Detected \d+ oom[-_]kill events? in (?:StepId=)?\S+")),
    ("oom_kill", re.compile(r"srun: error: (?P<node>[^\s:]+): tasks? (?P<rank>[\d,-]+): Out Of Memory")),
)
_TASK_END = re.compile(r"srun: error: (?P<node>[^\s:]+): tasks? (?P<rank>[\d,-]+): (?P<how>.+)$")
# Categories a Slurm cause overrides: what a process dying of a signal looks like from inside.
_OVERRIDABLE = {"killed", "unknown", "none", "host_oom", "segfault", "nccl_timeout", "nccl_error",
                "distributed_timeout", "connection_refused"}
_SUMMARY = {
    "node_failure": "node failure{on}: Slurm lost the node the step ran on",
    "step_launch_failure": "Slurm could not launch the step{on}",
    "time_limit": "the job's time limit was reached{on}: Slurm cancelled the step",
    "oom_kill": "out of memory{on}: the step's cgroup OOM killer ended a task",
}


def scan(lines: Iterable[str]) -> dict[str, Any] | None:
    """The Slurm cause in a step's output: ``{category, node, rank, evidence}`` (first cause wins:
    a node failure makes the other ranks' deaths consequences), or None."""
    found: dict[str, Any] | None = None
    first_end: dict[str, Any] | None = None
    for line in lines:
        text = line.rstrip("\n")
        if "srun" not in text and "***" not in text and "oom" not in text.lower() and "Task launch" not in text:
            continue
        hit = next(((c, m) for c, rx in _RULES if (m := rx.search(text))), None) if found is None else None
        if hit is not None:
            gd = hit[1].groupdict()
            found = {"category": hit[0], "node": gd.get("node"), "rank": gd.get("rank"), "evidence": [text]}
        elif first_end is None and (m := _TASK_END.search(text)):
            first_end = {"node": m.group("node"), "rank": m.group("rank"), "line": text}
    if found is None:
        return None
    if first_end is not None:
        found["node"] = found["node"] or first_end["node"]
        found["rank"] = found["rank"] or first_end["rank"]
        found["evidence"].append(first_end["line"])
    return found


def refine(diag: dict[str, Any], lines: Iterable[str]) -> dict[str, Any]:
    """The diagnosis with Slurm's cause where the program's own output names none."""
    hit = scan(lines)
    if hit is None:
        return diag
    if diag.get("category") not in _OVERRIDABLE:
        return {**diag, "slurm": hit}  # the program's own cause stays first; Slurm's is kept beside it
    on = f" on {hit['node']}" + (f" (rank {hit['rank']})" if hit.get("rank") else "") if hit.get("node") else ""
    summary = _SUMMARY[hit["category"]].format(on=on)
    return {**diag, "category": hit["category"], "summary": summary, "node": hit.get("node"),
            "rank": hit.get("rank"), "evidence": hit["evidence"] + list(diag.get("evidence") or [])[:5]}
