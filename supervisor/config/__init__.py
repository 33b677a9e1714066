"""The run's YAML turned into a validated model: the pydantic ``model``, its ``loader`` (YAML with positions,
limits, ``FILE:LINE:COL`` errors), ``${VAR}`` ``interpolate``-ion, the ``fleetfile``'s pods; Slurm placement."""
