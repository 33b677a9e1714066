"""GPUs: NVML behind one hardened boundary, and the wait for a restarted component's GPU memory to be released."""
