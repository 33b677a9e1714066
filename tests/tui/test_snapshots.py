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


# the views of issue 19 --------------------------------------------------------------------------


def test_failure_detail(snap_compare):
    assert snap_compare(fake.make_app(fake.crash_loop_run()), press=["3", "d"], terminal_size=(120, 40),
                        run_before=settle)


def test_charts(snap_compare):
    assert snap_compare(fake.make_app(fake.normal_run()), press=["3", "m"], terminal_size=(120, 40),
                        run_before=settle)


def test_copy_mode_selection(snap_compare):
    assert snap_compare(fake.make_app(fake.normal_run()), press=["3", "z", "k", "k", "c", "k", "k", "k"],
                        terminal_size=(100, 30), run_before=settle)


def test_wrapped_long_lines(snap_compare):
    assert snap_compare(fake.make_app(fake.long_lines_run()), press=["3", "z", "w"], terminal_size=(100, 30),
                        run_before=settle)


def test_sideways_scrolled_with_search(snap_compare):
    async def search(pilot) -> None:
        await settle(pilot)
        await pilot.press("3", "z", "slash", *"NCCL_DEBUG", "enter")
        await pilot.pause(0.1)

    assert snap_compare(fake.make_app(fake.long_lines_run()), terminal_size=(100, 30), run_before=search)


def test_restart_markers(snap_compare):
    assert snap_compare(fake.make_app(fake.crash_loop_run()), press=["3", "z"], terminal_size=(100, 40),
                        run_before=settle)


def test_ended_run(snap_compare):
    assert snap_compare(fake.make_app(fake.ended_run()), terminal_size=(160, 40), run_before=settle)


def test_reconnecting_is_stale(snap_compare):
    async def drop(pilot) -> None:
        await settle(pilot)
        pilot.app.listener.on_connection("reconnecting", "connection lost; retrying in 2.0s")
        await pilot.pause(0.15)

    assert snap_compare(fake.make_app(fake.normal_run()), terminal_size=(160, 40), run_before=drop)


def test_gpu_processes(snap_compare):
    assert snap_compare(fake.make_app(fake.eight_gpu_run()), press=["p"], terminal_size=(120, 40),
                        run_before=settle)


def test_help(snap_compare):
    assert snap_compare(fake.make_app(fake.normal_run()), press=["question_mark"], terminal_size=(140, 50),
                        run_before=settle)
