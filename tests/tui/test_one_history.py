"""One history: an ended run, and a run resumed with `--resume`, show the whole run's metric history
(charts) and event timeline, the same as a TUI attached to the live run from the start.

Real supervisor (`rlsup up -d`), real control socket, the TUI's charts screen rendered by Textual's
pilot on the live run, then on the ended run (`rlsup attach`'s read-only server), then resumed."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from rlsup.supervisor.cli.attach import serve_archive  # noqa: E402
from rlsup.supervisor.client.session import Client, Session, unix_connector  # noqa: E402
from rlsup.supervisor.rundir.archive import Archive  # noqa: E402
from rlsup.tui.app import RlsupApp  # noqa: E402
from rlsup.tui.screens import ChartsScreen, TimelineScreen  # noqa: E402
from rlsup.tui.widgets.chart import MetricChart  # noqa: E402
from tests.conftest import rlsup, wait_for, write_config  # noqa: E402

STEPS = 700  # more than the 256 points a history keeps: it has been compacted
CONFIG = """
name: onehistory
components:
  trainer:
    command: ["{py}", "-u", "-c", "import os, time\\nif not os.path.exists('trained'):\\n    for i in range(1, {n} + 1):\\n        print(f'Step {{i}}/{n} | reward {{(i % 17) / 17:.4f}} | loss {{1 / i:.5f}}', flush=True)\\n        time.sleep(0.003)\\n    open('trained', 'w').close()\\ntime.sleep(3600)"]
    progress: {{preset: rlsup}}
"""


async def _until(pilot, pred, what: str, timeout: float = 30.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


async def _charts(sock: Path) -> tuple[dict[str, str], list[tuple]]:
    """What the charts screen shows for the trainer (metric -> rendered text), and the timeline."""
    app = RlsupApp(lambda listener: Session(unix_connector(sock, "tui"), listener), target="t", attach_hint="")
    async with app.run_test(size=(140, 60)) as pilot:
        await _until(pilot, lambda: "trainer" in app.main.panes, "the trainer's pane")
        timeline = [(e.seq, e.kind, e.component) for e in app.model.timeline]
        await pilot.press("m")
        await _until(pilot, lambda: isinstance(app.screen, ChartsScreen) and len(app.screen.query(MetricChart)) >= 2,
                     "the charts")
        await pilot.pause(0.2)
        charts = {ch.metric: ch.render().plain for ch in app.screen.query(MetricChart)}
        await pilot.press("escape", "e")
        await _until(pilot, lambda: isinstance(app.screen, TimelineScreen), "the timeline")
        await pilot.press("escape", "q")
    return charts, timeline


def _snapshot(sock: Path) -> dict:
    async def go():
        c = await Client.open_unix(sock, name="test")
        try:
            return await c.snapshot()
        finally:
            await c.close()

    return asyncio.run(go())


def test_ended_and_resumed_runs_show_the_whole_history(tmp_path, daemon):
    cfg = write_config(tmp_path, CONFIG.format(py=sys.executable, n=STEPS))
    d = daemon(cfg)
    wait_for(lambda: d.sock.exists() and (_snapshot(d.sock)["state"]["components"]["trainer"].get("step") == STEPS),
             60, interval=0.3, what=f"step {STEPS}")
    live_state = _snapshot(d.sock)["state"]["components"]["trainer"]
    assert set(live_state["history"]) >= {"reward", "loss"}

    live_charts, live_timeline = asyncio.run(_charts(d.sock))
    for text in live_charts.values():
        assert f"–{STEPS}," in text and "points of 4 steps" in text  # the whole run, compacted

    r = d.cli("down", timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr

    # Ended: the state a read-only attach serves holds the same history, and the charts are the same.
    ended = Archive(d.run_dir).snapshot_state()["components"]["trainer"]
    assert ended["history"] == live_state["history"]
    with serve_archive(d.run_dir) as sock:
        ended_charts, ended_timeline = asyncio.run(_charts(sock))
    assert ended_charts == live_charts
    assert "keeps no full-run history" not in "".join(ended_charts.values())
    assert [x for x in ended_timeline if x[0] is not None][: len(live_timeline)] == live_timeline

    # Resumed: the new supervisor's charts and timeline start at the run's beginning, not at the resume.
    r = rlsup("up", str(cfg), "-d", "--resume", "--run-dir", str(d.run_dir), cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    wait_for(lambda: d.sock.exists(), 30, what="the resumed supervisor's socket")
    resumed = _snapshot(d.sock)
    assert resumed["state"]["components"]["trainer"]["history"] == live_state["history"]
    assert resumed["events"][0]["seq"] == 1 and resumed["events"][0]["kind"] == "run_started"
    resumed_charts, resumed_timeline = asyncio.run(_charts(d.sock))
    assert resumed_charts == live_charts
    assert resumed_timeline[: len(live_timeline)] == live_timeline


def test_a_run_taken_over_after_its_supervisor_died_shows_the_whole_history(tmp_path, daemon):
    import os
    import signal

    cfg = write_config(tmp_path, CONFIG.format(py=sys.executable, n=STEPS))
    d = daemon(cfg)
    wait_for(lambda: d.sock.exists() and (_snapshot(d.sock)["state"]["components"]["trainer"].get("step") == STEPS),
             60, interval=0.3, what=f"step {STEPS}")
    live = _snapshot(d.sock)
    trainer_pid = live["state"]["components"]["trainer"]["pid"]
    # state.json holds the history as of its last write: wait for it to have the last step.
    wait_for(lambda: (json.loads((d.run_dir / "state.json").read_text())["components"]["trainer"].get("step")
                      == STEPS), 30, interval=0.3, what="state.json at the last step")
    live_charts, live_timeline = asyncio.run(_charts(d.sock))
    os.kill(d.pid, signal.SIGKILL)  # the supervisor dies; the trainer runs on under its monitor
    wait_for(lambda: not d.sock.exists() or _gone(d.sock), 30, what="the dead supervisor's socket to stop answering")

    r = rlsup("up", str(cfg), "-d", "--run-dir", str(d.run_dir), cwd=tmp_path, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    wait_for(lambda: d.sock.exists() and not _gone(d.sock), 30, what="the new supervisor's socket")
    took = _snapshot(d.sock)
    assert took["state"]["components"]["trainer"]["pid"] == trainer_pid  # adopted, not restarted
    assert took["state"]["components"]["trainer"]["history"] == live["state"]["components"]["trainer"]["history"]
    charts, timeline = asyncio.run(_charts(d.sock))
    assert charts == live_charts
    assert timeline[: len(live_timeline)] == live_timeline


def _gone(sock: Path) -> bool:
    try:
        _snapshot(sock)
    except Exception:
        return True
    return False
