"""The in-job check that every node sees the run dir: the probe each node runs, and what its answers mean.

The check against a real Slurm (a node that really does not see the run dir) is tests/slurm/test_slurm_blind_node.py.
"""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

from rlsup.supervisor.slurm.shared import PROBE, check_job, probe_argv, verdict

NODES = ["gpu-01", "gpu-02", "gpu-03"]


def _probe(node: str, marker: str) -> str:
    """The probe as a node's task runs it (a real sh; Slurm sets SLURMD_NODENAME in a task's environment)."""
    return subprocess.run(["sh", "-c", PROBE, "sh", marker], capture_output=True, text=True, check=True,
                          env={"SLURMD_NODENAME": node, "PATH": "/usr/bin:/bin"}).stdout


def test_every_node_sees_the_marker(tmp_path):
    marker = tmp_path / ".rlsup-shared-x"
    marker.write_text("x")
    out = "".join(_probe(n, str(marker)) for n in NODES)
    assert verdict("/shared/run", NODES, out) is None


def test_a_node_that_does_not_see_it_is_named_with_what_to_do(tmp_path):
    marker = tmp_path / ".rlsup-shared-x"
    marker.write_text("x")
    out = _probe("gpu-01", str(marker)) + _probe("gpu-02", str(tmp_path / "elsewhere")) + _probe("gpu-03", str(marker))
    msg = verdict("/scratch/run", NODES, out)
    assert msg is not None
    assert "not visible on gpu-02:" in msg and "gpu-01" not in msg and "gpu-03" not in msg
    assert "/scratch/run" in msg and "put run_dir on the cluster's shared filesystem" in msg


def test_several_blind_nodes_are_listed_once_each_in_order():
    out = "rlsup-blind gpu-03\nrlsup-sees gpu-01\nrlsup-blind gpu-02\nrlsup-blind gpu-03\n"
    msg = verdict("/r", NODES, out)
    assert msg is not None and "not visible on gpu-02, gpu-03:" in msg


def test_a_node_that_never_answered_is_not_taken_as_seeing_it():
    # The step ran on two nodes only (the third one's task never started): that is not a pass.
    out = "rlsup-sees gpu-01\nrlsup-sees gpu-02\n"
    msg = verdict("/r", NODES, out, returncode=1, stderr="srun: error: Task launch for StepId=7.3 failed on node gpu-03\n")
    assert msg is not None and "gpu-03" in msg and "gpu-01" not in msg.split(":")[0]
    assert "exited 1" in msg and "Task launch" in msg
    assert "no answer" in (verdict("/r", NODES, "", returncode=0) or "")


def test_other_output_on_the_step_is_ignored():
    out = "Welcome to gpu-01\nrlsup-sees gpu-01\nrlsup-sees gpu-02\n\nrlsup-sees gpu-03\nrlsup-blind\n"
    assert verdict("/r", NODES, out) is None


def test_the_probe_is_one_overlapping_task_on_each_node_of_the_job():
    argv = probe_argv("42", NODES, "/r/.m")
    assert "--jobid=42" in argv and "--overlap" in argv and "--nodelist=gpu-01,gpu-02,gpu-03" in argv
    assert "--nodes=3" in argv and "--ntasks=3" in argv and "--ntasks-per-node=1" in argv
    assert "--gres=none" in argv  # the components hold the GPUs; the probe must not wait for them
    assert argv[-4:] == ["-c", PROBE, "sh", "/r/.m"]


def test_check_job_only_in_a_slurm_job_of_two_nodes_or_more():
    cfg = SimpleNamespace(slurm=SimpleNamespace(nodes=2), run_dir="/r")
    assert check_job(SimpleNamespace(slurm=None, run_dir="/r"), {"SLURM_JOB_ID": "1",
                                                                  "SLURM_JOB_NODELIST": "gpu-[01-02]"}) is None
    assert check_job(cfg, {"SLURM_JOB_NODELIST": "gpu-[01-02]"}) is None  # not inside a job
    assert check_job(cfg, {"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "gpu-01"}) is None  # one node sees itself
