"""Slurm's own failure lines as diagnosis categories, attributed to rank and node.

The lines are Slurm's (src/srun, src/slurmd/slurmstepd) as they appear in real job logs; the node
failure one was recorded from Slurm 22.05 in tests/slurm (a killed slurmd)."""

from __future__ import annotations

from rlsup.supervisor.diagnosis.slurm import refine, scan

KILLED = {"category": "killed", "summary": "killed by SIGKILL", "evidence": []}


def test_node_failure_names_the_node():
    d = refine({"category": "unknown", "evidence": []}, ["0: step 10", "srun: error: Node failure on rn2"])
    assert d["category"] == "node_failure" and d["node"] == "rn2" and "rn2" in d["summary"]


def test_job_cancelled_due_to_node_failure():
    line = ("slurmstepd-dv1: error: *** JOB 3 ON dv1 CANCELLED AT 2026-11-25T15:35:01 DUE TO NODE FAILURE, "
            "SEE SLURMCTLD LOG FOR DETAILS ***")
    assert scan([line])["category"] == "node_failure"


def test_oom_kill_with_rank_and_node():
    lines = ["slurmstepd: error: Detected 1 oom_kill event in StepId=1054.0. Some of the step tasks have been OOM Killed.",
             "srun: error: ana: task 0: Out Of Memory"]
    d = refine(KILLED, lines)
    assert d["category"] == "oom_kill" and d["node"] == "ana" and d["rank"] == "0"


def test_time_limit():
    line = "slurmstepd: error: *** STEP 524549.1 ON ault43 CANCELLED AT 2024-10-09T23:25:32 DUE TO TIME LIMIT ***"
    d = refine(KILLED, [line])
    assert d["category"] == "time_limit" and d["node"] == "ault43"


def test_step_launch_failure():
    d = refine({"category": "unknown", "evidence": []},
               ["srun: error: Task launch for StepId=12.3 failed on node dv2: Invalid job credential"])
    assert d["category"] == "step_launch_failure" and d["node"] == "dv2"


def test_a_launch_that_cannot_reach_the_node_is_a_node_failure():
    """Recorded from Slurm 22.05.8 (the hand walk of a demo run on the test cluster): the node's slurmd
    was killed, and the trainer's next step was launched there before slurmctld declared the node down.
    Judged a launch failure, the two attempts made a "repeated_error ... deterministic failure" and a
    fatal run with `requeue: true`; it is the node that is lost."""
    lines = ["0: 00:05:51 Waiting for training batch to arrive",
             "srun: error: Task launch for StepId=3.6 failed on node wn2: Communication connection failure",
             "srun: error: Application launch failed: Communication connection failure",
             "srun: Job step aborted"]
    d = refine({"category": "unknown", "evidence": []}, lines)
    assert d["category"] == "node_failure" and d["node"] == "wn2" and "wn2" in d["summary"]


def test_a_program_cause_stays_first():
    d = refine({"category": "cuda_oom", "summary": "CUDA out of memory", "evidence": []},
               ["srun: error: Node failure on rn2"])
    assert d["category"] == "cuda_oom" and d["slurm"]["category"] == "node_failure"


def test_plain_task_ends_are_not_a_slurm_cause():
    assert scan(["srun: error: rn1: task 1: Exited with exit code 3"]) is None
