"""What `rlsup up` on a login node says when the run's job failed: why, from the journal of that job's
supervisor, else from the batch step's output. (Against a real Slurm: tests/slurm/test_slurm_blind_node.py.)"""

from __future__ import annotations

import json
from pathlib import Path

from rlsup.supervisor.cli.slurm_up import why_ended


def _journal(run: Path, *events: dict) -> None:
    run.mkdir(parents=True, exist_ok=True)
    with open(run / "events.jsonl", "w") as f:
        for i, e in enumerate(events, 1):
            f.write(json.dumps({"seq": i, "ts": 1.0, **e}) + "\n")


def test_the_reason_of_this_jobs_run_not_an_earlier_ones(tmp_path):
    run = tmp_path / "run"
    _journal(run,
             {"kind": "run_started", "slurm": {"job_id": "7"}},
             {"kind": "run_ended", "exit_code": 1, "reason": "trainer failed (an earlier job)"},
             {"kind": "run_started", "slurm": {"job_id": "9"}},
             {"kind": "run_ended", "exit_code": 1, "reason": "the run dir /r is not visible on gpu-02: put run_dir ..."})
    lines = why_ended("9", str(run))
    assert lines[0] == "  why:     the run dir /r is not visible on gpu-02: put run_dir ..."
    assert f"rlsup status --run-dir {run}" in "\n".join(lines)
    assert f"{run}/slurm-9.out" in lines[-1]


def test_without_a_journal_of_that_job_the_batch_outputs_last_lines(tmp_path):
    run = tmp_path / "run"
    _journal(run, {"kind": "run_started", "slurm": {"job_id": "7"}},
             {"kind": "run_ended", "exit_code": 1, "reason": "an earlier job's end"})
    (run / "slurm-9.out").write_text("line 0\nline 1\nline 2\n\nTraceback (most recent call last):\n  x\n"
                                     "ModuleNotFoundError: No module named 'rlsup'\n\n")
    lines = why_ended("9", str(run))
    text = "\n".join(lines)
    assert "an earlier job's end" not in text and "line 0" not in text  # the last 5 non-empty lines only
    assert "  slurm-9.out: ModuleNotFoundError: No module named 'rlsup'" in lines
    assert lines[0] == "  slurm-9.out: line 1"


def test_nothing_to_read_still_says_where_to_look(tmp_path):
    lines = why_ended("3", str(tmp_path / "absent"))
    assert [x.split(":")[0].strip() for x in lines] == ["status", "output"]
