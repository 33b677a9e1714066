"""`pip install rlsup` stays light for a laptop that only attaches (issue 41 item 3): no numpy, no torch,
NVML bindings only where NVIDIA drivers can exist; the CLI runs without any of them, and the demo's
processes (which import torch) print no "Failed to initialize NumPy" without numpy."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import requires
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _core() -> dict[str, str]:
    """Name -> requirement, for the installed rlsup's requirements outside any extra."""
    out = {}
    for r in requires("rlsup") or []:
        if "extra ==" not in r:
            out[re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].strip().lower()] = r
    return out


def test_core_dependencies_pull_neither_numpy_nor_torch() -> None:
    core = _core()
    assert "numpy" not in core and "torch" not in core, sorted(core)
    assert "sys_platform != \"darwin\"" in core["nvidia-ml-py"].replace("'", '"'), core["nvidia-ml-py"]


def _without(modules: tuple[str, ...], code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where importing any of ``modules`` fails, as if not installed."""
    block = f"import sys\nfor m in {modules!r}: sys.modules[m] = None\n{code}"
    return subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})


def test_the_cli_runs_without_numpy_pynvml_or_torch(tmp_path: Path) -> None:
    def rlsup(*argv: str) -> subprocess.CompletedProcess[str]:
        code = f"from rlsup.supervisor.cli import main\nsys.argv = ['rlsup', *{argv!r}]\nsys.exit(main())"
        return _without(("numpy", "pynvml", "torch"), code, tmp_path)

    helped = rlsup("--help")
    assert helped.returncode == 0 and "rlsup" in helped.stdout, helped.stderr
    status = rlsup("status")  # no run here: a clear "no run" answer, not an ImportError
    assert "Error" not in status.stderr and "Traceback" not in status.stderr, status.stderr
    assert status.returncode in (0, 1), status.stderr


def test_the_demo_trainer_says_nothing_about_numpy(tmp_path: Path) -> None:
    r = _without(("numpy",), "import rlsup.trainer.policy, torch\nprint(torch.zeros(1).sum().item())", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "NumPy" not in r.stderr, r.stderr
