"""The fleet's `v` shows each pod's own evidence, and an ended pod says when it ended (issue 27 item 11)."""

from __future__ import annotations

from rich.text import Text

NOTE = "ended at 2026-11-22 10:37:08: trainer fatal: boom (exit code 1)"
POD = {
    "label": "pod-a", "connected": True, "connection": "ended", "error": None, "run": {"name": "r"}, "gpus": [],
    "ended": {"note": NOTE},
    "components": {
        "trainer": {"state": "fatal", "flags": [{"type": "step_crash", "message": "died at step 57 twice",
                                                 "evidence": ["step 57: RuntimeError: boom"], "ts": 20.0}],
                    "last_exit": {"exit_code": 1, "signal": None, "ts": 10.0,
                                  "diagnosis": {"category": "python_exception", "summary": "RuntimeError: boom",
                                                "evidence": ["Traceback (most recent call last):",
                                                             "RuntimeError: boom"]}}},
        "inference": {"state": "stopped", "flags": [], "last_exit": {"exit_code": 0, "diagnosis": {"category": "none"}}},
    },
}


def test_pod_evidence_lists_flags_and_failed_exits_newest_first():
    from rlsup.tui.fleet import pod_evidence

    got = pod_evidence(POD)
    assert got == [("trainer", "step_crash: died at step 57 twice", ["step 57: RuntimeError: boom"]),
                   ("trainer", "exit 1: RuntimeError: boom",
                    ["Traceback (most recent call last):", "RuntimeError: boom"])]


def test_the_evidence_screen_shows_each_pod():
    import asyncio

    from textual.app import App
    from textual.widgets import Static

    from rlsup.tui.fleet import FleetFlagsScreen

    async def go() -> str:
        app = App()
        async with app.run_test() as pilot:
            app.push_screen(FleetFlagsScreen([], lambda ts: "t", [POD]))
            await pilot.pause()
            return "\n".join(str(w.render()) for w in app.screen.query(Static))

    text = asyncio.run(go())
    assert "pod-a" in text and NOTE in text
    assert "step 57: RuntimeError: boom" in text and "Traceback (most recent call last):" in text


def test_an_ended_pod_shows_ended_at_in_its_row():
    from rlsup.tui.fleet import pod_cells

    cell = pod_cells(POD, False)["conn"]
    assert isinstance(cell, Text) and str(cell).startswith("ended at 2026-11-22 10:37:08")
