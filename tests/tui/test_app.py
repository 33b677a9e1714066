"""Pilot tests: keys send the right commands through the session, confirmations gate them, search
finds and highlights, q detaches without stopping anything, the log path is batched."""

from __future__ import annotations

import gc

import fake
import pytest
from fake import notes, run_async, started
from rich.segment import Segment
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from rlsup.tui import actions
from rlsup.tui.app import MainScreen, RlsupApp, run_tui
from rlsup.tui.screens import ConfirmScreen, FlagsScreen, HelpScreen, TimelineScreen
from rlsup.tui.widgets.log_pane import LogPane

SIZE = (120, 40)


@pytest.mark.parametrize(("key", "command"), [("r", "restart"), ("u", "resume"), ("s", "stop")])
@run_async
async def test_command_keys_ask_then_send(key, command):
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("3")
        await pilot.press(key)
        assert isinstance(app.screen, ConfirmScreen)
        assert "trainer" in app.screen.question
        assert app.session.commands == []  # nothing before the answer
        await pilot.press("y")
        await pilot.pause()
        assert app.session.commands == [(command, "trainer", {})]
        assert isinstance(app.screen, MainScreen)


@pytest.mark.parametrize("key", ["r", "u", "s", "Q"])
@run_async
async def test_no_sends_nothing(key):
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("2", key)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await pilot.pause()
        await pilot.press(key, "escape")
        await pilot.pause()
        assert app.session.commands == []
        assert isinstance(app.screen, MainScreen)


@run_async
async def test_start_on_a_stopped_component_does_not_ask():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        app.session.event("stopped", "orchestrator", by="user")
        await pilot.press("2", "s")
        await pilot.pause()
        assert app.session.commands == [("start", "orchestrator", {})]


@run_async
async def test_selection_keys():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        assert screen.selected_name() == "inference"
        await pilot.press("tab")
        assert screen.selected_name() == "orchestrator"
        await pilot.press("tab", "tab")
        assert screen.selected_name() == "inference"  # wraps
        await pilot.press("shift+tab")
        assert screen.selected_name() == "trainer"
        await pilot.press("9")  # no 9th component: selection stays
        assert screen.selected_name() == "trainer"
        assert screen.panes["trainer"].has_class("selected")
        assert not screen.panes["inference"].has_class("selected")


@run_async
async def test_q_detaches_without_stopping():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_value == 0
    assert app.session.commands == []
    assert app.session.closed
    assert app.exit_message == "training continues; re-attach with: rlsup attach --run-dir runs/demo"


@run_async
async def test_Q_stops_everything_after_confirming():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("Q")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await pilot.pause()
        await pilot.pause()
    assert app.session.commands == [("stop_all", None, {})]
    assert app.return_value == 0
    assert "stopping every component" in app.exit_message


@run_async
async def test_refused_command_shows_the_error_and_stays():
    app = fake.make_app(fake.normal_run(), replies={"stop_all": {"ok": False, "error": "supervisor is busy"},
                                                    "restart": {"ok": False, "error": "trainer is stopping"}})
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("3", "r", "y")
        await pilot.pause()
        await pilot.press("Q", "y")
        await pilot.pause()
        assert app.is_running
        assert "trainer is stopping" in notes(app)
        assert "supervisor is busy" in notes(app)


@run_async
async def test_search_finds_highlights_and_steps():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        await pilot.press("3", "slash")
        await pilot.press(*"STEP   1")  # case-insensitive; matches steps 10..19
        await pilot.press("enter")
        await pilot.pause()
        view = screen.panes["trainer"].view
        assert view.search_query == "step   1"
        assert view.lines[view.current].startswith("[train] step   19")  # newest match first
        assert not view.follow
        await pilot.press("N")
        assert view.lines[view.current].startswith("[train] step   18")
        await pilot.press("n", "n")
        assert view.lines[view.current].startswith("[train] step   10")  # wrapped to the oldest
        # the match is on screen and painted with the match style
        row = view.row_of(view.current - view.dropped) - view.top
        assert 0 <= row < view.size.height
        strip = view.render_line(row)
        match_style = view.get_component_rich_style("log-view--match")
        hits = [s.text for s in strip if isinstance(s, Segment) and s.style and match_style.bgcolor == s.style.bgcolor]
        assert hits == ["step   1"]
        assert "/step   1" in screen.panes["trainer"].title.text


