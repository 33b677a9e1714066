"""The run's YAML turned into a validated model, with file:line:col errors; Slurm placement of the config."""
