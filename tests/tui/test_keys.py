"""Pilot tests for every key and mode of the main screen: selection by arrows, j/k and mouse,
the log's keyboard scrolling, wrap and sideways scrolling, copy mode to the clipboard and to a
file, restart markers, the failure detail, charts and GPU views, Ctrl-C, the command palette,
toasts, the stale and ended markings."""

from __future__ import annotations

import time

import fake
import pytest
from fake import notes, run_async, started
from textual import events
from textual.widgets import Static

from rlsup.tui import actions
from rlsup.tui.app import MainScreen
from rlsup.tui.screens import ChartsScreen, FailureScreen, GpuScreen, HelpScreen, PathScreen, TimelineScreen
from rlsup.tui.widgets.chart import MetricChart
from rlsup.tui.widgets.component_table import ComponentTable
from rlsup.tui.widgets.log_pane import LogView

SIZE = (120, 40)


def row_text(view: LogView, y: int) -> str:
    return "".join(s.text for s in view.render_line(y))


def shown(view: LogView) -> list[str]:
    """What the view shows, row by row, without the scrollbar column."""
    return [row_text(view, y)[:-1].rstrip() for y in range(view.size.height)]


def more_lines(app, component: str, n: int, seq: int = 40, prefix: str = "extra") -> None:
    app.session.logs(component, [f"{prefix} {i:04d}" for i in range(n)], seq=seq)


# ------------------------------------------------------------------------------ selection


@run_async
async def test_arrows_and_jk_move_the_selection_in_the_table():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        assert screen.context == actions.TABLE
        await pilot.press("down")
        assert screen.selected_name() == "orchestrator"
        await pilot.press("j")
        assert screen.selected_name() == "trainer"
        await pilot.press("j")  # the last row: stays (no wrap, unlike tab)
        assert screen.selected_name() == "trainer"
        await pilot.press("k", "up")
        assert screen.selected_name() == "inference"
        await pilot.press("up")
        assert screen.selected_name() == "inference"
        view = screen.panes["inference"].view
        assert view.follow  # in the table, arrows never scrolled the log
        assert app.session.commands == []


@run_async
async def test_mouse_click_selects_a_row_or_a_pane():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        table = screen.query_one(ComponentTable)
        await pilot.click(ComponentTable, offset=(5, 3))  # header row 0, trainer is row 3
        await pilot.pause()
        assert screen.selected_name() == "trainer" and screen.context == actions.TABLE
        await pilot.click("#pane-1", offset=(10, 3))
        await pilot.pause()
        assert screen.selected_name() == "orchestrator" and screen.context == actions.LOG
        assert screen.panes["orchestrator"].has_class("focused")
        assert not table.focused


# ------------------------------------------------------------------------------ scrolling


@run_async
async def test_enter_gives_the_arrows_to_the_log_and_escape_takes_them_back():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        view = screen.panes["inference"].view
        end_top = view.top
        await pilot.press("enter")
        assert screen.context == actions.LOG
        await pilot.press("up")
        assert view.top == end_top - 1 and not view.follow
        await pilot.press("k", "k")
        assert view.top == end_top - 3
        assert "paused · 3 new lines" in screen.panes["inference"].title.text
        await pilot.press("j")
        assert view.top == end_top - 2
        await pilot.press("down", "down")  # back onto the last row: following again
        assert view.top == end_top and view.follow
        await pilot.press("escape")
        assert screen.context == actions.TABLE
        await pilot.press("down")
        assert screen.selected_name() == "orchestrator" and view.top == end_top


@run_async
async def test_zoomed_pane_scrolls_with_arrows():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        more_lines(app, "trainer", 200)
        await pilot.pause(0.15)
        await pilot.press("3", "z")
        assert screen.context == actions.LOG
        view = screen.panes["trainer"].view
        await pilot.pause()
        top = view.top
        await pilot.press("k")
        assert view.top == top - 1
        await pilot.press("escape")  # back to the table: unzooms
        assert not screen.zoomed and screen.context == actions.TABLE


