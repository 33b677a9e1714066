"""Mouse on the log pane: Textual's own handlers (double-click selects the widget's text) must find
the Widget API they expect. LogView once kept its search string in ``self.query``, shadowing
``DOMNode.query``, and a double-click on a log pane ended the TUI with
``TypeError: 'str' object is not callable`` (found by mypy)."""

from __future__ import annotations

import fake
from fake import run_async, started

SIZE = (120, 40)


@run_async
async def test_double_and_triple_click_on_a_log_pane_keep_the_tui_running():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        await pilot.press("3")
        view = screen.panes["trainer"].view
        await pilot.click(view, offset=(5, 2), times=2)
        await pilot.pause()
        await pilot.click(view, offset=(5, 3), times=3)
        await pilot.pause()
        assert app.is_running
        await pilot.press("slash", *"step", "enter")  # search still works after the clicks
        await pilot.pause()
        assert view.search_query == "step"
        assert view.current is not None
