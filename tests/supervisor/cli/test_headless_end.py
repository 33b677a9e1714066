"""`rlsup up --headless` says how its supervision ended: a hand-over (`rlsup restart-supervisor`) leaves the
components running, and the last line says so, not "run ended"."""

from __future__ import annotations

from typing import Any

import pytest

from rlsup.supervisor.cli import run_cmds
from rlsup.supervisor.config.loader import load_config
from rlsup.supervisor.run.run import Run


def _headless(tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], end: Any) -> str:
    path = tmp_path / "c.yaml"
    path.write_text("components:\n  a: {command: ['true']}\n")
    cfg = load_config(path, run_dir=str(tmp_path / "run"))
    run = Run(cfg, serve=False)
    end(run)

    async def supervise(r: Run, *, daemon: bool) -> int:
        return 0

    monkeypatch.setattr(run_cmds, "_prepared_run", lambda cfg, **kw: run)
    monkeypatch.setattr(run_cmds, "_supervise", supervise)
    assert run_cmds.run_headless(cfg) == 0
    return capsys.readouterr().out.splitlines()[-1]


def test_a_handover_says_the_components_run_on(tmp_path, monkeypatch, capsys) -> None:
    def handed_over(run: Run) -> None:
        run.end.handover = True

    assert "supervisor handed over; the components run on" in _headless(tmp_path, monkeypatch, capsys, handed_over)


def test_an_end_says_its_reason(tmp_path, monkeypatch, capsys) -> None:
    def stopped(run: Run) -> None:
        run.end.request("stopped by `rlsup down`", by_user=True, preempted=False)

    assert _headless(tmp_path, monkeypatch, capsys, stopped).startswith("rlsup: stopped by `rlsup down`; logs and")