@pytest.mark.parametrize("context", ["table", "log"])
@run_async
async def test_page_home_end_and_g_G_work_in_either_context(context):
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        more_lines(app, "inference", 500)
        await pilot.pause(0.15)
        if context == "log":
            await pilot.press("enter")
        view = screen.panes["inference"].view
        end = view.top
        h = view.size.height
        await pilot.press("pageup")
        assert view.top == end - (h - 1) and not view.follow
        await pilot.press("pagedown")
        assert view.top == end and view.follow
        await pilot.press("ctrl+b")
        assert view.top == end - (h - 1)
        await pilot.press("g")
        assert view.top == 0 and shown(view)[0] == view.lines[0]
        await pilot.press("G")
        assert view.top == end and view.follow
        await pilot.press("home")
        assert view.top == 0 and not view.follow
        await pilot.press("end")
        assert view.follow and shown(view)[-1] == "extra 0499"
        await pilot.press("ctrl+f")  # already at the end
        assert view.top == end


@run_async
async def test_mouse_wheel_scrolls_the_log_under_it():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        view = screen.panes["trainer"].view
        top = view.top
        view.post_message(events.MouseScrollUp(view, 2, 2, 0, -1, 0, False, False, False))
        await pilot.pause()
        assert view.top == top - 3 and not view.follow
        view.post_message(events.MouseScrollDown(view, 2, 2, 0, 1, 0, False, False, False))
        await pilot.pause()
        assert view.top == top and view.follow


@run_async
async def test_new_lines_while_paused_keep_the_view_and_count_below():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        pane = screen.panes["inference"]
        await pilot.press("enter", "k")
        before = shown(pane.view)
        more_lines(app, "inference", 25)
        await pilot.pause(0.15)
        assert shown(pane.view) == before
        assert pane.view.below == 26
        assert "paused · 26 new lines ↓" in pane.title.text


