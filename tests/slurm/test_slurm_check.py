"""`rlsup check` knows the cluster (issue 40, item 4): an allocation this cluster can never give is refused with
the key to change, before `sbatch` (where the job would pend for ever), against the real slurmctld."""

from __future__ import annotations

from tests.conftest import PY, write_config


def _check(slurm, tmp_path, block: str) -> tuple[int, str]:
    cfg = write_config(tmp_path, f"""
        run_dir: {tmp_path}/run
        slurm: {block}
        components:
          trainer:
            nodes: 1
            command: {PY} -c "print(1)"
    """)
    r = slurm.rlsup("check", str(cfg))
    return r.returncode, r.stdout + r.stderr


def test_check_refuses_what_the_cluster_can_never_give_and_passes_what_it_can(slurm, tmp_path):
    rc, out = _check(slurm, tmp_path, "{nodes: 2, partition: rlsupp}")
    assert rc == 1 and "run.yaml:3: error [slurm] partition 'rlsupp' does not exist on this cluster (did you mean " \
                       "'rlsup'?); partitions: rlsup, urgent" in out and "fix: partition: rlsup" in out, out
    rc, out = _check(slurm, tmp_path, "{nodes: 3}")
    assert rc == 1 and "slurm.nodes: 3, but partition 'rlsup' has 2 node(s)" in out and "fix: nodes: 2" in out, out
    rc, out = _check(slurm, tmp_path, "{nodes: 2, gpus_per_node: 4}")
    assert rc == 1 and "slurm.gpus_per_node: 4, but the nodes of partition 'rlsup' have at most 2 GPU(s)" in out, out
    rc, out = _check(slurm, tmp_path, "{nodes: 2, gpus_per_node: 2, partition: rlsup}")
    assert "[slurm]" not in out, out


