"""Real inference engines (vLLM, SGLang) on CPU under `rlsup up -d`, with a tiny model made per test.

The engines live in their own venvs (``.ci/engines.sh`` installs them under ``$HOME/.cache/rlsup-ci/``) and
are named by ``RLSUP_VLLM_PYTHON`` / ``RLSUP_SGLANG_PYTHON``; without them these tests are skipped with the
reason (the README's ``python -m pytest`` does not install multi-GB engines)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

ENGINES = {"vllm": "RLSUP_VLLM_PYTHON", "sglang": "RLSUP_SGLANG_PYTHON"}


def engine_python(kind: str) -> str:
    var = ENGINES[kind]
    py = os.environ.get(var, "")
    if not py or not Path(py).exists():
        pytest.skip(f"real {kind} not installed: run .ci/engines.sh (installs it under ~/.cache/rlsup-ci and sets "
                    f"{var}); {var}={py!r}")
    return py


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.engines)
            item.add_marker(pytest.mark.timeout(1500))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """An XFAIL line says only the mark's reason: print what failed, so the stage's log tells which
    assumption broke (or whether rlsup did) each time the non-gating case fails."""
    outcome = yield
    rep = outcome.get_result()
    if call.when == "call" and call.excinfo is not None and getattr(rep, "wasxfail", None) is not None:
        sys.__stderr__.write(f"\n== {item.nodeid} failed (xfail, does not gate the stage):\n"
                             f"{call.excinfo.getrepr(style='short', chain=False)}\n")
        sys.__stderr__.flush()
