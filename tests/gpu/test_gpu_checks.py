"""The GPU check script (tests/gpu/run_gpu_checks.sh) on a machine without a GPU, and its pure helpers.

On a GPU machine the script measures (docs/gpu.md); here it must say, item by item, that there is no
GPU and why, and exit 0, as CI sees it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import gpu_checks
import pytest

HERE = Path(__file__).resolve().parent


def test_without_a_gpu_every_item_says_why_and_the_script_exits_0(tmp_path: Path) -> None:
    gpu, reason = gpu_checks.gpu_or_reason()
    if gpu is not None:
        pytest.skip("this machine has a GPU: run tests/gpu/run_gpu_checks.sh for the figures")
    r = subprocess.run(["bash", str(HERE / "run_gpu_checks.sh"), str(tmp_path)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert rows[0]["item"] == "machine" and rows[0]["gpu"] is None and rows[0]["reason"] == reason
    assert [r["item"] for r in rows[1:]] == list(gpu_checks.ITEMS)
    for row in rows[1:]:
        assert row["figures"]["skipped"].startswith("no GPU: ") and not row["problems"], row


def test_reserved_at_is_only_read_in_a_steady_stretch() -> None:
    log = [{"t": 100.0, "reserved_mb": 0.0}, {"t": 110.0, "reserved_mb": 2048.0}, {"t": 120.0, "reserved_mb": 0.0}]
    assert gpu_checks._reserved_at(log, 99.0) is None  # before the first record
    assert gpu_checks._reserved_at(log, 105.0) == 0.0
    assert gpu_checks._reserved_at(log, 111.0) is None  # just after a change: NVML may lag
    assert gpu_checks._reserved_at(log, 109.8) is None  # just before one
    assert gpu_checks._reserved_at(log, 115.0) == 2048.0


def test_step_losses_are_read_from_the_trainers_step_lines() -> None:
    text = ("12:00:01 Model m (1.0M parameters) on cuda; bf16 autocast True\n"
            "Step 11/40 | reward 0.016 | loss -0.0123 | entropy 5.75\n"
            "Step 12/40 | reward 0.02 | loss 1.5e-05 | entropy 5.7\n")
    assert gpu_checks._step_losses(text) == {11: -0.0123, 12: 1.5e-05}
