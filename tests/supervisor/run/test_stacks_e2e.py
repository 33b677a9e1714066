"""Stacks of a hung component (issue 41): real processes hung in named functions, in a thread and in the
children of a launcher, under a real supervisor; py-spy takes their stacks when a stall is flagged, before a
liveness probe ends a hung component, and on `rlsup stack NAME`. Where it cannot (py-spy missing, no ptrace
permission) rlsup says why and what to do."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlsup.supervisor.run.stacks import find_py_spy, take
from tests.conftest import SCRIPTS, wait_for, write_config

PY = sys.executable
HANGS = SCRIPTS / "hangs.py"
ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(find_py_spy() is None, reason="py-spy is not installed (a dependency of rlsup)")


def line_in(fn: str) -> int:
    """The line of hangs.py where ``fn`` waits (its time.sleep)."""
    lines = HANGS.read_text().splitlines()
    start = lines.index(f"def {fn}():")
    return next(i + 1 for i in range(start, len(lines)) if "time.sleep" in lines[i])


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CONFIG = """
name: hangs
components:
  ranks:
    command: ["{py}", "{hangs}", "launcher", "3"]
    progress: {{pattern: 'Step (?P<step>\\d+)', stall_after: 1}}
  threaded:
    command: ["{py}", "{hangs}", "thread"]
    progress: {{pattern: 'Step (?P<step>\\d+)', stall_after: 1, on_stall: restart}}
    restart: {{policy: never}}
  probed:
    command: ["{py}", "{hangs}", "main"]
    alive: {{tcp: "127.0.0.1:{port}", interval: 0.5, failures: 2}}
    restart: {{policy: never}}
