"""The code type-checks: `mypy` from the repo root (configured in pyproject.toml, [tool.mypy]) finds
0 errors in rlsup.supervisor and rlsup.tui, with the lifecycle, detectors, events and state modules
held to the flags of `mypy --strict`. .ci/run runs the same command; this test makes the README's
test command guard it too."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_finds_no_errors():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (it is in the test extra: pip install -e '.[test]')")
    # The same command as .ci/run; the incremental cache (.mypy_cache/) makes a second run take ~1 s.
    r = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = r.stdout[-8000:] + r.stderr[-2000:]
    assert r.returncode == 0, out
    assert "Success: no issues found" in r.stdout, out