@run_async
async def test_sideways_scroll_and_wrap():
    app = fake.make_app(fake.long_lines_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        await pilot.press("3", "z")
        await pilot.pause()
        view = screen.panes["trainer"].view
        long_row = next(y for y, text in enumerate(shown(view)) if "DistBackendError" in text)
        assert shown(view)[long_row].endswith("…")  # cut at the pane's width
        await pilot.press("l")
        assert view.xoff == 8
        text = shown(view)[long_row]
        assert text.startswith("…") and text[1:].startswith(fake.LONG[9:20])
        assert "→ col 9" in screen.panes["trainer"].title.text
        await pilot.press("h", "h")
        assert view.xoff == 0
        rows_before = view.total_rows
        await pilot.press("w")
        assert view.wrap and view.xoff == 0
        assert view.total_rows > rows_before
        joined = "".join(t for t in shown(view) if t and not t.startswith("[train]"))
        assert fake.LONG.replace(" ", "") in joined.replace(" ", "")  # every character shows
        await pilot.press("l")
        assert view.xoff == 0
        assert any("wrap is on" in m for m in notes(app))
        await pilot.press("w")
        assert not view.wrap


@run_async
async def test_search_works_with_wrap_and_sideways_scrolling():
    app = fake.make_app(fake.long_lines_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        view = screen.panes["trainer"].view
        await pilot.press("3", "z", "slash", *"NCCL_DEBUG", "enter")
        await pilot.pause()
        match = view.current - view.dropped
        assert "NCCL_DEBUG" in view.lines[match]
        col = view.lines[match].find("NCCL_DEBUG")
        assert view.xoff <= col < view.xoff + view.text_width  # scrolled sideways to the match
        row = view.row_of(match) - view.top
        assert "NCCL_DEBUG" in row_text(view, row)
        await pilot.press("w")  # wrapped: the match is on a continuation row, highlighted there
        hit_rows = [y for y in range(view.size.height) if "NCCL_DEBUG" in row_text(view, y)]
        assert hit_rows
        style = view.get_component_rich_style("log-view--match")
        segs = [s for s in view.render_line(hit_rows[0]) if s.text == "NCCL_DEBUG"]
        assert segs and segs[0].style.bgcolor == style.bgcolor
        await pilot.press("N")  # older match: the other long line (rank1) or wraps to itself
        assert "NCCL_DEBUG" in view.lines[view.current - view.dropped]


# ------------------------------------------------------------------------------ copy mode


@run_async
async def test_copy_mode_selects_lines_and_writes_them_to_a_file(tmp_path):
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        view = screen.panes["trainer"].view
        await pilot.press("3", "c")
        assert screen.context == actions.SELECT
        assert view.selection() == [view.lines[-1]]
        await pilot.press("k", "k", "up")
        assert view.selection() == view.lines[-4:]
        assert "COPY 4 lines" in screen.panes["trainer"].title.text
        await pilot.press("r")  # commands are off in copy mode
        assert isinstance(app.screen, MainScreen) and app.session.commands == []
        await pilot.press("s")
        assert isinstance(app.screen, PathScreen)
        assert app.screen.default.startswith("rlsup-trainer-")
        target = tmp_path / "excerpt" / "trainer.log"
        box = app.screen.query_one("#path")
        box.value = str(target)
        await pilot.press("enter")
        await pilot.pause()
        assert target.read_text() == "".join(line + "\n" for line in view.lines[-4:])
        assert not view.selecting and screen.context == actions.TABLE
        assert any(str(target) in m for m in notes(app))


@run_async
async def test_copy_mode_y_puts_the_selection_on_the_clipboard(monkeypatch):
    monkeypatch.delenv("TMUX", raising=False)
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        view = screen.panes["inference"].view
        await pilot.press("enter", "k", "k")  # scrolled up two lines: copy mode starts at the last visible one
        await pilot.press("c")
        assert view.selection() == [shown(view)[-1]] == [view.lines[-3]]
        await pilot.press("k", "space", "k")  # up one, start again there, up one more
        assert view.selection() == view.lines[-5:-3]
        await pilot.press("y")
        await pilot.pause()
        assert app.clipboard == "\n".join(view.lines[-5:-3]) + "\n"
        assert not view.selecting
        assert any("2 lines of inference sent to the clipboard (OSC 52)" in m for m in notes(app))


@run_async
async def test_copy_mode_search_moves_the_cursor_and_q_or_escape_leave_it():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        view = screen.panes["trainer"].view
        await pilot.press("3", "c")
        await pilot.press("slash", *"step   12", "enter")
        await pilot.pause()
        assert view.lines[view.cursor - view.dropped].startswith("[train] step   12")
        assert len(view.selection()) == 40 - 12 + 1  # from the anchor (the last line) to the match
        await pilot.press("q")
        assert not view.selecting and app.is_running  # q leaves copy mode, it does not detach
        await pilot.press("c", "escape")
        assert not view.selecting and screen.context == actions.TABLE


# ------------------------------------------------------------------------------ markers


@run_async
async def test_a_restart_puts_a_marker_line_in_the_log():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        view = screen.panes["trainer"].view
        app.session.event("started", "trainer", ts=fake.T0 + 3000, pid=777, attempt=3,
                          resume={"step": 50, "checkpoint": "c"})
        app.session.logs("trainer", ["first line of attempt 3"], seq=40)
        await pilot.pause(0.15)
        assert view.lines[-2] == "── attempt 3 · resumed from step 50 · 23:03:20 ──"
        assert view.dropped + len(view.lines) - 2 in view.marks
        rows = shown(view)
        assert rows[-2].startswith("── attempt 3 · resumed from step 50 · 23:03:20 ──") and rows[-2].endswith("───")
        marker_style = view.get_component_rich_style("log-view--marker")
        seg = list(view.render_line(view.size.height - 2))[0]
        assert seg.style.color == marker_style.color
        # it is a line like any other for search
        await pilot.press("3", "slash", *"resumed from step", "enter")
        assert view.current == view.dropped + len(view.lines) - 2


@run_async
async def test_markers_land_where_the_attempt_output_starts():
    app = fake.make_app(fake.crash_loop_run())  # started events carry log_seq 0, 5, 10, 15, 20
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        lines = screen.panes["trainer"].view.lines
        markers = [i for i, line in enumerate(lines) if line.startswith("── attempt")]
        assert markers == [0, 6, 12, 18, 24]
        assert lines[6] == "── attempt 2 · resumed from step 50 · 23:11:43 ──"
        assert lines[25] == "Traceback (most recent call last):"


# ------------------------------------------------------------------------------ views


@run_async
async def test_d_opens_the_failure_detail():
    snap = fake.crash_loop_run()
    app = fake.make_app(snap)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        app.session.event("exited", "trainer", exit_code=1, signal=None, uptime_s=3.0, step=None, diagnosis={
            "category": "python_exception",
            "summary": "/usr/bin/python: Error while finding module specification for 'sglang.launch_server' "
                       "(ModuleNotFoundError: No module named 'sglang')",
            "exception": None, "location": None, "step": None,
            "evidence": ["/usr/bin/python: Error while finding module specification for 'sglang.launch_server'"],
            "hint": "pip install 'rlsup[sglang]'"})
        await pilot.pause(0.15)
        table = app.main.query_one(ComponentTable)
        assert table.rows[2][2]["last exit"] == "exit 1: ModuleNotFoundError: No module named 'sglang'"
        await pilot.press("3", "d")
        assert isinstance(app.screen, FailureScreen)
        text = app.screen.body().plain
        assert "category   python_exception" in text
        assert "cause      ModuleNotFoundError: No module named 'sglang'" in text
        assert "what to do next\n  • pip install 'rlsup[sglang]'" in text  # the hint first
        assert "evidence (from the log)" in text and "Error while finding module" in text
        assert "what rlsup did" in text and "restarting in 32.0s (attempt 6; exit code 1)" in text
        assert "flag crash_loop: 5 crashes in 5 minutes -> backing off; fatal after 10" in text
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


@run_async
async def test_failure_detail_of_a_healthy_component_says_so():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("1", "d")
        assert "inference has not exited in this run: no failure to explain" in app.screen.body().plain


@run_async
async def test_m_opens_charts_of_the_whole_run():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("3", "m")
        await pilot.pause()
        assert isinstance(app.screen, ChartsScreen)
        charts = {c.metric: c for c in app.screen.query(MetricChart)}
        assert set(charts) == {"reward", "loss"}
        text = charts["reward"].render().plain
        hist = app.model.state["components"]["trainer"]["history"]["reward"]
        assert f"min {hist['lo']:.4g}" in text and f"max {hist['hi']:.4g}" in text
        assert "steps 1–120, 120 points" in text
        lines = text.splitlines()
        assert lines[-1].strip().startswith("1") and lines[-1].rstrip().endswith("120 step")
        assert any("\u2801" <= ch <= "\u28ff" for ch in text)  # drawn
        await pilot.press("tab")  # next component: inference has no metrics
        await pilot.pause()
        assert app.screen.component == "inference"
        assert not list(app.screen.query(MetricChart))
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


@run_async
async def test_charts_follow_new_progress():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("3", "m")
        await pilot.pause()
        app.session.event("progress", "trainer", step=121, metrics={"reward": 0.9},
                          history={"reward": {"every": 1, "lo": 0.1, "hi": 0.9, "points": [[121, 0.9, 1]]}})
        app.screen.update_charts()
        chart = next(c for c in app.screen.query(MetricChart) if c.metric == "reward")
        assert "steps 1–121, 121 points" in chart.render().plain and "max 0.9" in chart.render().plain


@run_async
async def test_p_lists_the_processes_on_each_gpu():
    app = fake.make_app(fake.eight_gpu_run())
    async with app.run_test(size=(200, 50)) as pilot:
        await started(pilot)
        await pilot.press("p")
        assert isinstance(app.screen, GpuScreen)
        text = "\n".join(str(w.content) for w in app.screen.query(Static))
        assert "GPU 3 NVIDIA H100 80GB HBM3" in text
        assert "    1104  inference" in text and "    9003  outside the run" in text


@run_async
async def test_resources_show_as_columns_and_gpu_processes_in_the_panel():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await started(pilot)
        table = screen.query_one(ComponentTable).render().plain
        assert "CPU" in table and "RSS" in table and "GPU mem" in table
        trainer = next(line for line in table.splitlines() if "trainer" in line)
        assert "187%" in trainer and "14.6G" in trainer and "20.5G" in trainer
        orch = next(line for line in table.splitlines() if "orchestrator" in line)
        assert "3.1%" in orch and "812M" in orch
        gpu = str(screen.query_one("#gpu").render())
        assert "└ 1101 inference 19.5G" in gpu and "└ 1102 trainer 20.5G" in gpu


@run_async
async def test_unknown_and_new_event_kinds_render_generically():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        app.session.event("spawn_failed", "trainer", attempt=3, error="No such file: torchrun")
        app.session.event("adopted", "trainer", pid=4321, attempt=2)
        app.session.event("run_started", None, name="demo", components=fake.COMPONENTS)
        app.session.event("telemetry", "trainer", weird={"nested": [1, 2]})
        await pilot.pause(0.15)
        assert screen.panes["trainer"].view.lines[-1].startswith(
            "── attempt 2 adopted by a new supervisor (pid 4321)")
        await pilot.press("e")
        assert isinstance(app.screen, TimelineScreen)
        text = str(app.screen.query_one("#timeline Static").content)
        assert "could not start (attempt 3): No such file: torchrun" in text
        assert "telemetry: weird={'nested': [1, 2]}" in text


# ------------------------------------------------------------------------------ conventions


@run_async
async def test_the_help_table_is_rendered_once_for_its_first_opening(monkeypatch):
    """Its four renders (a height, a paint, both again less a scrollbar) held the first opening's frame."""
    from rich.table import Table

    widths: list[int] = []
    render = Table.__rich_console__
    monkeypatch.setattr(Table, "__rich_console__", lambda self, console, options: (widths.append(options.max_width),
                                                                                   render(self, console, options))[1])
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)  # (its look: tests/tui/test_snapshots.py)
        assert len(widths) == 1, widths


@run_async
async def test_ctrl_c_detaches_like_q_from_any_screen():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert app.return_value == 0 and app.session.closed and app.session.commands == []
    assert app.exit_message.startswith("training continues")
    assert not any("ctrl+q" in m.lower() for m in notes(app))


@run_async
async def test_command_palette_lists_and_runs_the_key_table():
    from rlsup.tui.palette import KeyTableCommands

    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        provider = KeyTableCommands(screen)
        names = [name for name, _ in provider._commands()]
        for _action, label, text in actions.palette_entries():
            if label != "1-9":
                assert f"{text}  ({label})" in names
        assert "select component 3: trainer  (3)" in names
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"zoom the selected")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert screen.zoomed
        await screen.run_from_palette("copy")  # a copy-mode action outside copy mode: says where it acts
        await pilot.pause()
        assert any("acts in the copy mode" in m for m in notes(app)), notes(app)