@run_async
async def test_search_without_match_says_so():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        await pilot.press("slash", *"nothing-like-this", "enter")
        await pilot.pause()
        assert screen.panes["inference"].view.current is None
        assert any("not found" in m for m in notes(app))


@run_async
async def test_follow_and_new_lines_marker():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        pane: LogPane = screen.panes["inference"]
        await pilot.press("f")
        assert not pane.view.follow
        app.session.logs("inference", [f"late line {i}" for i in range(25)], seq=40)
        await pilot.pause(0.15)
        assert pane.view.below >= 25
        assert f"{pane.view.below:,} new lines" in str(pane.title.text)
        await pilot.press("f")
        await pilot.pause(0.1)
        assert pane.view.follow and pane.view.below == 0
        assert "follow" in str(pane.title.text)


@run_async
async def test_zoom_shows_only_the_selected_pane():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        await pilot.press("2", "z")
        await pilot.pause()
        assert [n for n, p in screen.panes.items() if p.display] == ["orchestrator"]
        assert not screen.query_one("#top").display
        await pilot.press("z")
        await pilot.pause()
        assert all(p.display for p in screen.panes.values())


@run_async
async def test_panes_a_zoom_hides_are_not_repainted_and_show_their_newest_lines_when_shown(monkeypatch):
    """A hidden pane's repaint made Textual arrange the whole screen again, ten times a second under a flood:
    it waits until shown, and the layout that shows it paints the lines that came meanwhile."""
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        await pilot.press("2", "z")
        await pilot.pause()
        hidden = screen.panes["trainer"].view
        refreshes = []
        monkeypatch.setattr(hidden, "refresh", lambda *a, **k: refreshes.append(a))
        app.session.logs("trainer", [f"late {i:03d}" for i in range(300)], seq=40)
        await pilot.pause(0.3)
        assert refreshes == []
        monkeypatch.undo()
        await pilot.press("z")
        await pilot.pause()
        rows = ["".join(s.text for s in strip) for strip in hidden.render_lines(Region(0, 0, *hidden.size))]
        assert rows[-1].startswith("late 299")


@run_async
async def test_a_log_view_paints_what_textuals_style_cache_painted():
    """LogView draws its rows without Textual's style cache: the same segments, the app's line filters applied,
    whole or cut to a column (the scrollbar's repaint), with a search highlight and a paused view's thumb."""
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        view = screen.panes["trainer"].view
        app.session.logs("trainer", [f"step {i} " + "é" * (i % 3) + "x" * (i % 90) for i in range(400)], seq=40)
        await pilot.pause(0.2)
        view.search_query = "step 39"
        view.scroll_rows(-7)
        w, h = view.size
        for crop in (Region(0, 0, w, h), Region(w - 1, 0, 1, h), Region(3, 2, w - 9, h - 4)):
            view._styles_cache.clear()
            assert view.render_lines(crop) == Widget.render_lines(view, crop)


@run_async
async def test_the_frame_answering_a_zoom_shows_the_newest_lines_at_the_new_height(monkeypatch):
    """The first paint of the zoomed log is at its new height, newest line on its last row: the view kept the
    old height's scroll position until Textual's resize event, after that frame (its lower rows blank), and the
    log was painted twice."""
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        await pilot.press("2")
        view = screen.panes["orchestrator"].view
        app.session.logs("orchestrator", [f"line {i:04d}" for i in range(200)], seq=40)
        await pilot.pause(0.15)
        small, paints = view.size.height, []

        def render_lines(crop: Region, real=view.render_lines) -> list[Strip]:
            strips = real(crop)
            paints.append(["".join(s.text for s in strip) for strip in strips])
            return strips

        monkeypatch.setattr(view, "render_lines", render_lines)
        await pilot.press("z")
        await pilot.pause()
        first = next(rows for rows in paints if len(rows) > small)
        assert [row[:9] for row in first] == [f"line {i:04d}" for i in range(200 - len(first), 200)]
        assert len(first) == view.size.height


