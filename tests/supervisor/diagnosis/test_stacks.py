"""The short form of a component's stacks (pure): py-spy's JSON read, where each process waits put in words,
ranks grouped where they agree, and why a process could not be read. The JSON is py-spy 0.4's, as it printed
it for the processes of tests/supervisor/run/test_stacks_e2e.py (which takes real ones)."""

from __future__ import annotations

import json

from rlsup.supervisor.diagnosis.stacks import (
    Proc,
    Stacks,
    classify,
    full_dump,
    parse_dump,
    ptrace_hint,
    short_form,
    where,
)

LIB = "/usr/lib/python3.11"


def frame(name: str, file: str, line: int, module: str | None = None) -> dict:
    return {"name": name, "filename": file, "module": module, "short_filename": file.rsplit("/", 1)[-1],
            "line": line, "locals": None, "is_entry": False, "is_shim_entry": False}


def thread(name: str, tid: int, *frames: dict) -> dict:
    return {"pid": 10, "thread_id": tid, "thread_name": name, "os_thread_id": tid, "active": False,
            "owns_gil": False, "frames": list(frames), "process_info": None}


def rank_dump(fn: str, line: int) -> str:
    """A rank inside a library call (fn) made at /work/train.py:line."""
    return json.dumps([thread("MainThread", 1, frame(fn, "/venv/site-packages/torch/distributed/c10d.py", 2800),
                              frame("step", "/work/train.py", line), frame("<module>", "/work/train.py", 300))])


def test_where_names_the_innermost_function_and_the_users_line():
    (t,) = parse_dump(rank_dump("all_reduce", 212))
    assert where(t) == "in all_reduce at train.py:212"


def test_a_hang_in_the_users_own_function_is_that_function():
    (t,) = parse_dump(json.dumps([thread("MainThread", 1, frame("wait_for_path", "/work/train.py", 88),
                                         frame("main", "/work/train.py", 120))]))
    assert where(t) == "in wait_for_path at train.py:88"


def test_native_frames_are_skipped_for_the_place_and_kept_in_the_dump():
    (t,) = parse_dump(json.dumps([thread("MainThread", 1,
                                         frame("clock_nanosleep", "/usr/lib/libc.so.6", 0, module="/usr/lib/libc.so.6"),
                                         frame("wait_for_path", "/work/train.py", 88))]))
    assert t.frames[0].native and where(t) == "in wait_for_path at train.py:88"
    s = Stacks("trainer", 1, procs=(Proc(10, "python", threads=(t,)),))
    assert "clock_nanosleep (/usr/lib/libc.so.6)" in full_dump(s)


def test_ranks_that_agree_are_one_line_and_the_odd_one_out_its_own():
    procs = [Proc(100 + r, "python", rank=r, threads=parse_dump(rank_dump("all_reduce", 212))) for r in range(8) if r != 3]
    procs.append(Proc(103, "python", rank=3, threads=parse_dump(json.dumps([thread(
        "MainThread", 1, frame("load_batch", "/work/data.py", 88), frame("step", "/work/train.py", 200))]))))
    lines = short_form(Stacks("trainer", 2, procs=tuple(procs), path="/run/stacks/trainer.2.txt"))
    assert lines == ["stack: 7 ranks (0-2,4-7) in all_reduce at train.py:212",
                     "stack: rank 3 in load_batch at data.py:88",
                     "stacks: /run/stacks/trainer.2.txt"]


def test_a_worker_thread_in_the_users_code_gets_a_line_of_its_own():
    dump = json.dumps([
        thread("loader", 2, frame("wait_for_path", "/work/hang.py", 4), frame("worker", "/work/hang.py", 6),
               frame("Thread.run", f"{LIB}/threading.py", 982)),
        thread("MainThread", 1, frame("Thread._wait_for_tstate_lock", f"{LIB}/threading.py", 1139),
               frame("Thread.join", f"{LIB}/threading.py", 1119), frame("<module>", "/work/hang.py", 8)),
        thread("pool-1", 3, frame("Condition.wait", f"{LIB}/threading.py", 320),
               frame("Thread.run", f"{LIB}/threading.py", 982)),  # an idle library thread: no line
    ])
    threads = parse_dump(dump)
    assert threads[0].main  # the main thread first, whatever py-spy's order
    lines = short_form(Stacks("w", 1, procs=(Proc(7, "python", threads=threads),)))
    assert lines == ["stack: pid 7 (python) in Thread._wait_for_tstate_lock at hang.py:8",
                     "stack: pid 7 (python) thread loader in wait_for_path at hang.py:4"]


def test_processes_that_could_not_be_read_say_why_and_what_to_do():
    ok = Proc(1, "python", threads=parse_dump(rank_dump("all_reduce", 5)))
    denied = Proc(2, "python", problem="denied", error="no permission to read its memory (ptrace)")
    shell = Proc(3, "sh", problem="not_python", error="not a Python process")
    s = Stacks("t", 1, procs=(ok, denied, shell), hints=(ptrace_hint("1", root=False),))
    lines = short_form(s)
    assert "stacks: not read for pid 2 (python): no permission to read its memory (ptrace)" in lines
    assert not any("pid 3" in x for x in lines)  # a shell beside Python processes is no news
    hint = lines[-1]
    assert "SYS_PTRACE" in hint and "kernel.yama.ptrace_scope is 1" in hint and "run rlsup as root" in hint
    # only non-Python processes: then that is the news
    assert short_form(Stacks("t", 1, procs=(shell,))) == ["stacks: not read for pid 3 (sh): not a Python process"]


def test_nothing_taken_at_all_is_one_line():
    assert short_form(Stacks("t", 1, error="py-spy is not installed")) == ["stacks: py-spy is not installed"]


def test_many_places_are_cut_to_a_few_lines():
    procs = tuple(Proc(r, "python", rank=r, threads=parse_dump(rank_dump(f"fn{r}", r + 1))) for r in range(20))
    lines = short_form(Stacks("t", 1, procs=procs))
    assert len(lines) == 6 and lines[-1] == "stack: ... 15 more in the full dump"


def test_py_spy_errors_are_classified_by_what_it_printed():
    assert classify("Permission Denied: Try running again with elevated permissions by going 'sudo env \"PATH=$PATH\" !!'")[0] == "denied"
    assert classify("Error: Operation not permitted (os error 1)")[0] == "denied"
    assert classify("Error: Failed to find python version from target process\n\nStack backtrace:")[0] == "not_python"
    assert classify("Error: Failed to get process executable name. Check that the process is running.\n")[0] == "gone"
    problem, words = classify("Error: something new\nmore")
    assert problem == "failed" and words == "py-spy: Error: something new"


def test_the_ptrace_hint_fits_the_host():
    assert "ptrace_scope" not in ptrace_hint(None, root=True)  # no Yama: the container's capability
    assert "ptrace_scope" not in ptrace_hint("0", root=False)
    assert "run rlsup as root" not in ptrace_hint("2", root=True)


def test_py_spy_output_that_is_not_its_json_is_refused():
    for text in ("", "[1, 2", '{"a": 1}'):
        try:
            parse_dump(text)
        except ValueError:
            continue
        raise AssertionError(f"accepted {text!r}")
