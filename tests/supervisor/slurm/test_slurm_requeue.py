"""The requeue waits for the job's steps to end in Slurm first (a real-Slurm CI run: `scontrol requeue` while the
trainer's step 14.0 was still ending in slurmstepd; slurmd then refused the requeued job's batch launch, "Job 14
already killed, do not launch batch job", and the job ended FAILED instead of going on)."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from rlsup.supervisor.run import preemption
from rlsup.supervisor.slurm import jobs
from rlsup.supervisor.slurm.launcher import SlurmLauncher

BATCH = ("14.batch", "batch")
EXTERN = ("14.extern", "extern")
TRAINER = ("14.0", "rlsup:trainer:1")


def test_only_steps_other_than_the_batch_and_extern_steps_and_rlsups_helpers_are_in_the_way():
    listed = [TRAINER, BATCH, EXTERN, ("14.1", "rlsup:gpus"), ("14.2", "rlsup:bridge"), ("14.3", "rlsup:ray:2")]
    assert jobs.in_the_way(listed) == ["14.0", "14.3"]
    assert jobs.in_the_way([BATCH, EXTERN]) == []
    # the node-failure requeue waits for the failed step only, named by id or by name
    assert jobs.in_the_way(listed, only={"rlsup:trainer:1"}) == ["14.0"]
    assert jobs.in_the_way(listed, only={"14.3"}) == ["14.3"]
    assert jobs.in_the_way([BATCH, ("14.3", "rlsup:ray:2")], only={"rlsup:trainer:1"}) == []


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def _squeue(answers, t: FakeTime):
    """A ``job_steps`` that lists what ``answers(seconds since the start)`` says (fault injection: squeue's
    answers over time)."""
    start = t.now
    asked: list[tuple[str, float]] = []

    def steps(job_id: str, timeout: float):
        asked.append((job_id, timeout))
        return answers(t.now - start)
    return steps, asked


def test_the_wait_returns_once_the_ending_step_is_no_longer_listed():
    t = FakeTime()
    steps, asked = _squeue(lambda s: [TRAINER, BATCH] if s < 2.0 else [BATCH, EXTERN], t)
    assert jobs.wait_steps_ended("14", steps=steps, clock=t.clock, sleep=t.sleep) == []
    assert 2.0 <= t.now - 100.0 < 2.0 + jobs.STEPS_POLL_S + 1e-9  # it waited for the step, and no longer
    assert {j for j, _ in asked} == {"14"} and all(0 < timeout <= jobs.STEPS_END_WAIT_S for _, timeout in asked)


def test_the_wait_is_bounded_and_says_which_steps_were_still_ending():
    t = FakeTime()
    steps, _ = _squeue(lambda s: [TRAINER, ("14.3", "rlsup:ray:2"), BATCH], t)
    left = jobs.wait_steps_ended("14", timeout=10.0, steps=steps, clock=t.clock, sleep=t.sleep)
    assert left == ["14.0", "14.3"] and t.now - 100.0 == 10.0
    assert jobs.still_ending(left, 10.0) == "steps 14.0, 14.3 were still ending after 10 s"
    assert jobs.still_ending(["14.0"], 10.0) == "step 14.0 was still ending after 10 s"
    assert jobs.still_ending([], 10.0) == ""


def test_a_squeue_that_does_not_answer_is_asked_again_and_said_where_it_never_answers():
    t = FakeTime()
    steps, asked = _squeue(lambda s: None if s < 1.0 else [BATCH], t)
    assert jobs.wait_steps_ended("14", steps=steps, clock=t.clock, sleep=t.sleep) == []
    assert len(asked) > 1
    t = FakeTime()
    steps, _ = _squeue(lambda s: None, t)
    left = jobs.wait_steps_ended("14", timeout=3.0, steps=steps, clock=t.clock, sleep=t.sleep)
    assert left is None and jobs.still_ending(left, 3.0) == "squeue did not list the job's steps within 3 s"
    # an answer, then none: the steps it listed last are the words
    t = FakeTime()
    steps, _ = _squeue(lambda s: [TRAINER] if s < 1.0 else None, t)
    assert jobs.wait_steps_ended("14", timeout=3.0, steps=steps, clock=t.clock, sleep=t.sleep) == ["14.0"]


def _fake_slurm(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """``squeue`` and ``scontrol`` on PATH: squeue lists step 14.0 while the file ``ending`` exists; scontrol
    writes, to ``calls``, its argv and whether 14.0 was still listed then."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    ending, calls = tmp_path / "ending", tmp_path / "calls"
    scripts = {
        "squeue": f'[ -e {ending} ] && echo "14.0|rlsup:trainer:1"; echo "14.batch|batch"\n',
        "scontrol": f'echo "$* ending=$([ -e {ending} ] && echo yes || echo no)" >> {calls}\n',
    }
    for name, body in scripts.items():
        (bin_ / name).write_text("#!/bin/sh\n" + body)
        (bin_ / name).chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ.get('PATH', '')}")
    ending.touch()
    return ending, calls


