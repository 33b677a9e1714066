"""Issue 29's classes of mistakes, each on a real excerpt (tests/fixtures/diagnosis, the first line of
each names where it comes from: a public page, or the exact command of a run made here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlsup.supervisor.diagnosis import diagnose, diagnose_file
from rlsup.supervisor.diagnosis.offline import format_human, read_tail

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "diagnosis"


def lines(name: str) -> list[str]:
    return read_tail(FIXTURES / name)[1:]


# --- a Ray actor that died with an unstated cause ----------------------------------------------


def test_ray_actor_death_names_the_actor_and_lists_rays_possibilities_without_asserting_one() -> None:
    d = diagnose_file(FIXTURES / "ray_actor_died_workerdict_system_error.log")  # verl's WorkerDict, SYSTEM_ERROR
    assert d.category == "ray_actor_died"
    assert "Ray actor WorkerDict" in d.summary and "pid 16424" in d.summary
    assert "worker process has died" in d.summary and "SYSTEM_ERROR" in d.summary
    assert "inference" not in d.hint.lower()
    # Ray's own possibilities, listed as Ray's and not asserted
    for cause in ("(1) The process is killed by SIGKILL by OOM killer", "(2) ray stop --force is called",
                  "(3) The worker is crashed unexpectedly due to SIGSEGV"):
        assert cause in d.hint
    assert "without knowing which" in d.hint
    assert any("There are some potential root causes" in e for e in d.evidence)
    assert any(e.startswith("class_name:") for e in d.evidence)


def test_ray_actor_whose_owner_died_says_so() -> None:
    d = diagnose_file(FIXTURES / "ray_actor_died_owner_node_crashed.log")  # EasyR1: "its owner has died"
    assert d.category == "ray_actor_died"
    assert "Ray actor Runner" in d.summary and "its owner has died" in d.summary
    assert "owner" in d.hint and "inference" not in d.hint.lower()


def test_ray_actor_killed_in_a_real_local_cluster() -> None:
    d = diagnose_file(FIXTURES / "local_ray_actor_sigkill.log")  # Ray 2.60's wording: "Some common causes include"
    assert d.category == "ray_actor_died" and d.location.endswith("ray_faults.py:76") and d.step == 5
    assert "(1) the process was killed by the OOM killer" in d.hint and "(3)" in d.hint


# --- GPU OOM under CUDA's boilerplate ---------------------------------------------------------


@pytest.mark.parametrize("name", ["cuda_oom_runtimeerror_then_boilerplate.log", "cuda_oom_bare_then_boilerplate.log",
                                  "cuda_oom_accelerator_error_dsa_boilerplate.log"])
def test_cuda_oom_followed_by_cuda_boilerplate_is_an_oom(name: str) -> None:
    d = diagnose_file(FIXTURES / name)
    assert d.category == "cuda_oom"
    assert "asynchronously" not in d.summary and "CUDA_LAUNCH_BLOCKING" not in d.summary
    assert "CUDA_LAUNCH_BLOCKING" not in d.hint and "batch" in d.hint


def test_cuda_boilerplate_alone_is_never_the_summary() -> None:
    tail = lines("cuda_oom_runtimeerror_then_boilerplate.log")[1:]  # the boilerplate without the OOM line
    d = diagnose(tail, exit_code=1)
    assert d.category == "cuda_error" and "asynchronously" not in d.summary


# --- Ray task errors cut before their exception line; Ray-prefixed tracebacks --------------------


def test_logged_ray_task_failure_cut_before_its_exception_keeps_the_user_location() -> None:
    # verl PR 5327: "(AgentLoopWorker pid=..) ERROR:2026-02-15 ...: Execution failed: ray::... (pid=, ip=)"
    d = diagnose_file(FIXTURES / "ray_task_failed_logged_prefixed_cut.log")
    assert d.category == "python_exception"
    assert d.location == "/verl/tools/search_tool.py:93" and not d.library_location
    assert "ray::SearchExecutionWorker.execute()" in d.summary


def test_ray_task_error_cut_before_its_final_line() -> None:
    full = lines("local_ray_task_error.log")
    cut = full[: next(k for k, t in enumerate(full) if t.startswith("IndexError"))]
    d = diagnose(cut, exit_code=1)
    assert d.category == "python_exception"
    assert d.location is not None and d.location.endswith("ray_faults.py:42")


# --- SGLang's scheduler header with its traceback cut off --------------------------------------


def test_sglang_scheduler_exception_header_with_cut_traceback_is_the_engines_death() -> None:
    d = diagnose_file(FIXTURES / "sglang_scheduler_exception_header_cut.log")  # sglang#6590
    assert d.category == "inference_engine_dead"
    assert d.location == "/usr/local/src/sglang/python/sglang/srt/managers/scheduler.py:2346"
    assert "cut off" in d.summary and "Traceback (most recent call last)" not in d.summary


# --- a connection error glued to a progress bar ------------------------------------------------


def test_connection_error_glued_to_a_tqdm_bar() -> None:
    raw = (FIXTURES / "local_py_tqdm_openai_conn_error.log").read_bytes()
    assert re.search(rb"it/s\]\d{4}-\d\d-\d\d [\d:,]+ ERROR orchestrator: Request failed: Connection error\.", raw)
    d = diagnose_file(FIXTURES / "local_py_tqdm_openai_conn_error.log")
    assert d.category == "connection_refused" and "Connection error" in d.summary
    assert "%|" not in d.summary  # the record, not the bar it was glued to


# --- a generic TimeoutError before the NCCL watchdog's timeout ---------------------------------


def test_a_generic_timeout_error_does_not_outrank_the_nccl_watchdog_timeout_that_follows() -> None:
    # no single public log was found with both; two real excerpts in the order the issue describes:
    # an asyncio wait that timed out (a run here), then torch's NCCL watchdog (the fixture's issue)
    timeout = lines("local_more_asyncio_wait_timeout.log")
    watchdog = lines("nccl_watchdog_reduce_scatter.log")
    d = diagnose(timeout + watchdog, exit_code=1)
    assert d.category == "nccl_timeout", d.summary
    alone = diagnose(timeout, exit_code=1)
    assert alone.category == "python_exception" and alone.exception_type == "TimeoutError"


# --- a c10d store/socket timeout logged at warning level -----------------------------------------


@pytest.mark.parametrize("name", ["c10d_warning_client_socket_failed_to_connect.log",
                                  "c10d_warning_then_error_any_network_address.log"])
def test_c10d_connect_timeout_at_warning_level_is_not_benign(name: str) -> None:
    d = diagnose_file(FIXTURES / name)
    assert d.category == "distributed_timeout"
    assert "MASTER_ADDR" in d.hint


def test_c10d_ipv6_probe_of_a_healthy_run_stays_benign() -> None:
    # torch's harmless IPv6 probe ("errno: 97/99") on healthy runs is not a store timeout
    tail = ["[W socket.cpp:663] [c10d] The client socket has failed to connect to [localhost]:29500 "
            "(errno: 99 - Cannot assign requested address).", "step 1 loss 0.5"]
    assert diagnose(tail).category == "none"


# --- steps: training progress only, the last completed one ------------------------------------


def test_an_explicit_step_field_is_not_overridden_by_a_later_bar() -> None:
    d = diagnose_file(FIXTURES / "local_py_steps_then_bar.log")  # step:10 logged, then a bar at 23/40
    assert d.step == 10


def test_loading_and_connecting_bars_give_no_step() -> None:
    assert diagnose_file(FIXTURES / "local_py_loading_then_refused.log").step is None


def test_a_training_bar_counts_completed_steps() -> None:
    assert diagnose_file(FIXTURES / "local_torch_tqdm_crash.log").step == 12  # crashed in the 13th


# --- evidence and hints ----------------------------------------------------------------------------


def test_no_evidence_line_is_printed_twice_across_the_corpus() -> None:
    for p in sorted(FIXTURES.glob("*.log")):
        d = diagnose_file(p)
        ev = [" ".join(e.split()) for e in d.evidence]
        for i, a in enumerate(ev):
            for j, b in enumerate(ev):
                if i != j and len(a) >= 40:
                    assert a not in b, (p.name, a)
        text = format_human(p.name, d)
        if d.exception and len(d.exception) > 80:
            # a long exception is shown as the summary (or under "exception:") and once in the evidence
            assert text.count(d.exception[:80]) <= 2, p.name


def test_no_network_advice_for_ncclunhandledcudaerror() -> None:
    d = diagnose_file(FIXTURES / "nccl_unhandled_cuda_error_rank_prefixed.log")  # NVIDIA/nccl#1410
    assert d.category == "nccl_error"
    assert "NCCL_SOCKET_IFNAME" not in d.hint and "not the network" in d.hint


def test_lines_separate_on_disk_are_never_glued_in_the_evidence() -> None:
    # the demo's inference log (issue 27): a long "Step 26/60 | ... load_ms 1.5911" line, then its death
    on_disk = set(lines("local_demo_inference_death_after_step_lines.log"))
    d = diagnose_file(FIXTURES / "local_demo_inference_death_after_step_lines.log")
    assert d.category == "inference_engine_dead" and d.step == 26
    assert all(e in on_disk for e in d.evidence), d.evidence
    assert d.summary.startswith("ERROR Engine core proc EngineCore_0 died")


def test_a_record_glued_after_a_number_on_disk_is_split_off() -> None:
    # the same two writers sharing one pipe, this time glued on disk too (a race between two threads)
    d = diagnose_file(FIXTURES / "local_demo_inference_death_glued_on_disk.log")
    assert d.category == "inference_engine_dead" and d.step == 3
    assert d.summary.startswith("ERROR Engine core proc") and d.evidence[0].startswith("ERROR Engine core proc")
