"""The core stays headless: no module of rlsup.supervisor pulls in textual, rich or torch.

Each module is imported alone, in a child forked from one bare interpreter (what a fresh `python -c
"import MODULE"` would load, at a fraction of the cost of 130 interpreters)."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest

import rlsup.supervisor

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(rlsup.supervisor.__path__, prefix="rlsup.supervisor.")
    if not m.name.endswith(".__main__")  # runs the CLI when imported
)

# One interpreter; for each module a forked child imports it and reports the UI and torch modules it brought in
# (or the error that stopped it). The parent first loads what most modules need (the list after "--"): the
# children share that cost, and hide nothing, since what the parent loaded is in each child's sys.modules too.
PROBE = """
import json, os, sys
cut = sys.argv.index("--") if "--" in sys.argv else len(sys.argv)
for common in sys.argv[cut + 1:]:
    __import__(common)
out = {}
for module in sys.argv[1:cut]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            __import__(module)
            said = ",".join(sorted(m for m in sys.modules if m.split(".")[0] in ("textual", "rich", "torch", "pynvml")))
        except BaseException as e:
            said = f"ERROR {type(e).__name__}: {e}"
        os.write(w, said.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out[module] = f.read().decode()
    os.waitpid(pid, 0)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def imported() -> dict[str, str]:
    common = ["asyncio", "ssl", "yaml", "pydantic", "rlsup.supervisor.records.events", "rlsup.supervisor.config.model"]
    r = subprocess.run([sys.executable, "-c", PROBE, *MODULES, "--", *common], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("module", MODULES)
def test_core_module_does_not_import_ui_or_torch(module, imported):
    assert not imported[module].startswith("ERROR"), f"import {module}: {imported[module]}"
    assert imported[module] == "", f"{module} imports {imported[module]}"


def test_the_probe_sees_an_import_of_the_ui():
    """The forked probe is not blind: a module that does import rich is reported with it."""
    r = subprocess.run([sys.executable, "-c", PROBE, "rich.text", "json"], capture_output=True, text=True, timeout=60)
    said = json.loads(r.stdout)
    assert "rich" in said["rich.text"].split(",") and said["json"] == "", said


def test_all_core_modules_found():
    assert {"rlsup.supervisor.run.run", "rlsup.supervisor.cli", "rlsup.supervisor.config.model"} <= set(MODULES)
