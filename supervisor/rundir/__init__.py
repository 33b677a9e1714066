"""The run directory on disk: its layout and lock, the journal and its replay, logs, checkpoints, artefacts, archives."""
