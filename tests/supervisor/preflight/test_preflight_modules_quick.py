"""Issue 26 item 7: `up`'s quick preflight checks that ``python -m`` modules import, with the
component's own interpreter.

With the wrong virtualenv, ``rlsup up -d`` used to say it was supervising and the run was fatal a
second and a half later. Now ``up`` refuses, naming the file and line of the command and what to do.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlsup.supervisor.config.loader import load_config
from rlsup.supervisor.preflight.checks import run_checks
from rlsup.supervisor.rundir.layout import RunPaths, is_locked
from tests.conftest import rlsup, write_config


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory):
    """A virtualenv with nothing installed: the "wrong venv" of a user's run."""
    d = tmp_path_factory.mktemp("venv") / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(d)], check=True)
    return d / "bin" / "python"


CONFIG = """
name: wrongvenv
components:
  inference:
    command: ["{py}", "-c", "import time; time.sleep(1000)"]
  trainer:
    depends_on: [inference]
    command: ["%s", "-m", "rlsup.trainer.train", "--steps", "10"]
  helper:
    command: ["{py}", "-m", "rlsup.trainer.no_such_module"]
  fine:
    command: ["{py}", "-m", "rlsup.trainer.train", "--help"]
"""


def test_quick_checks_find_modules_the_interpreter_cannot_import(tmp_path, bare_venv) -> None:
    path = write_config(tmp_path, CONFIG % bare_venv)
    cfg = load_config(path, run_dir=str(tmp_path / "run"))
    errors = {f.component: f for f in run_checks(cfg, fast=True) if f.severity == "error"}
    assert set(errors) == {"trainer", "helper"}, errors
    t = errors["trainer"]
    assert "module 'rlsup.trainer.train' is not importable by" in t.message and str(bare_venv) in t.message
    assert "package 'rlsup' is not installed there" in t.message
    assert t.where == f"{path}:8", t.where  # the line of the trainer's command
    assert "pip install" in t.fix or "virtualenv" in t.fix, t.fix
    h = errors["helper"]
    assert "'rlsup' is installed there, but has no 'rlsup.trainer.no_such_module'" in h.message, h.message
    assert h.where == f"{path}:10", h.where


def test_up_d_refuses_the_wrong_venv_before_starting_anything(tmp_path, bare_venv) -> None:
    path = write_config(tmp_path, CONFIG % bare_venv)
    run_dir = tmp_path / "run"
    r = rlsup("up", str(path), "-d", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
    try:
        assert r.returncode != 0, r.stdout + r.stderr
        assert "supervising" not in r.stdout + r.stderr
        assert f"{path}:8" in r.stderr and "rlsup.trainer.train" in r.stderr, r.stderr
        assert "not starting" in r.stderr, r.stderr
        assert not is_locked(RunPaths(run_dir))
    finally:
        if is_locked(RunPaths(run_dir)):
            rlsup("down", "--run-dir", str(run_dir), timeout=60)
