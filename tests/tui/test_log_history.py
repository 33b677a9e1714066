"""Logs as deep as the file: the TUI over a real control socket pages a component's log from disk.

A real supervisor writes a log longer than the TUI keeps (rotated into several files); the TUI,
attached through the same control server `rlsup attach` starts for an ended run, reaches line 1
with Home, finds a line only the file holds, keeps its memory bound and comes back to the live lines.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fake import run_async  # noqa: E402

from rlsup.supervisor.cli.attach import serve_archive  # noqa: E402
from rlsup.supervisor.client.session import Session, unix_connector  # noqa: E402
from rlsup.tui.app import RlsupApp  # noqa: E402
from tests.conftest import write_config  # noqa: E402

N = 12_000
CONFIG = """
name: deeplog
logs: {{max_bytes: 200000, backups: 10, ring_lines: 1000}}
components:
  writer:
    command: ["{py}", "-u", "-c", "import sys\\nfor i in range(1, {n} + 1):\\n    sys.stdout.write(f'line {{i:06d}} of the writer {{\\"x\\" * (i % 50)}}\\\\n')\\nsys.stdout.flush()"]
"""


@pytest.fixture(scope="module")
def ended_run(tmp_path_factory):
    """A run whose one component wrote N lines (log rotated into several files), ended."""
    from tests.conftest import Headless

    tmp = tmp_path_factory.mktemp("deeplog")
    cfg = write_config(tmp, CONFIG.format(py=sys.executable, n=N))
    h = Headless(cfg, tmp / "run")
    assert h.wait(120) == 0, h.output
    logs = sorted(os.listdir(tmp / "run" / "logs"))
    assert "writer.log.1" in logs, logs  # rotated: the first line is in an older file
    return tmp / "run"


async def _until(pilot, pred, what: str, timeout: float = 30.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def _app(sock: Path) -> RlsupApp:
    return RlsupApp(lambda listener: Session(unix_connector(sock, "tui"), listener), target="test",
                    attach_hint="rlsup attach", max_lines=3000)


def _shown(view) -> list[str]:
    """The lines on the pane's screen rows now."""
    return [view.lines[view.locate(r)[0]] for r in range(view.top, min(view.top + view.height, view.total_rows))]


@run_async
async def test_home_reaches_line_one_and_search_covers_the_whole_file(ended_run):
    with serve_archive(ended_run) as sock:
        app = _app(sock)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.main
            await _until(pilot, lambda: "writer" in screen.panes and screen.panes["writer"].view.lines, "the pane")
            pane = screen.panes["writer"]
            v = pane.view
            assert not any("line 000001 " in x for x in v.lines)  # the view holds only the tail
            await _until(pilot, lambda: v.older_on_disk > 0, "the title to learn of older lines")
            assert "older lines on disk (Home)" in pane.title.text

            await pilot.press("enter", "home")
            await _until(pilot, lambda: v.hist is not None and v.lines and v.lines[0].startswith("line 000001 "),
                         "line 1 after Home")
            assert _shown(v)[0].startswith("line 000001 ")
            assert "FROM DISK: lines 1–" in pane.title.text and f"of {N:,}" in pane.title.text
            assert len(v.lines) <= app.max_lines

            # Paging down reads on from disk and never holds more than the bound.
            for _ in range(12):
                await pilot.press("pagedown")
                await _until(pilot, lambda: v.hist is None or not v.hist.loading, "a page")
            assert v.hist is not None and len(v.lines) <= app.max_lines
            assert v.lines[v.locate(v.top)[0]].startswith("line 000") and v.top > 0

            # End: back to the live lines, following.
            await pilot.press("end")
            await pilot.pause()
            assert v.hist is None and v.follow
            assert v.lines[-1].startswith(f"line {N:06d} ")

            # Search: a line that only the file holds.
            await pilot.press("slash")
            await pilot.press(*"line 000042 ")
            await pilot.press("enter")
            await _until(pilot, lambda: v.hist is not None and v.current is not None, "the match from disk")
            assert v.lines[v.current - v.dropped].startswith("line 000042 ")
            assert any(x.startswith("line 000042 ") for x in _shown(v))
            assert "FROM DISK" in pane.title.text
            # n: the next older match... there is none; the search wraps to the newest lines held.
            await pilot.press("q")


@run_async
async def test_scrolling_up_past_the_oldest_line_held_reads_on_from_disk(ended_run):
    with serve_archive(ended_run) as sock:
        app = _app(sock)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.main
            await _until(pilot, lambda: "writer" in screen.panes and screen.panes["writer"].view.lines, "the pane")
            v = screen.panes["writer"].view
            oldest = v.lines[0]
            await pilot.press("enter")
            v.home()  # the top of what is held, without Home's jump to line 1
            await pilot.press("pageup")
            await _until(pilot, lambda: v.hist is not None, "the page above")
            n = int(oldest.split()[1])
            # The window ends just above the oldest line held, and shows the lines just before it.
            assert v.lines[-1].startswith(f"line {n - 1:06d} ")
            assert _shown(v)[-1].startswith(f"line {n - 1:06d} ")
            # Down again past the window's end: the live lines, from where they start.
            await pilot.press("pagedown")
            await _until(pilot, lambda: v.hist is None, "back in the live lines")
            assert v.lines[v.locate(v.top)[0]] == oldest
