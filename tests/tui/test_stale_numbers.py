"""Stale numbers: with no new step, rate and ETA decay and then go; a stall flag says how long the
stall has lasted, not only the threshold it passed."""

from __future__ import annotations

import fake
from fake import NOW, run_async, started

from rlsup.tui.widgets.component_table import ComponentTable
from rlsup.tui.widgets.flags import FlagsStrip


def test_current_rate_decays_then_vanishes():
    from rlsup.supervisor.records.progress import current_rate

    # 3.27 steps/s, step 340 of 500: fresh, it stands.
    assert current_rate(3.27, 49.0, 1000.0, 340, 500, 1002.0) == (3.27, 49.0)
    # 20 s without a step: at most one step per 20 s, and the ETA grows to match.
    rate, eta = current_rate(3.27, 49.0, 1000.0, 340, 500, 1020.0)
    assert rate == 1 / 20 and eta == 160 * 20
    # Minutes without a step: no rate, no ETA (not "3.27/s ETA 49s").
    assert current_rate(3.27, 49.0, 1000.0, 340, 500, 1000.0 + 180) == (None, None)
    # A slow trainer (a step a minute) is not "stalled" a few seconds after its last step.
    assert current_rate(1 / 60, 600.0, 1000.0, 10, 20, 1000.0 + 90) == (1 / 60, 600.0)
    assert current_rate(None, None, 1000.0, 1, 2, 5000.0) == (None, None)


def _hung_run() -> dict:
    snap = fake.normal_run()
    c = snap["state"]["components"]["trainer"]
    c.update(rate=3.27, eta_s=49.0, step=340, total=500, last_step_at=NOW - 300)
    c["flags"] = [{"type": "stall", "message": "no new step for 20s (last step 340, stall_after 20s)",
                   "evidence": [], "action": "none (watching)", "ts": NOW - 280}]
    return snap


def _cells(app, name: str) -> dict:
    table = app.main.query_one(ComponentTable)
    return next(cells for n, _, cells in table.rows if n == name)


@run_async
async def test_a_hung_trainer_shows_no_rate_and_how_long_it_has_stalled():
    app = fake.make_app(_hung_run())
    async with app.run_test(size=(160, 50)) as pilot:
        await started(pilot)
        await pilot.pause(0.1)
        cells = _cells(app, "trainer")
        assert "3.27" not in cells["rate"] and cells["ETA"] == "-"
        strip = app.main.query_one(FlagsStrip)
        text = strip.render().plain
        assert "no new step for 5m00s" in text and "no new step for 20s" not in text
        # A new step: the rate is back.
        app.session.event("progress", "trainer", step=341, total=500, rate=3.27, eta_s=48.7, last_step_at=NOW)
        await pilot.pause(0.2)
        assert _cells(app, "trainer")["rate"] == "3.27/s"