"""


def rlsup(*args: str, run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "rlsup.supervisor.cli", *args, "--run-dir", str(run_dir)], capture_output=True,
                          text=True, timeout=120)


def flag(h, component: str, type_: str) -> dict:
    return h.wait_event(lambda e: e.get("kind") == "flag" and e.get("component") == component
                        and e.get("type") == type_, 60, f"{type_} flag of {component}")


def test_a_stall_a_hung_liveness_probe_and_rlsup_stack_show_where_each_process_waits(tmp_path, headless):
    cfg = write_config(tmp_path, CONFIG.format(py=PY, hangs=HANGS, port=closed_port()))
    h = headless(cfg)

    # all ranks of a launcher's tree, grouped where they agree; the launcher itself too
    ev = flag(h, "ranks", "stall")["evidence"]
    assert f"stack: 2 ranks (0,2) in all_reduce at hangs.py:{line_in('all_reduce')}" in ev, ev
    assert f"stack: rank 1 in load_batch at hangs.py:{line_in('load_batch')}" in ev, ev
    waits = next(i + 1 for i, ln in enumerate(HANGS.read_text().splitlines()) if "p.wait()" in ln)
    assert any(x.startswith("stack: pid ") and " in Popen." in x and x.endswith(f"at hangs.py:{waits}") for x in ev), ev
    dump = Path(ev[-1].removeprefix("stacks: "))
    assert dump.parent == h.run_dir / "stacks" and dump.name.startswith("ranks.1.")
    text = dump.read_text()
    assert text.count("== rank ") == 3 and "load_batch (hangs.py:" in text and '"MainThread"' in text, text

    # a hang in a thread: the thread has its line; with on_stall: restart the stacks come before the stop
    ev = flag(h, "threaded", "stall")["evidence"]
    assert any(x.endswith(f"thread loader in wait_for_path at hangs.py:{line_in('wait_for_path')}") for x in ev), ev
    assert any("in Thread.join" in x or "in Thread._wait_for_tstate_lock" in x for x in ev), ev
    h.wait_event(lambda e: e.get("kind") == "fatal" and e.get("component") == "threaded", 60, "threaded fatal")

    # a liveness probe about to end a hung component: its flag says where it hung
    ev = flag(h, "probed", "liveness_failed")["evidence"]
    assert f"stack: pid {_pid(h, 'probed')} (python) in serve_requests at hangs.py:{line_in('serve_requests')}" in ev, ev

    # one stall, one set of stacks: the stall goes on for ticks, nothing more is taken for it
    time.sleep(3)
    assert len(list((h.run_dir / "stacks").glob("ranks.*"))) == 1
    assert sum(e.get("kind") == "flag" and e.get("component") == "ranks" for e in h.events()) == 1

    # on demand, through the supervisor
    r = rlsup("stack", "ranks", run_dir=h.run_dir)
    assert r.returncode == 0, r.stderr
    assert f"stack: 2 ranks (0,2) in all_reduce at hangs.py:{line_in('all_reduce')}" in r.stdout, r.stdout
    r = rlsup("stack", "ranks", "--native", "--json", run_dir=h.run_dir)
    reply = json.loads(r.stdout)
    assert reply["ok"] and len(reply["processes"]) == 4 and Path(reply["path"]).exists(), reply
    assert "clock_nanosleep" in Path(reply["path"]).read_text() or "(libc" in Path(reply["path"]).read_text()
    assert len(list((h.run_dir / "stacks").glob("ranks.*"))) == 3
    r = rlsup("stack", "threaded", run_dir=h.run_dir)  # it ended: nothing to take, and it says so
    assert r.returncode == 1 and "threaded is fatal: it has no process" in r.stderr, r.stderr

    # `rlsup why` and the report show them
    why = rlsup("why", "ranks", run_dir=h.run_dir).stdout
    assert "hung:" in why and "stack: rank 1 in load_batch" in why, why
    report = rlsup("report", run_dir=h.run_dir).stdout
    assert "stack: 2 ranks (0,2) in all_reduce" in report, report
    h.terminate()
    assert h.wait(60) == 0, h.output


def _pid(h, component: str) -> int:
    return next(e["pid"] for e in h.events() if e.get("kind") == "started" and e.get("component") == component)


@pytest.fixture
def hung():
    p = subprocess.Popen([PY, str(HANGS), "main"], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline() == "Step 1\n"
    yield p
    p.kill()
    p.wait()


def test_without_py_spy_rlsup_says_how_to_install_it(hung):
    s = take("trainer", 1, [hung.pid], py_spy=None)
    assert s.error and "pip install py-spy" in s.error and "RLSUP_PY_SPY" in s.error


def test_a_process_py_spy_may_not_read_is_named_with_what_to_do(hung, tmp_path):
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to take the stacks as another user")
    # py-spy as `nobody` on a process of root's: refused by the kernel, as in a container without SYS_PTRACE
    code = ("import json, sys; from rlsup.supervisor.run.stacks import take, find_py_spy; "
            "from rlsup.supervisor.diagnosis.stacks import short_form; "
            f"print(json.dumps(short_form(take('trainer', 1, [{hung.pid}], py_spy=find_py_spy()))))")
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", PY, "-c", code],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    if r.returncode != 0 and "Permission denied" in r.stderr:
        pytest.skip(f"nobody cannot run this interpreter: {r.stderr[-300:]}")
    lines = json.loads(r.stdout)
    assert lines[0] == f"stacks: not read for pid {hung.pid} (python): no permission to read its memory (ptrace)", lines
    assert "SYS_PTRACE" in lines[-1], lines


def test_a_process_that_is_not_python_is_said_to_be_so():
    p = subprocess.Popen(["sleep", "60"])
    try:
        s = take("x", 1, [p.pid], py_spy=find_py_spy())
    finally:
        p.kill()
        p.wait()
    assert s.procs[0].problem == "not_python", s


@pytest.mark.slow
def test_the_demo_hang_shows_where_the_trainer_waits(tmp_path):
    """The README's `RLSUP_CHAOS_TRAINER=hang@60 rlsup up configs/demo-chaos.yaml`: the stall flag, `rlsup why
    trainer` and `rlsup report` show the trainer's stack at the function it waits in."""
    port = closed_port()
    env = {**os.environ, "RLSUP_GPU_SAMPLER": "none", "RLSUP_CHAOS_TRAINER": "hang@60", "RLSUP_CHAOS_INFERENCE": "none",
           "RLSUP_CHAOS_ORCHESTRATOR": "none", "RLSUP_DEMO_PORT": str(port),
           "PATH": os.path.dirname(PY) + os.pathsep + os.environ.get("PATH", "")}
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([PY, "-m", "rlsup.supervisor.cli", "up", "configs/demo-chaos.yaml", "--headless",
                             "--run-dir", str(run_dir)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        def stall() -> dict | None:
            assert proc.poll() is None, "the demo ended before the hang"
            from rlsup.supervisor.rundir.journal import read_records

            events = [r.to_dict() for r in read_records(run_dir / "events.jsonl")] if (run_dir / "events.jsonl").exists() else []
            return next((e for e in events if e.get("kind") == "flag" and e.get("type") == "stall"), None)

        f = wait_for(stall, 240, what="the trainer's stall flag")
        assert f["component"] == "trainer"
        chaos = (ROOT / "trainer" / "chaos.py").read_text().splitlines()
        sleep_line = next(i + 1 for i, ln in enumerate(chaos) if "time.sleep(3600)" in ln)
        where = f"in _fire at chaos.py:{sleep_line}"
        assert any(x.startswith("stack: pid ") and x.endswith(where) for x in f["evidence"]), f["evidence"]
        why = rlsup("why", "trainer", run_dir=run_dir).stdout
        assert where in why, why
        report = rlsup("report", run_dir=run_dir).stdout
        assert where in report.split("### stall on trainer", 1)[1], report
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