@run_async
async def test_the_heap_is_frozen_once_the_first_snapshot_shows():
    """What start-up built leaves Python's garbage collections (a full one took 20-35 ms under a flood and
    landed in key frames); test apps, which come and go, do not freeze theirs."""
    assert gc.get_freeze_count() == 0
    app = fake.make_app(fake.normal_run(), freeze_heap=True)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            await pilot.pause()
            assert gc.get_freeze_count() > 0
            assert not app.freeze_heap  # once
    finally:
        gc.unfreeze()


def test_run_tui_freezes_its_heap(monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(RlsupApp, "run", lambda self: seen.append(self.freeze_heap) or 0)
    assert run_tui(lambda: None, target="local runs/demo", attach_hint="rlsup attach") == 0
    assert seen == [True]
    assert fake.make_app(None).freeze_heap is False


@run_async
async def test_tab_while_zoomed_shows_the_next_pane_with_the_selected_look():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        await pilot.press("z")
        await pilot.pause()
        first, second = screen.panes["inference"], screen.panes["orchestrator"]
        look = first.title.styles.background  # selected and focused
        await pilot.press("tab")
        await pilot.pause()
        assert [n for n, p in screen.panes.items() if p.display] == ["orchestrator"]
        assert screen.focused is second and second.has_class("selected", "focused")
        assert not first.has_class("selected") and not first.has_class("focused")
        assert second.title.styles.background == look != first.title.styles.background
        await pilot.press("shift+tab")
        await pilot.pause()
        assert [n for n, p in screen.panes.items() if p.display] == ["inference"]
        assert screen.focused is first and first.title.styles.background == look != second.title.styles.background
        await pilot.press("z")
        await pilot.pause()
        assert all(p.display for p in screen.panes.values()) and screen.query_one("#top").display


@run_async
async def test_timeline_flags_and_help_screens():
    app = fake.make_app(fake.crash_loop_run())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("e")
        assert isinstance(app.screen, TimelineScreen)
        kinds = [e.kind for e in app.screen.events]
        assert kinds.count("exited") == 5 and "restart_scheduled" in kinds and "flag" in kinds
        await pilot.press("escape", "3", "v")
        assert isinstance(app.screen, FlagsScreen)
        assert {f["type"] for _, f in app.screen.flags} == {"crash_loop", "repeated_error", "step_crash"}
        await pilot.press("escape", "question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


def test_help_footer_palette_and_readme_come_from_one_table():
    rows = actions.help_rows()
    labels = {label for label, _, _ in rows}
    assert {k.label for k in actions.KEYS} <= labels
    screen_bound = {b.action for b in MainScreen.BINDINGS}
    pane_bound = {b.action for b in LogPane.BINDINGS}
    app_bound = {b.action for b in RlsupApp.BINDINGS}
    assert screen_bound | pane_bound | app_bound == {k.action for k in actions.KEYS}
    for k in actions.KEYS:
        name = k.action.split("(")[0]
        owner = RlsupApp if k.app else LogPane if k.log else MainScreen
        assert callable(getattr(owner, f"action_{name}", None)), name
        assert name in actions.CONTEXTS or k.app, name
    palette = {a.split("(")[0] for a, _, _ in actions.palette_entries()}
    assert palette == {k.action.split("(")[0] for k in actions.KEYS}
    table = actions.markdown_table()
    for _label, what, _where in rows:
        assert what in table
    assert "`ctrl+c`" in table and "`↑` / `k`" in table


def test_the_key_tables_of_the_docs_and_readme_are_the_generated_one():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for doc in (root / "docs" / "tui.md", root / "README.md"):
        text = doc.read_text()
        block = text.split("<!-- keys:begin -->\n", 1)[1].split("\n<!-- keys:end -->", 1)[0]
        assert block == actions.markdown_table(), f"{doc.name}: regenerate with: python -m rlsup.tui.actions"


def test_keys_that_share_a_key_never_share_a_context():
    seen: dict[tuple[str, str], str] = {}
    for k in actions.KEYS:
        if k.app:
            continue
        for key in k.keys.split(","):
            for ctx in k.contexts:
                other = seen.setdefault((key, ctx), k.action)
                assert other == k.action, f"{key} in {ctx}: {other} and {k.action}"


@run_async
async def test_log_lines_are_flushed_in_batches_not_per_line():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        view = screen.panes["trainer"].view
        before_writes, before_lines, before_flushes = view.writes, len(view.lines), screen.flushes
        for i in range(10_000):  # one callback per line: the worst case for the view
            app.listener.on_logs("trainer", 40 + i, [f"line {i}"])
        await pilot.pause(0.2)
        assert len(view.lines) == before_lines + 10_000
        assert view.lines[-1] == "line 9999"
        writes = view.writes - before_writes
        assert 1 <= writes <= screen.flushes - before_flushes
        assert writes <= 5  # one per tick: 10k callbacks arrived between two ticks


@run_async
async def test_control_characters_and_gaps_are_made_safe():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        app.session.logs("inference", ["\x1b[31mred\x1b[0m\tbell\x07", "wide 日本語 ok"], seq=40)
        app.listener.on_gap("inference", 42, 1042)
        await pilot.pause(0.15)
        lines = screen.panes["inference"].view.lines
        assert "\x1b" not in lines[-3] and "\x07" not in lines[-3] and "\t" not in lines[-3]
        assert lines[-2] == "wide 日本語 ok"
        assert "1,000 lines not shown" in lines[-1]


@run_async
async def test_long_lines_are_cut_with_a_marker():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        view = screen.panes["inference"].view
        app.session.logs("inference", ["x" * 500, "日本" * 200], seq=40)
        await pilot.pause(0.15)
        h = view.size.height
        for row in (h - 2, h - 1):
            text = "".join(s.text for s in view.render_line(row))
            assert text[:-1].endswith("…")  # the last column is the scrollbar
            assert view.render_line(row).cell_length == view.size.width


@run_async
async def test_connection_state_reaches_the_header():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        screen = await started(pilot)
        header = screen.query_one("#header")
        assert "attached" in str(header.render())
        app.listener.on_connection("reconnecting", "connection lost")
        await pilot.pause(0.15)
        assert "reconnecting (connection lost)" in str(header.render())


@run_async
async def test_events_fold_into_the_state_like_the_supervisor():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        app.session.event("exited", "trainer", exit_code=1, signal=None, uptime_s=10.0, step=120,
                          diagnosis={"category": "cuda_oom", "summary": "CUDA out of memory"})
        app.session.event("restart_scheduled", "trainer", delay_s=2.0, attempt=2, reason="exit code 1")
        app.session.event("started", "trainer", pid=999, attempt=2, resume={"step": 120, "checkpoint": "c"})
        await pilot.pause(0.15)
        c = app.model.state["components"]["trainer"]
        assert (c["state"], c["pid"], c["attempt"], c["restarts"]) == ("starting", 999, 2, 1)
        table = app.main.query_one("#table").render().plain
        assert "exit 1 @step 120: CUDA out of memory" in table


@run_async
async def test_q_after_the_run_ended_does_not_claim_training_continues():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        app.listener.on_event({"ts": 1000.0, "seq": 999, "kind": "run_ended", "component": None,
                               "exit_code": 0, "reason": "every component completed"})
        app.listener.on_connection("ended", "connection closed by the supervisor")
        await pilot.pause(0.1)
        await pilot.press("q")
        await pilot.pause()
    assert "training continues" not in app.exit_message
    assert "every component completed" in app.exit_message


@run_async
async def test_checkpoint_and_watched_artefacts_show_with_their_age():
    from rlsup.tui.widgets.progress import ProgressPanel

    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=(200, 50)) as pilot:
        await started(pilot)
        now = app.clock()
        app.listener.on_event({"ts": now, "seq": 0, "kind": "progress", "component": "trainer", "step": 131,
                               "total": 200, "checkpoint": {"step": 130, "path": "w/step_130", "mtime": now - 35},
                               "watch": {"/w/rollouts": {"step": 132, "mtime": now - 2}}})
        await pilot.pause(0.2)
        panel = app.screen.query_one(ProgressPanel)
        text = panel.render().plain
        assert "checkpoint step 130 (35s ago)" in text and "rollouts step 132 (2s ago)" in text
        await pilot.press("3")
        await pilot.press("u")
        assert "step 130" in app.screen.question


@run_async
async def test_the_trainers_step_says_which_weights_made_its_samples():
    """Issue 42: the trainer's progress metrics count the step's samples by the weights that made them."""
    from rlsup.tui.widgets.progress import ProgressPanel

    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=(200, 50)) as pilot:
        await started(pilot)
        app.listener.on_event({"ts": app.clock(), "seq": 0, "kind": "progress", "component": "trainer", "step": 131,
                               "total": 200, "metrics": {"reward": 0.5, "off_policy": 1.0, "off_policy_samples": 12.0,
                                                         "straddled_samples": 3.0, "mixed_samples": 0.0}})
        await pilot.pause(0.2)
        text = app.screen.query_one(ProgressPanel).render().plain
        assert "weights: off_policy 1 · 12 samples by older weights · 3 across a reload · 0 mixed" in text, text
        assert text.count("weights:") == 1  # the other components report no such metrics


