"""One version: what `rlsup --version`, the lock file and the journal say is what pyproject.toml ships."""

from __future__ import annotations

import re
from pathlib import Path

from rlsup.supervisor.records.version import VERSION


def test_the_version_is_the_packages():
    pyproject = (Path(__file__).parents[3] / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"$', pyproject, re.M).group(1) == VERSION
