"""Multi-node runs on Slurm: Slurm allocates, places, binds GPUs and requeues; rlsup supervises on top.

- :mod:`.placement`: which nodes of the allocation each component runs on, and the ``RLSUP_NODES_C`` /
  ``RLSUP_HEAD_C`` / ``RLSUP_NNODES_C`` variables that tell every command (pure functions);
- :mod:`.launcher`: the launcher seam: an attempt as an ``srun`` step, its stops through ``scancel``;
- :mod:`.jobs`: ``sbatch`` submission, the job's state from ``squeue --json``, the batch script;
- :mod:`.shared`: whether the run dir is on a filesystem every node of the allocation sees.

No node membership, heartbeat or placement policy of rlsup's own: the allocation is Slurm's, and a
component's nodes are a slice of it named in the config.
"""
