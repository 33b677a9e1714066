"""Snapshot tests with fixed fake state and a fixed clock (pytest-textual-snapshot).

Update after an intended change with: pytest tests/tui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

import fake
import pytest


async def settle(pilot) -> None:
    await pilot.pause()
    await pilot.pause(0.15)  # a few flush ticks: panes filled, state painted


@pytest.mark.parametrize(("state", "size"), [
    ("normal_run", (100, 30)),
    ("normal_run", (200, 50)),
    ("crash_loop_run", (100, 30)),
    ("no_gpu_run", (100, 30)),
    ("eight_gpu_run", (200, 50)),
])
def test_screen(snap_compare, state, size):
    assert snap_compare(fake.make_app(getattr(fake, state)()), terminal_size=size, run_before=settle)


def test_crash_loop_evidence(snap_compare):
    assert snap_compare(fake.make_app(fake.crash_loop_run()), press=["3", "v"], terminal_size=(100, 30),
                        run_before=settle)


def test_confirm_restart(snap_compare):
    assert snap_compare(fake.make_app(fake.crash_loop_run()), press=["3", "r"], terminal_size=(100, 30),
                        run_before=settle)
