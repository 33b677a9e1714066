"""Fixtures of the fault matrix (the machinery is in harness.py)."""

from tests.faults.harness import fault_run, other_user, small_disk, token  # noqa: F401
