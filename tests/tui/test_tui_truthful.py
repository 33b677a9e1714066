"""Small truths of the TUI (issue 27, item 11): "stale" stays in view while reconnecting; command
keys on an ended run say why nothing happens; the end of a run says how it ended; artefacts on an
ended run say when they were written; the footer at 80x24 holds whole keys only; `d` on a component
that recovered explains the crash, not its final clean exit."""

from __future__ import annotations

import fake
from fake import NOW, notes, run_async, started

from rlsup.tui.screens import FailureScreen
from rlsup.tui.widgets.header import RunHeader
from rlsup.tui.widgets.progress import ProgressPanel


@run_async
async def test_stale_stays_in_view_at_80_columns_while_reconnecting():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot)
        app.listener.on_connection("reconnecting", "[Errno 111] Connection refused: no supervisor is listening on "
                                                   "/workspace/runs/demo/rlsup.sock; retrying in 10.0s")
        await pilot.pause(0.2)
        shown = app.main.query_one(RunHeader).render().plain[:80]
        assert "stale: data from" in shown, shown


@run_async
async def test_command_keys_on_an_ended_run_say_why_and_what_to_run():
    app = fake.make_app(fake.ended_run())
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot)
        for key in ("r", "u", "s"):
            await pilot.press(key)
            await pilot.pause(0.05)
        said = notes(app)
        assert len(said) == 3, said
        for text in said:
            assert "read-only" in text and "rlsup up" in text and "--resume" in text
            assert "trainer fatal" in text  # how it ended
        assert app.session.commands == []


@run_async
async def test_the_end_of_a_run_says_how_it_ended_not_connection_closed():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot)
        app.listener.on_event({"ts": NOW, "seq": 999, "kind": "run_ended", "component": None,
                               "exit_code": 0, "reason": "every component completed"})
        app.listener.on_connection("ended", "connection closed by the supervisor")
        await pilot.pause(0.1)
        said = " | ".join(notes(app))
        assert "every component completed" in said
        assert "connection closed" not in said


@run_async
async def test_artefacts_of_an_ended_run_say_when_they_were_written():
    snap = fake.ended_run()
    snap["state"]["components"]["trainer"]["checkpoint"] = {"step": 100, "mtime": NOW - 3 * 3600}
    app = fake.make_app(snap)
    async with app.run_test(size=(160, 50)) as pilot:
        await started(pilot)
        await pilot.pause(0.1)
        text = app.main.query_one(ProgressPanel).render().plain
        when = fake.utc_hms(NOW - 3 * 3600)
        assert f"checkpoint step 100 (written {when}, 3h00m ago)" in text, text


@run_async
async def test_the_footer_at_80x24_holds_whole_keys_only():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot)
        await pilot.pause(0.2)
        keys = list(app.main.query("FooterKey"))
        assert keys and all(k.region.right <= 80 and k.region.width > 0 for k in keys)
        assert any(k.action == "help" for k in keys)  # ? lists the keys that did not fit
        # Nothing overlaps (a key cut by the next one is cut too).
        spans = sorted((k.region.x, k.region.right) for k in keys)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))


@run_async
async def test_d_on_a_component_that_recovered_shows_the_crash():
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=(140, 50)) as pilot:
        await started(pilot)
        diag = {"category": "cuda_oom", "summary": "CUDA out of memory", "cause": "CUDA out of memory",
                "evidence": ["torch.OutOfMemoryError: CUDA out of memory."]}
        app.session.event("exited", "trainer", ts=NOW - 60, exit_code=1, signal=None, uptime_s=300.0, step=57,
                          diagnosis=diag, attempt=1)
        app.session.event("started", "trainer", ts=NOW - 50, pid=4242, attempt=2, resume={"step": 50})
        app.session.event("exited", "trainer", ts=NOW - 5, exit_code=0, signal=None, uptime_s=45.0, step=120,
                          diagnosis=None, attempt=2)
        app.session.event("completed", "trainer", ts=NOW - 5)
        await pilot.pause(0.1)
        await pilot.press("3", "d")
        await pilot.pause(0.1)
        assert isinstance(app.screen, FailureScreen)
        body = app.screen.body().plain
        assert "exit code 1" in body and "CUDA out of memory" in body
        assert "it recovered" in body


def footer_keys(app) -> dict[str, tuple[str, bool]]:
    """The footer's keys as shown: label -> (description, greyed)."""
    return {k.key_display: (k.description, k.has_class("-disabled")) for k in app.main.query("FooterKey")}


@run_async
async def test_the_footer_shows_the_keys_of_the_context_and_greys_commands_when_the_run_ends():
    # Keys are updated in place (Textual's footer remounted them all on every focus change, which under a
    # log flood held zoom and pane switches for 65-450 ms); what they show must follow all the same.
    app = fake.make_app(fake.normal_run())
    async with app.run_test(size=(200, 50)) as pilot:
        await started(pilot)
        await pilot.pause(0.1)
        table, widgets = footer_keys(app), list(app.main.query("FooterKey"))
        assert table["↑/k"] == ("select", False) and table["enter"] == ("log keys", False), table
        assert table["r"] == ("restart", False)
        await pilot.press("z")  # zoomed: the arrows scroll the log
        await pilot.pause(0.1)
        zoomed = footer_keys(app)
        assert zoomed["↑/k"] == ("scroll", False) and zoomed["esc"] == ("table keys", False), zoomed
        assert "enter" not in zoomed
        assert list(app.main.query("FooterKey")) == widgets  # the same widgets, not remounted
        await pilot.press("tab", "z")
        await pilot.pause(0.1)
        assert footer_keys(app) == table
        app.session.event("run_ended", None, ts=NOW, exit_code=0, reason="all components completed")
        await pilot.pause(0.2)
        ended = footer_keys(app)
        assert ended["r"] == ("restart", True) and ended["Q"] == ("stop all", True), ended
        assert ended["z"] == ("zoom", False)