@run_async
async def test_lines_pushed_before_the_snapshot_keep_the_table_order_and_are_not_lost():
    """The subscribe reply and the pushes after it share a connection: lines can reach the
    listener before the snapshot. Panes still follow the table's order and the lines stay."""
    import asyncio

    from rlsup.tui.app import RlsupApp

    snap = fake.normal_run()

    class EarlySession(fake.FakeSession):
        async def run(self) -> None:
            self.listener.on_connection("connecting", "")
            for e in snap["events"]:
                self.listener.on_event(e)
            self.listener.on_logs("trainer", 40, ["pushed before the snapshot arrived"])
            await asyncio.sleep(0.2)  # a few flush ticks go by
            self.listener.on_snapshot(snap, False)
            self.listener.on_connection("attached", "pod-1")
            await self._stop.wait()

    app = RlsupApp(lambda listener: EarlySession(listener, snap), clock=lambda: fake.NOW, timefmt=fake.utc_hms)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.main
        for _ in range(100):  # the snapshot comes 0.2 s in; a loaded machine takes longer to apply it
            await pilot.pause(0.1)
            if screen.panes:
                break
        assert list(screen.panes) == fake.COMPONENTS
        lines = screen.panes["trainer"].view.lines
        assert lines[-1] == "pushed before the snapshot arrived" and len(lines) == 41


@run_async
async def test_t_asks_the_supervisor_for_the_stacks_and_shows_them():
    from rlsup.tui.screens import StacksScreen

    app = fake.make_app(fake.normal_run())
    app.session.replies["stack"] = {"ok": True, "component": "trainer", "attempt": 1,
                                    "lines": ["stack: 7 ranks (0-2,4-7) in all_reduce at train.py:212",
                                              "stack: rank 3 in load_batch at data.py:88",
                                              "stacks: /run/stacks/trainer.1.txt"],
                                    "processes": [{"pid": 10, "name": "python", "rank": 3, "threads": 2, "error": None}]}
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("3", "t")
        await pilot.pause()
        assert app.session.commands == [("stack", "trainer", {})]  # no question: it changes nothing
        assert isinstance(app.screen, StacksScreen)
        shown = str(app.screen.query_one("VerticalScroll Static").render())
        assert "rank 3 in load_batch at data.py:88" in shown and "/run/stacks/trainer.1.txt" in shown
        await pilot.press("escape")
        app.session.replies["stack"] = {"ok": False, "error": "trainer is stopped: it has no process"}
        await pilot.press("t")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        assert any("no process" in n for n in notes(app)), notes(app)
