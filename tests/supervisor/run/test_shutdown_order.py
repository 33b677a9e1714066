"""Issue 26 item 7: shutting down a long dependency chain costs time linear in its length.

``Run._shutdown`` is driven on components that already ended (what a run whose stack completed
has at ``down``), without processes: the work is counted as the Python lines it executes (a
tracer), never timed. The old wave loop looked at every remaining component's dependents for
every wave: cubic in a chain's length (2,000 chained components took 300 s after the last one
completed).
"""

from __future__ import annotations

import asyncio
import sys
from types import SimpleNamespace

import pytest

from rlsup.supervisor.config.loader import load_config
from rlsup.supervisor.run.ending import Ending
from rlsup.supervisor.run.run import Run


class Ended:
    """A component that already ended: Shutdown changes nothing, nothing of it is alive."""

    def __init__(self, name: str, log: list[str]):
        self.name, self.log = name, log
        self.state, self.busy = "completed", False

    def handle(self, _input) -> None:
        self.log.append(self.name)

    async def await_cleanups(self) -> None:
        return None

    def flush_progress(self) -> None:
        pass


def _chain(tmp_path, n: int):
    lines = ["components:"]
    for i in range(n):
        lines.append(f"  c{i}:\n    command: ['true']" + (f"\n    depends_on: [c{i - 1}]" if i else ""))
    path = tmp_path / "chain.yaml"
    path.write_text("\n".join(lines) + "\n")
    return load_config(path, run_dir=str(tmp_path / "run"))


def _stub(cfg, stopped: list[str]):
    events: list = []
    stub = SimpleNamespace(cfg=cfg, components={n: Ended(n, stopped) for n in cfg.components}, exit_code=0,
                           end_reason="down", outcome="stopped", root=None, emit=events.append, _last_net=lambda: [],
                           _write_state=lambda force=False: None, end=Ending())
    stub._wait_quiet = lambda c: Run._wait_quiet(stub, c) if hasattr(Run, "_wait_quiet") else None
    stub._why_stopping = lambda reason: Run._why_stopping(stub, reason)
    return stub, events


def _shutdown(stub) -> int:
    """Run ``Run._shutdown`` on ``stub``; the lines of Python it executed."""
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    async def main():
        stub.loop = asyncio.get_running_loop()
        sys.settrace(tracer)
        try:
            await Run._shutdown(stub)
        finally:
            sys.settrace(None)

    asyncio.run(main())
    return count


@pytest.mark.parametrize("n", [50, 200])
def test_shutdown_of_a_chain_is_linear(tmp_path, n: int) -> None:
    cfg = _chain(tmp_path, n)
    stopped: list[str] = []
    stub, events = _stub(cfg, stopped)
    lines = _shutdown(stub)
    assert stopped == [f"c{i}" for i in reversed(range(n))]  # dependents first, one after another
    assert events[-1].kind == "run_ended"
    # Linear: a few dozen lines per component (the old loop ran ~n**3 / 3: 2.7 million at n = 200).
    assert lines < 100 * n, f"{lines} lines of Python for a chain of {n}"


def test_a_chain_of_two_thousand_shuts_down(tmp_path) -> None:
    cfg = _chain(tmp_path, 2000)
    stopped: list[str] = []
    stub, events = _stub(cfg, stopped)
    asyncio.run(_run_untraced(stub))
    assert len(stopped) == 2000 and stopped[0] == "c1999" and stopped[-1] == "c0"
    assert events[-1].kind == "run_ended"


def test_a_diamond_stops_each_component_after_all_its_dependents(tmp_path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text("components:\n  a: {command: ['true']}\n  b: {command: ['true'], depends_on: [a]}\n"
                    "  c: {command: ['true'], depends_on: [a]}\n  d: {command: ['true'], depends_on: [b, c, c]}\n")
    cfg = load_config(path, run_dir=str(tmp_path / "run"))
    stopped: list[str] = []
    stub, _ = _stub(cfg, stopped)
    asyncio.run(_run_untraced(stub))
    assert stopped[0] == "d" and stopped[-1] == "a" and set(stopped[1:3]) == {"b", "c"}


async def _run_untraced(stub) -> None:
    stub.loop = asyncio.get_running_loop()
    await Run._shutdown(stub)
