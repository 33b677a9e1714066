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
    assert not {p.stem for p in (ROOT / "supervisor").glob("*.py")} - {"__init__", "__main__"}, (
        "a module at the top of supervisor/: the folders are the floors (docs/architecture.md, Layout)")
    missing = sorted(on_disk - named)
    assert not missing, f"modules of supervisor/ in no layer of pyproject.toml's layers contract: {missing}"
    assert not sorted(named - on_disk), "layers name modules that do not exist"


# What the TUI may reach of rlsup.supervisor, directly or through other modules: the client protocol,
# the model both sides of it share (events, state, progress, the config and diagnosis records) and
# text helpers. A module outside this set reached from rlsup.tui fails below, so a new engine module
# stays out of the TUI without being added to the forbidden list of pyproject.toml.
TUI_MAY_REACH = {
    "client", "client.session", "client.ssh", "client.fleet", "rundir", "rundir.layout",
    "records", "records.events", "records.state", "records.protocol", "records.progress", "records.presets",
    "records.phrases", "records.diagnosis",
    "config", "config.model", "config.loader", "config.interpolate", "config.overrides", "config.placement",
    "config.slurm_checks",
    "config.fleetfile",  # the fleet file's validation
    "render", "render.advice", "render.bars",
}


def test_the_tui_reaches_only_the_client_protocol_and_the_shared_model():
    grimp = pytest.importorskip("grimp")  # import-linter's graph builder (the test extra)
    graph = grimp.build_graph("rlsup.supervisor", "rlsup.tui", "rlsup.trainer", cache_dir=None)
    reached: set[str] = set()
    todo = [m for m in graph.modules if m.startswith("rlsup.tui")]
    while todo:
        for imported in graph.find_modules_directly_imported_by(todo.pop()):
            if imported.startswith("rlsup.supervisor.") and imported not in reached:
                reached.add(imported)
                todo.append(imported)
    extra = sorted(m for m in reached if m.removeprefix("rlsup.supervisor.") not in TUI_MAY_REACH)
    assert not extra, (f"rlsup.tui reaches {extra}: the TUI talks to a run through the client protocol; "
                       "if the module is shared model (no process, socket or file of a run), add it to TUI_MAY_REACH")


# The one import cycle the house has (function-level imports among the CLI's commands: attach and up
# on Slurm reach each other's helpers); any other is new and fails. The core has none.
KNOWN_CYCLES = [{"cli.attach", "cli.common", "cli.follow", "cli.slurm_up"}]


def _cycles(package: str) -> list[set[str]]:
    """Strongly connected components of more than one module in ``package``'s import graph
    (imports inside functions and under TYPE_CHECKING count)."""
    import grimp

    g = grimp.build_graph(package, cache_dir=None)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.find_modules_directly_imported_by(v):
            if w not in g.modules:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w.removeprefix(package + "."))
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for m in sorted(g.modules):
        if m not in index:
            visit(m)
    return out


def test_no_new_import_cycle():
    cycles = _cycles("rlsup.supervisor")
    new = [sorted(c) for c in cycles if c not in KNOWN_CYCLES]
    assert not new, f"new import cycles in rlsup.supervisor: {new}"
