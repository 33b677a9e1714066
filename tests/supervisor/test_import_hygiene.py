"""The core stays headless: no module of rlsup.supervisor pulls in textual, rich or torch."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import rlsup.supervisor

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(rlsup.supervisor.__path__, prefix="rlsup.supervisor.")
    if not m.name.endswith(".__main__")  # runs the CLI when imported
)


@pytest.mark.parametrize("module", MODULES)
def test_core_module_does_not_import_ui_or_torch(module):
    code = (f"import sys, {module}\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich', 'torch', 'pynvml'))\n"
            "print(','.join(bad))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", f"{module} imports {r.stdout.strip()}"


def test_all_core_modules_found():
    assert {"rlsup.supervisor.run.run", "rlsup.supervisor.cli", "rlsup.supervisor.config.model"} <= set(MODULES)
