"""Real inference engines (vLLM, SGLang) on CPU under `rlsup up -d`, with a tiny model made per test.

The engines live in their own venvs (``.ci/engines.sh`` installs them under ``$HOME/.cache/rlsup-ci/``) and
are named by ``RLSUP_VLLM_PYTHON`` / ``RLSUP_SGLANG_PYTHON``. Outside the stage (the README's ``python -m pytest``
does not install multi-GB engines) these tests are skipped with the reason; inside it (``RLSUP_ENGINES_STAGE=1``,
set by ``.ci/engines.sh``) a missing engine FAILS them: a green stage means every engine really ran."""

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
        why = (f"real {kind} not installed: run .ci/engines.sh (installs it under ~/.cache/rlsup-ci and sets {var}); "
               f"{var}={py!r}")
        if os.environ.get("RLSUP_ENGINES_STAGE") == "1":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return py


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.engines)
            item.add_marker(pytest.mark.timeout(1500))