@run_async
async def test_toasts_stay_off_the_log_panes():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        screen = await started(pilot)
        app.notify("restart trainer: requested", title="restart trainer")
        await pilot.pause(0.2)
        rack = app.screen.get_child_by_id("textual-toastrack")
        toast = rack.children[0].children[0]
        logs = screen.query_one("#logs")
        assert toast.region.bottom <= logs.region.y  # over the table and gauges, not the log panes
        assert toast.region.y >= 1  # under the header


@run_async
async def test_reconnecting_marks_the_data_stale():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        app.listener.on_connection("reconnecting", "connection lost")
        await pilot.pause(0.15)
        header = str(screen.query_one("#header").render())
        assert "◌ reconnecting (connection lost)" in header and "stale: data from 23:15:23" in header
        assert screen.query_one("#top").has_class("-stale")
        assert screen.query_one(ComponentTable).stale
        app.listener.on_snapshot(fake.normal_run(), True)
        app.listener.on_connection("attached", "pod-1")
        await pilot.pause(0.15)
        assert "stale" not in str(screen.query_one("#header").render())
        assert not screen.query_one("#top").has_class("-stale")


@run_async
async def test_an_ended_run_is_marked_and_read_only():
    app = fake.make_app(fake.ended_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        header = str(screen.query_one("#header").render())
        assert "■ run ended · read-only" in header
        assert "ended at 23:15:21: trainer fatal (root cause: trainer: CUDA out of memory at train.py:88" in header
        assert screen.check_action("restart", ()) is None  # greyed in the footer
        await pilot.press("3", "r", "Q", "u", "s")
        assert isinstance(app.screen, MainScreen) and app.session.commands == []
        await pilot.press("d")
        assert "root cause of the run: trainer: CUDA out of memory" in app.screen.body().plain


@run_async
async def test_idle_screen_stops_flushing_until_something_arrives():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        await pilot.pause(0.3)
        flushes = screen.flushes
        await pilot.pause(0.3)
        assert screen.flushes == flushes  # paused: nothing pending
        app.session.logs("trainer", ["wake up"], seq=40)
        await pilot.pause(0.15)
        assert screen.panes["trainer"].view.lines[-1] == "wake up"
        assert screen.flushes > flushes


@run_async
async def test_flooded_panes_take_turns_and_wait_after_a_key():
    """A pane scrolled by more than its height between paints repaints at most every
    FLOOD_PAINT_TICKS flush ticks, the panes taking turns; right after a key press they wait, so
    the key's frame carries nothing else. Ticks are driven by hand: no timing involved."""
    import math

    from rlsup.tui.app import KEY_QUIET_S
    from rlsup.tui.widgets.log_pane import FLOOD_PAINT_TICKS

    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await started(pilot)
        views = [p.view for p in screen.panes.values()]
        screen._flush_timer.pause()  # the test drives the ticks

        def flood() -> None:
            for v in views:
                v.append_lines([f"flood {i}" for i in range(v.height + 5)])

        screen._last_key_t = time.monotonic()  # a key was just pressed
        flood()
        assert all(v.flooding for v in views)
        assert screen._paint_panes(1000) is True and all(v.pending == "full" for v in views)
        screen._last_key_t = time.monotonic() - 2 * KEY_QUIET_S
        painted: list[set[int]] = []
        for tick in range(1001, 1001 + 4 * FLOOD_PAINT_TICKS):
            flood()
            before = {i: v.painted_tick for i, v in enumerate(views)}
            screen._paint_panes(tick)
            painted.append({i for i, v in enumerate(views) if v.painted_tick != before[i]})
        assert all(len(p) <= math.ceil(len(views) / FLOOD_PAINT_TICKS) for p in painted)
        for i in range(len(views)):
            ticks = [t for t, p in enumerate(painted) if i in p]
            assert ticks, f"pane {i} never painted"
            assert all(b - a >= FLOOD_PAINT_TICKS for a, b in zip(ticks, ticks[1:], strict=False))
        for tick in range(2000, 2000 + 2 * FLOOD_PAINT_TICKS):  # the flood is over: every pane catches up
            screen._paint_panes(tick)
        assert all(v.pending is None for v in views)
        screen._last_key_t = time.monotonic()
        views[0].append_lines(["one line"])  # not a flood: painted at the next tick, key or not
        screen._paint_panes(3000)
        assert views[0].pending is None


@run_async
async def test_gpu_samples_repaint_the_gauges_every_two_seconds_at_most():
    """A GPU/host sample alone waits for the gauges' turn (GAUGE_MIN_S); any other change brings
    it along at once. The turn is driven by hand: no timing involved."""
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=(200, 50)) as pilot:
        screen = await started(pilot)
        gpu = screen.query_one("#gpu")

        def sample(cpu: float) -> None:
            app.session.event("gpu", None, gpus=[], host={**fake.HOST, "cpu_pct": cpu}, backend="nvml", reason=None)

        screen._gauges_at = time.monotonic()  # the gauges were just repainted
        sample(99.0)
        await pilot.pause(0.15)
        assert "99%" not in str(gpu.render()) and screen._gauge_timer is not None
        screen._gauge_timer.stop()
        screen._gauges_due()  # their turn
        await pilot.pause(0.15)
        assert "99%" in str(gpu.render())
        screen._gauges_at = time.monotonic()
        sample(11.0)
        app.session.event("flag", "trainer", type="stall", message="no step for 10 minutes", evidence=[], action="")
        await pilot.pause(0.15)
        assert "11%" in str(gpu.render())  # came with the flag


