"""Focused tests of the exit diagnosis engine: prefixes, chains, torchelastic, exit codes, host evidence."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlsup.supervisor.diagnosis import (
    Diagnosis,
    HostEvidence,
    diagnose,
    diagnose_command,
    normalize_signal,
    parse_kernel_log,
    parse_memory_events,
    read_host_evidence,
    strip_prefixes,
)


def lines(text: str) -> list[str]:
    return textwrap.dedent(text).strip("\n").splitlines()


# ---------------------------------------------------------------- prefixes


@pytest.mark.parametrize(
    ("raw", "stream", "text"),
    [
        ("[rank3]: Traceback (most recent call last):", "rank3", "Traceback (most recent call last):"),
        ("[rank3]:   File \"x.py\", line 1, in f", "rank3", "  File \"x.py\", line 1, in f"),
        ("[default0]:ValueError: boom", "default0", "ValueError: boom"),
        ("(pid=123) ValueError: boom", "pid=123", "ValueError: boom"),
        ("(RayWorker pid=55) ValueError: boom", "RayWorker pid=55", "ValueError: boom"),
        ("(RayWorkerWrapper pid=7, ip=10.0.0.1) Fatal Python error: Segmentation fault",
         "RayWorkerWrapper pid=7, ip=10.0.0.1", "Fatal Python error: Segmentation fault"),
        ("(EngineCore_0 pid=1) (VllmWorker TP1 pid=2) INFO 08-25 11:01:23 [loader.py:267] Loading weights",
         "EngineCore_0 pid=1/VllmWorker TP1 pid=2", "Loading weights"),
        ("ERROR 04-28 02:37:03 [core.py:398]   File \"a.py\", line 2, in g", "", "  File \"a.py\", line 2, in g"),
        ("ERROR 11-18 18:07:28 engine.py:366] ValueError: x", "", "ValueError: x"),
        ("[2025-04-23 21:31:41 TP2] Scheduler hit an exception: Traceback (most recent call last):", "",
         "Scheduler hit an exception: Traceback (most recent call last):"),
        ("[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught",
         "rank0", "Watchdog caught"),
        ("E0325 20:57:27.620000 2606 site-packages/torch/x/api.py:869] failed (exitcode: -9)", "",
         "failed (exitcode: -9)"),
        ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1)", "", "failed (exitcode: 1)"),
        ("16:41:43 WARNING Inference server was not reached", "", "Inference server was not reached"),
        ("vllm-1  | ValueError: x", "vllm-1", "ValueError: x"),
        ("2024-08-09 07:19:19.929 | ERROR    | __main__:pdf:135 - CUDA error", "", "__main__:pdf:135 - CUDA error"),
        ("plain line", "", "plain line"),
    ],
)
def test_strip_prefixes(raw: str, stream: str, text: str) -> None:
    assert strip_prefixes(raw) == (stream, text)


def test_same_error_on_many_ranks_counted_once() -> None:
    log = []
    for r in range(4):
        log += [
            f"[rank{r}]: Traceback (most recent call last):",
            f'[rank{r}]:   File "/work/train.py", line 1636, in main',
            f"[rank{r}]:     args.model_id",
            f"[rank{r}]: AttributeError: 'Namespace' object has no attribute 'model_id'",
        ]
    d = diagnose(log, exit_code=1)
    assert d.category == "python_exception"
    assert d.exception == "AttributeError: 'Namespace' object has no attribute 'model_id'"
    assert d.location == "/work/train.py:1636"
    assert d.summary.startswith("AttributeError: 'Namespace' object has no attribute 'model_id' at train.py:1636")
    assert "4 ranks" in d.summary
    assert d.evidence.count("AttributeError: 'Namespace' object has no attribute 'model_id'") == 1


def test_interleaved_ranks_are_parsed_per_rank() -> None:
    log = [
        "[rank0]: Traceback (most recent call last):",
        "[rank1]: Traceback (most recent call last):",
        '[rank0]:   File "/w/a.py", line 10, in f',
        '[rank1]:   File "/w/b.py", line 20, in g',
        "[rank0]:     x()",
        "[rank1]:     y()",
        "[rank0]: KeyError: 'a'",
        "[rank1]: KeyError: 'b'",
    ]
    d = diagnose(log, exit_code=1)
    assert d.exception == "KeyError: 'b'" and d.location == "/w/b.py:20"


# ---------------------------------------------------------------- chains


def test_chain_direct_cause_last_is_meaningful() -> None:
    log = lines('''
        Traceback (most recent call last):
          File "/w/data.py", line 5, in load
            open(p)
        FileNotFoundError: [Errno 2] No such file or directory: 'x.jsonl'

        The above exception was the direct cause of the following exception:

        Traceback (most recent call last):
          File "/w/train.py", line 9, in main
            load()
        ValueError: dataset x could not be loaded
    ''')
    d = diagnose(log, exit_code=1)
    assert d.exception == "ValueError: dataset x could not be loaded"
    assert d.location == "/w/train.py:9"


def test_chain_prefers_user_code_under_a_generic_wrapper() -> None:
    log = lines('''
        Traceback (most recent call last):
          File "/w/reward.py", line 42, in score
            return table[key]
        KeyError: 'answer'

        During handling of the above exception, another exception occurred:

        Traceback (most recent call last):
          File "/usr/lib/python3.11/site-packages/lib/worker.py", line 88, in run
            raise RuntimeError("worker failed")
        RuntimeError: worker failed
    ''')
    d = diagnose(log, exit_code=1)
    assert d.exception == "KeyError: 'answer'"
    assert d.location == "/w/reward.py:42"
    assert "RuntimeError: worker failed" in d.evidence


def test_root_cause_above_beats_engine_dead() -> None:
    log = lines('''
        (EngineCore_DP0 pid=9) ERROR 01-01 00:00:00 [core.py:1] EngineCore failed to start.
        (EngineCore_DP0 pid=9) ERROR 01-01 00:00:00 [core.py:1] Traceback (most recent call last):
        (EngineCore_DP0 pid=9) ERROR 01-01 00:00:00 [core.py:1]   File "/usr/lib/python3.12/site-packages/vllm/v1/core/kv_cache_utils.py", line 699, in check_enough_kv_cache_memory
        (EngineCore_DP0 pid=9) ERROR 01-01 00:00:00 [core.py:1]     raise ValueError("No available memory for the cache blocks. "
        (EngineCore_DP0 pid=9) ERROR 01-01 00:00:00 [core.py:1] ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.
        (APIServer pid=1) Traceback (most recent call last):
        (APIServer pid=1)   File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core_client.py", line 80, in __init__
        (APIServer pid=1)     raise RuntimeError("Engine core initialization failed. See root cause above.")
        (APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
    ''')
    d = diagnose(log, exit_code=1)
    assert d.category == "inference_memory_config"
    assert d.exception_type == "ValueError"


def test_sglang_scheduler_exception_beats_sigquit() -> None:
    log = lines('''
        [2025-04-23 21:31:41 TP0] Scheduler hit an exception: Traceback (most recent call last):
          File "/x/site-packages/sglang/srt/managers/scheduler.py", line 2015, in run_scheduler_process
            scheduler.event_loop_normal()
        torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
        [2025-04-23 21:31:41] Received sigquit from a child process. It usually means the child failed.
    ''')
    d = diagnose(log, signal="SIGKILL")
    assert d.category == "cuda_oom"
    assert d.exception_type == "torch.OutOfMemoryError"


def test_first_rank_error_beats_nccl_timeouts_of_others() -> None:
    log = lines('''
        [rank1]: Traceback (most recent call last):
        [rank1]:   File "/w/train.py", line 77, in step
        [rank1]:     loss = batch["x"]
        [rank1]: KeyError: 'x'
        [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600013 milliseconds before timing out.
        [rank2]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600013 milliseconds before timing out.
    ''')
    d = diagnose(log, exit_code=1)
    assert (d.category, d.exception, d.location) == ("python_exception", "KeyError: 'x'", "/w/train.py:77")


# ---------------------------------------------------------------- torchelastic


def test_torchelastic_root_cause_block_takes_first_failing_rank_and_signal() -> None:
    log = lines('''
        torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
        ============================================================
        train.py FAILED
        ------------------------------------------------------------
        Failures:
        [1]:
          time      : 2024-03-05_07:01:51
          rank      : 1 (local_rank: 1)
          exitcode  : -11 (pid: 42)
          traceback : Signal 11 (SIGSEGV) received by PID 42
        ------------------------------------------------------------
        Root Cause (first observed failure):
        [0]:
          time      : 2024-03-05_07:01:51
          host      : node-a
          rank      : 4 (local_rank: 0)
          exitcode  : -9 (pid: 41)
          error_file: <N/A>
          traceback : Signal 9 (SIGKILL) received by PID 41
        ============================================================
    ''')
    d = diagnose(log, exit_code=1)
    assert d.category == "killed"
    assert "rank 4" in d.summary and "SIGKILL" in d.summary
    # ...and the kernel OOM killer naming that rank's pid makes it a host OOM.
    host = parse_kernel_log("Out of memory: Killed process 41 (python) total-vm:1kB, anon-rss:1kB")
    d2 = diagnose(log, exit_code=1, pid=7, host=host)
    assert d2.category == "host_oom"
    assert "pid 41" in d2.summary


def test_child_traceback_beats_childfailederror() -> None:
    log = lines('''
        [default0]:Traceback (most recent call last):
        [default0]:  File "/w/train.py", line 3, in <module>
        [default0]:    import missing_mod
        [default0]:ModuleNotFoundError: No module named 'missing_mod'
        Traceback (most recent call last):
          File "/usr/bin/torchrun", line 8, in <module>
            sys.exit(main())
          File "/usr/lib/python3.10/site-packages/torch/distributed/launcher/api.py", line 263, in launch_agent
            raise ChildFailedError(
        torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
        Root Cause (first observed failure):
        [0]:
          rank      : 0 (local_rank: 0)
          exitcode  : 1 (pid: 5)
          traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
    ''')
    d = diagnose(log, exit_code=1)
    assert d.exception == "ModuleNotFoundError: No module named 'missing_mod'"
    assert d.location == "/w/train.py:3"


# ---------------------------------------------------------------- exit codes


@pytest.mark.parametrize(
    ("exit_code", "signal", "category"),
    [
        (137, None, "killed"),
        (-9, None, "killed"),
        (None, "SIGKILL", "killed"),
        (143, None, "killed"),
        (139, None, "segfault"),
        (-11, None, "segfault"),
        (None, "SIGSEGV", "segfault"),
        (-7, None, "segfault"),
        (134, None, "fatal_python_error"),
        (1, None, "unknown"),
        (2, None, "unknown"),
        (0, None, "none"),
        (None, None, "none"),
    ],
)
def test_exit_code_classification_with_empty_log(exit_code: int | None, signal: str | None, category: str) -> None:
    d = diagnose([], exit_code=exit_code, signal=signal)
    assert d.category == category
    assert d.summary


def test_normalize_signal() -> None:
    assert normalize_signal(137, None) == "SIGKILL"
    assert normalize_signal(-6, None) == "SIGABRT"
    assert normalize_signal(1, None) is None
    assert normalize_signal(None, "kill") == "SIGKILL"


def test_exit_zero_is_not_a_failure_even_with_scary_log() -> None:
    d = diagnose(["ValueError: something handled earlier", "Step 10/10"], exit_code=0)
    assert d.category == "none" and d.step == 10


def test_sigkill_with_kernel_oom_for_pid_is_host_oom() -> None:
    kmsg = textwrap.dedent('''
        6,1234,5555,-;python3 invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0
        3,1235,5556,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice,task=python3,pid=4242,uid=0
        3,1236,5557,-;Out of memory: Killed process 4242 (python3) total-vm:53312244kB, anon-rss:31451456kB, file-rss:74816kB
        6,1237,5558,-;oom_reaper: reaped process 4242 (python3), now anon-rss:0kB, file-rss:74732kB
        3,1238,5559,-;Out of memory: Killed process 999 (other) total-vm:1kB, anon-rss:1kB
    ''')
    host = parse_kernel_log(kmsg, [4242])
    assert host.oom_killed_pids == frozenset({4242})
    assert len(host.kernel_lines) == 3
    assert host.kernel_lines[1].startswith("Out of memory: Killed process 4242")
    d = diagnose(["Step 57/100", "loading batch"], signal="SIGKILL", pid=4242, host=host)
    assert d.category == "host_oom" and d.step == 57
    assert any("Killed process 4242" in e for e in d.evidence)
    # Another pid's OOM kill is not this process's death.
    other = parse_kernel_log(kmsg)
    assert other.oom_killed_pids == frozenset({4242, 999})
    assert diagnose([], signal="SIGKILL", pid=1, host=parse_kernel_log(kmsg, [999])).category == "killed"


def test_dmesg_iso_text_and_memory_events() -> None:
    text = ("2024-04-29T14:55:41,679700+02:00 Out of memory: Killed process 1440763 (perl) "
            "total-vm:87033376kB, anon-rss:60356340kB, file-rss:0kB")
    assert parse_kernel_log(text).oom_killed_pids == frozenset({1440763})
    assert parse_memory_events("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n") == 2
    assert parse_memory_events("garbage") is None


def test_read_host_evidence_never_raises() -> None:
    ev = read_host_evidence(None)
    assert isinstance(ev, HostEvidence)
    assert isinstance(read_host_evidence(999_999_999), HostEvidence)


# ---------------------------------------------------------------- negatives


def test_startup_waits_and_recovered_retries_are_not_failures() -> None:
    log = lines('''
        INFO - trl.extras.vllm_client - Server is not up yet. Retrying in 2.0 seconds...
        16:41:43 WARNING Inference server was not reached after 10 seconds (Error: All connection attempts failed) on http://localhost:8000
        WARNING connect to http://127.0.0.1:30000 failed: [Errno 111] Connection refused
        16:42:27 SUCCESS Inference pool ready
        Step 1/100 | loss 0.3
    ''')
    assert diagnose(log).category == "none"
    assert diagnose(log, exit_code=0).category == "none"


def test_refused_connection_at_the_end_is_the_cause() -> None:
    log = ["Step 12/100", "httpx.ConnectError: [Errno 111] Connection refused"]
    d = diagnose(log, exit_code=1)
    assert d.category == "connection_refused" and d.step == 12


def test_scary_warnings_are_not_failures() -> None:
    log = lines('''
        /usr/lib/python3.11/site-packages/torch/cuda/__init__.py:1: UserWarning: NCCL error handling is deprecated
        WARNING 01-01 00:00:00 [config.py:1] Set gpu_memory_utilization (0.9) lower to avoid CUDA out of memory
        NCCL INFO NET/IB : No device found.
    ''')
    assert diagnose(log).category == "none"


# ---------------------------------------------------------------- model and command


def test_to_dict_and_signature() -> None:
    d = Diagnosis("python_exception", "s", "AttributeError: 'x'", "train.py:1636", 3, ("a", "b"))
    assert d.to_dict() == {"category": "python_exception", "summary": "s", "exception": "AttributeError: 'x'",
                           "location": "train.py:1636", "step": 3, "evidence": ["a", "b"],
                           "library_location": False, "hint": ""}
    assert d.signature() == ("python_exception", "AttributeError", "train.py:1636")
    assert Diagnosis.from_dict(d.to_dict()) == d


def test_diagnose_command_json_one_and_many(tmp_path: Path) -> None:
    bad = tmp_path / "bad.log"
    bad.write_text('Traceback (most recent call last):\n  File "/w/t.py", line 4, in <module>\n    f()\n'
                   "\x1b[31mZeroDivisionError: division by zero\x1b[0m\n")
    good = tmp_path / "good.log"
    good.write_text("step 1\rstep 2\rstep 3\nall done\n")
    out = io.StringIO()
    assert diagnose_command([str(bad)], True, out) == 0
    one = json.loads(out.getvalue())
    assert set(one) == {"category", "summary", "exception", "location", "step", "evidence", "library_location", "hint"}
    assert one["library_location"] is False and one["hint"]
    assert one["category"] == "python_exception" and one["location"] == "/w/t.py:4"
    assert one["exception"] == "ZeroDivisionError: division by zero"

    out = io.StringIO()
    assert diagnose_command([str(bad), str(good)], True, out) == 0
    many = json.loads(out.getvalue())
    assert list(many) == [str(bad), str(good)]
    assert many[str(good)]["category"] == "none" and many[str(good)]["step"] == 3

    out, err = io.StringIO(), io.StringIO()
    assert diagnose_command([str(tmp_path / "missing.log"), str(good)], False, out, err) == 2
    assert err.getvalue().startswith(f"{tmp_path / 'missing.log'}: ")
    assert f"{good}: none" in out.getvalue()


# ---------------------------------------------------------------- real processes


def _run(tmp_path: Path, code: str) -> tuple[list[str], int, Path]:
    script = tmp_path / "train.py"
    script.write_text(code)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30)
    return (p.stdout + p.stderr).splitlines(), p.returncode, script


def test_real_process_exception(tmp_path: Path) -> None:
    out, rc, script = _run(tmp_path, "print('Step 5/10', flush=True)\ndef f():\n    raise KeyError('model_id')\nf()\n")
    d = diagnose(out, exit_code=rc)
    assert rc == 1
    assert (d.category, d.exception, d.location, d.step) == (
        "python_exception", "KeyError: 'model_id'", f"{script}:3", 5)


def test_real_process_segfault(tmp_path: Path) -> None:
    out, rc, script = _run(tmp_path, "import faulthandler, ctypes\nfaulthandler.enable()\nctypes.string_at(0)\n")
    d = diagnose(out, exit_code=rc)
    assert rc == -11
    assert d.category == "segfault"
    assert any("Segmentation fault" in e for e in d.evidence)
    assert d.location == f"{script}:3"
