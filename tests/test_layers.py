"""The house plan holds: import-linter's contracts (pyproject.toml, [tool.importlinter]) are kept.

rlsup.supervisor is layered (cli > render > client protocol > headless core) and every module of it
is in a layer; nothing in it imports textual, rich, torch or the TUI (the CLI starts the TUI); the TUI
reaches the engine only through the client protocol; the reference stack stands alone.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports is missing: install the test extra (pip install -e '.[test]')")
    r = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def _supervisor_layers() -> dict:
    from importlinter import api

    found = [c for c in api.read_configuration(str(ROOT / "pyproject.toml"))["contracts_options"]
             if c.get("type") == "layers" and "rlsup.supervisor" in (c.get("containers") or [])]
    assert len(found) == 1, "pyproject.toml needs one layers contract with containers = ['rlsup.supervisor']"
    return found[0]


def test_every_supervisor_module_is_in_a_layer():
    """A new module (or subpackage) of supervisor/ cannot fall outside the plan: each is named in a
    layer, and the contract is exhaustive, so lint-imports also breaks for one that is not."""
    contract = _supervisor_layers()
    assert str(contract.get("exhaustive")).lower() == "true"
    named = {tail.strip().strip("()") for layer in contract["layers"]
             for tail in str(layer).replace("|", ":").split(":")}
    on_disk = {p.stem for p in (ROOT / "supervisor").glob("*.py") if p.stem not in ("__init__", "__main__")}
    on_disk |= {p.parent.name for p in (ROOT / "supervisor").glob("*/__init__.py")}
    missing = sorted(on_disk - named)
    assert not missing, f"modules of supervisor/ in no layer of pyproject.toml's layers contract: {missing}"
    assert not sorted(named - on_disk), "layers name modules that do not exist"
