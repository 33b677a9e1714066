"""Fixes made from the misses of the held-out parts measured once (heldout, heldout2) and the tuning
corpus, each on the real excerpt that showed it (tests/fixtures/diagnosis, first line names its source).
The fourth held-out part (heldout5) was frozen before these and never tuned on."""

from __future__ import annotations

from pathlib import Path

from rlsup.supervisor.diagnosis import diagnose, diagnose_file
from rlsup.supervisor.diagnosis.offline import read_tail
from rlsup.supervisor.diagnosis.tracebacks import is_user_frame

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "diagnosis"


# --- rich's box-drawn traceback (heldout, cuda_oom_rich_traceback_subprocess_prefix.log) ----------


def test_rich_box_traceback_frames_give_the_location() -> None:
    d = diagnose_file(FIXTURES / "cuda_oom_rich_traceback_subprocess_prefix.log")  # H1111 issue 23
    assert d.category == "cuda_oom"
    assert d.location == "C:\\H1111\\modules\\custom_offloading_utils.py:105"
    assert not d.library_location
    assert "CUDA_LAUNCH_BLOCKING" not in d.summary


def test_rich_box_lines_read_as_pythons_traceback_format() -> None:
    from rlsup.supervisor.diagnosis.normalize import normalize, rich_box

    assert rich_box("╭───── Traceback (most recent call last) ─────╮") == "Traceback (most recent call last):"
    assert (rich_box("│ /home/u/proj/train.py:42 in main                    │")
            == '  File "/home/u/proj/train.py", line 42, in main')
    assert rich_box("│   41 │   loss = model(x)                │") == "    41 │   loss = model(x)"
    assert rich_box("│                                        │") == ""
    assert rich_box("╰────────────────────────────────────────╯") == ""
    # a table drawn by something else is left alone unless it is one of rich's frame lines
    assert rich_box("plain text │ with a bar") == "plain text │ with a bar"
    texts = [ln.text for ln in normalize(["│ C:\\x\\y.py:7 in f │"])]
    assert texts == ['  File "C:\\x\\y.py", line 7, in f']


def test_a_rich_traceback_with_its_header_names_the_users_frame() -> None:
    # the same box as the excerpt above, with rich's top border that the paste had cut off
    tail = ["SUBPROCESS: ╭──────────────── Traceback (most recent call last) ────────────────╮"] + \
        read_tail(FIXTURES / "cuda_oom_rich_traceback_subprocess_prefix.log")[1:]
    d = diagnose(tail, exit_code=1)
    assert d.category == "cuda_oom" and d.location == "C:\\H1111\\modules\\custom_offloading_utils.py:105"


# --- a shell's report of a background job it ran (tuning corpus, local_ray_node_death.log) --------


def test_a_background_jobs_kill_report_does_not_hide_the_programs_own_exception() -> None:
    # the script killed a Ray worker node it had started ("line 30: 7946 Killed  setsid ray start ...");
    # the driver's ActorUnavailableError, printed before that report, is what broke for the program
    d = diagnose_file(FIXTURES / "local_ray_node_death.log")
    assert d.category == "ray_actor_died"
    assert d.exception_type == "ray.exceptions.ActorUnavailableError"
    assert d.location == "<stdin>:17"
    assert any("Killed" in e and "start --address" in e for e in d.evidence)


def test_a_foreground_kill_report_alone_is_still_a_kill() -> None:
    d = diagnose_file(FIXTURES / "local_bash_killed.log")
    assert d.category == "killed" and d.exception_type is None


def test_stdin_and_notebook_frames_are_the_users_code() -> None:
    assert is_user_frame("<stdin>")
    assert is_user_frame("<ipython-input-3-abc>")
    assert not is_user_frame("<frozen runpy>")
    assert not is_user_frame("<string>")


# --- vLLM's line naming the dead process over its EngineDeadError (heldout2, blog post-mortem) ----


def test_the_line_naming_the_dead_engine_process_is_the_failure_not_the_enginedeaderror() -> None:
    d = diagnose_file(FIXTURES / "blog_vllm_enginedead_postmortem.log")
    assert d.category == "inference_engine_dead"
    assert d.summary.startswith("Worker proc VllmWorker-7 died unexpectedly")
    assert d.exception is None
    assert any("EngineDeadError" in e for e in d.evidence)  # kept as evidence


def test_an_enginedeaderror_alone_is_still_reported_as_the_exception() -> None:
    d = diagnose(["vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
                  "See stack trace (above) for the root cause."], exit_code=1)
    assert d.category == "inference_engine_dead"
    assert d.exception_type == "vllm.v1.engine.exceptions.EngineDeadError"