# ------------------------------------------------------------------------------ every key


def _dispatch_targets(pump) -> dict[str, object]:
    """What Textual's key dispatch would call on ``pump`` for each printable key and each named key:
    ``key_<name>`` or ``_key_<name>`` (textual/_dispatch_key.py), where such an attribute exists."""
    import string

    from textual.keys import Keys, _character_to_key

    names = {_character_to_key(ch) for ch in string.printable if ch.strip()}
    names |= {k.value.replace("+", "_") for k in Keys}
    found = {}
    for name in names:
        for attr in (f"key_{name}", f"_key_{name}"):
            if hasattr(pump, attr):
                found[attr] = getattr(pump, attr)
    return found


@run_async
async def test_at_sign_does_not_crash_the_app():
    """``@`` is Textual's key "at", and Textual calls a pump's ``key_at`` or ``_key_at`` for it: the app's
    ``_key_at`` timestamp ended the TUI with ``TypeError: 1196.2 is not a callable object`` (found by typing
    a shell command into an attached TUI)."""
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        await pilot.press("@", "enter", "@", "escape")
        assert app.is_running and app.screen is screen


@pytest.mark.parametrize("snapshot", [fake.normal_run, fake.ended_run], ids=["live", "ended"])
@run_async
async def test_no_attribute_of_the_app_or_a_widget_is_mistaken_for_a_key_handler(snapshot):
    """Every key Textual can dispatch, on the app, its screens and every widget of the main screen: the
    ``key_<name>``/``_key_<name>`` attribute Textual would call is a handler or absent."""
    app = fake.make_app(snapshot())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        await pilot.press("enter")  # the log context too
        pumps = [app, *app.screen_stack, *screen.query("*")]
        bad = {f"{type(p).__name__}.{attr}": v for p in pumps for attr, v in _dispatch_targets(p).items()
               if not callable(v)}
        assert bad == {}


@run_async
async def test_help_opens_at_the_top_every_time_and_is_built_once():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=(120, 24)) as pilot:
        await started(pilot)
        await pilot.press("question_mark")
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen)
        scroll = help_screen.query_one("VerticalScroll")
        scroll.scroll_end(animate=False)
        await pilot.pause(0.1)
        assert scroll.scroll_y > 0
        await pilot.press("question_mark")  # ? closes it too
        assert isinstance(app.screen, MainScreen)
        await pilot.press("question_mark")
        await pilot.pause(0.1)
        assert app.screen is help_screen and help_screen.query_one("VerticalScroll").scroll_y == 0
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)
