"""The log keys follow the selection, not the mouse: a click on a part of the screen that takes no
focus (the header) leaves the keys where they were. The log's keys live
on the log pane (as toolong has them), so the pane must keep the focus through such clicks."""

from __future__ import annotations

import fake
from fake import run_async, started

from rlsup.tui import actions

SIZE = (120, 40)


@run_async
async def test_a_click_on_the_header_leaves_the_log_keys_working():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        app.session.logs("inference", [f"extra {i:04d}" for i in range(200)], seq=40)
        await pilot.pause(0.15)
        await pilot.press("enter")
        assert screen.context == actions.LOG
        view = screen.panes["inference"].view
        end = view.top
        await pilot.click("#header", offset=(2, 0))
        await pilot.pause()
        await pilot.press("k")
        assert view.top == end - 1 and not view.follow, "k after the click did not scroll the log"
        await pilot.press("pageup")
        assert view.top < end - 1


@run_async
async def test_in_the_table_a_click_on_the_header_leaves_the_arrows_on_the_table():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        await pilot.click("#header", offset=(2, 0))
        await pilot.pause()
        await pilot.press("down")
        assert screen.selected_name() == "orchestrator"
