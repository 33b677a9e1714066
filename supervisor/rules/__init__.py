"""The pure decisions, side by side: a component's lifecycle, restart policy, detectors and the run's step.

Functions of state, input and an injectable clock; no process, socket or file."""