def test_scontrol_requeue_comes_only_once_squeue_no_longer_lists_the_step(tmp_path, monkeypatch):
    ending, calls = _fake_slurm(tmp_path, monkeypatch)
    threading.Timer(1.0, ending.unlink).start()
    started = time.monotonic()
    assert jobs.requeue("14") == (True, "")
    assert time.monotonic() - started >= 1.0
    assert calls.read_text() == "requeue 14 ending=no\n"


def test_a_step_still_ending_when_the_wait_runs_out_is_requeued_anyway_and_said(tmp_path, monkeypatch):
    ending, calls = _fake_slurm(tmp_path, monkeypatch)
    assert jobs.requeue("14", wait_s=0.5) == (True, "step 14.0 was still ending after 0.5 s")
    assert calls.read_text() == "requeue 14 ending=yes\n"
    # the run's end reason says it
    monkeypatch.setattr(jobs, "STEPS_END_WAIT_S", 0.5)
    said = preemption.requeue(SimpleNamespace(job_id="14"), {"RLSUP_SLURM_BATCH": "1"})
    assert said == ("job 14 requeued (step 14.0 was still ending after 0.5 s): the next supervisor continues the "
                    "run from these checkpoints")
    # the node-failure requeue waits for its failed step only
    assert jobs.requeue("14", only={"rlsup:trainer:2"}) == (True, "")


def test_a_requeue_that_fails_says_scontrols_words(tmp_path, monkeypatch):
    ending, _ = _fake_slurm(tmp_path, monkeypatch)
    ending.unlink()
    (tmp_path / "bin" / "scontrol").write_text("#!/bin/sh\necho 'Requested operation is presently disabled' >&2\n"
                                               "exit 1\n")
    assert jobs.requeue("14") == (False, "Requested operation is presently disabled")


def test_the_node_failure_requeue_waits_for_the_failed_step_and_the_journal_says_where_it_was_still_ending(
        tmp_path, monkeypatch):
    ending, calls = _fake_slurm(tmp_path, monkeypatch)
    emitted: list = []
    comp = SimpleNamespace(name="trainer", ctx=SimpleNamespace(emit=emitted.append))
    loop = SimpleNamespace(call_soon_threadsafe=lambda f, *args: f(*args))
    launcher = SlurmLauncher("14", {}, {}, requeue=True)
    threading.Timer(1.0, ending.unlink).start()
    launcher._requeue(comp, "rlsup:trainer:1", loop)
    assert calls.read_text() == "requeue 14 ending=no\n" and emitted == []

    ending.touch()
    monkeypatch.setattr(jobs, "STEPS_END_WAIT_S", 0.5)
    launcher._requeue(comp, "rlsup:trainer:1", loop)
    assert calls.read_text().splitlines()[-1] == "requeue 14 ending=yes"
    [flag] = emitted
    assert flag.type == "requeue" and flag.message == "job 14 requeued (step 14.0 was still ending after 0.5 s)"
    # another component's step, still running, is not waited for
    launcher._requeue(comp, "rlsup:trainer:2", loop)
    assert len(emitted) == 1


def test_a_squeue_that_fails_is_not_read_as_no_steps(tmp_path, monkeypatch):
    ending, calls = _fake_slurm(tmp_path, monkeypatch)
    (tmp_path / "bin" / "squeue").write_text("#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm "
                                             "controller (connect failure)' >&2\nexit 1\n")
    assert jobs.job_steps("14") is None
    assert jobs.requeue("14", wait_s=0.5) == (True, "squeue did not list the job's steps within 0.5 s")
    assert calls.read_text() == "requeue 14 ending=yes\n"
