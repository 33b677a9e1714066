"""The code stays as CI checks it: `ruff check` is clean ([tool.ruff] in pyproject.toml), including
mccabe's C901: no function of supervisor/, tui/ or trainer/ over a cyclomatic complexity of 10."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> str:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("ruff is missing: install the test extra (pip install -e '.[test]')")
    return exe


def test_ruff_is_clean():
    r = subprocess.run([_ruff(), "check", "--no-cache", "--output-format", "concise"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def _branchy(n: int) -> str:
    """A function of cyclomatic complexity ``n + 1``."""
    body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(n))
    return f"def f(x):\n{body}    return -1\n"


@pytest.mark.parametrize(("path", "branches", "flagged"), [
    ("supervisor/new_module.py", 10, True),  # complexity 11
    ("supervisor/new_module.py", 9, False),  # complexity 10: allowed
    ("tui/new_widget.py", 10, True),
    ("trainer/new_step.py", 10, True),
    ("tests/test_new.py", 10, False),  # tests may be long
])
def test_a_function_over_complexity_10_fails_the_check(path, branches, flagged):
    r = subprocess.run([_ruff(), "check", "--no-cache", "--output-format", "concise", "--stdin-filename", path, "-"],
                       cwd=ROOT, input=_branchy(branches), capture_output=True, text=True)
    assert ("C901" in r.stdout) == flagged, r.stdout + r.stderr
