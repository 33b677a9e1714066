"""Multi-node runs on Slurm: Slurm allocates, places, binds GPUs and requeues; rlsup supervises on top (the job,
the launcher seam, the cluster check, the shared run dir and per-node GPU samples: one module each).

No node membership, heartbeat or placement policy of rlsup's own: the allocation is Slurm's, and a
component's nodes are a slice of it named in the config (:mod:`rlsup.supervisor.config.placement`).
"""
