"""Shared fixtures: run rlsup as a real process against small configs written per test."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"
PY = sys.executable

# pytest rewrites the asserts of every test module as it collects them (15 s of CPU for this suite, in each
# xdist worker) and caches the result in __pycache__, unless bytecode writing is off (PYTHONDONTWRITEBYTECODE,
# set in many containers): then every run, and every worker, rewrites all of them again. The suite's own
# process writes its caches; the processes it starts keep the environment's setting.
sys.dont_write_bytecode = False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    text = textwrap.dedent(text).replace("{py}", PY).replace("{scripts}", str(SCRIPTS))
    p = tmp_path / name
    p.write_text(text)
    return p


def interpolate(value: str, variables: dict[str, str]) -> tuple[str, list[str]]:
    """``config.interpolate.expand`` without its syntax errors: (text, names that were missing); a malformed
    reference is left as written."""
    from rlsup.supervisor.config.interpolate import expand

    text, missing, _ = expand(value, variables)
    return text, missing


class TornServer:
    """A real HTTP listener that reads each request whole, answers with ``reply`` (the first bytes of a
    reply, as a client reads them from a server killed mid-reply), then closes. ``requests`` counts them.
    Reading the whole request first matters: closing on unread bytes sends a RST, and the client would
    see a reset (an OSError) instead of the torn reply."""

    def __init__(self, reply: bytes):
        self.reply = reply
        self.requests = 0
        self._srv = socket.socket()
        self._srv.bind(("127.0.0.1", 0))
        self._srv.listen(8)
        self.url = f"http://127.0.0.1:{self._srv.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    head, _, body = data.partition(b"\r\n\r\n")
                    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                                   if line.lower().startswith(b"content-length:")), 0)
                    while len(body) < length:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        body += chunk
                    self.requests += 1
                    conn.sendall(self.reply)
                    conn.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

    def close(self) -> None:
        # close() alone does not wake a thread blocked in accept() (the join then waited its whole 5 s,
        # 40 s of the fast tier); shutdown() on the listening socket does, at once.
        try:
            self._srv.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._srv.close()
        self._thread.join(5)
        assert not self._thread.is_alive(), "the torn server's thread did not end"


@contextmanager
def torn_server(reply: bytes) -> Iterator[TornServer]:
    s = TornServer(reply)
    try:
        yield s
    finally:
        s.close()


def read_events(run_dir: Path) -> list[dict]:
    p = run_dir / "events.jsonl"
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def kinds(events: list[dict], component: str | None = None) -> list[str]:
    return [e["kind"] for e in events if component is None or e.get("component") == component]


# The ceiling of a wait on state: an idle machine never waits this long, and a loaded one (a load average of
# 10 on 2 cores) only makes a test slower, never a failure. Speed is measured in tests/perf, not here.
PATIENCE = 60.0


def wait_for(pred, timeout: float = PATIENCE, interval: float = 0.05, what: str = "condition"):
    """``pred()``'s first true value, asked every ``interval`` seconds. A question that takes time itself
    (one that runs the CLI costs a quarter of a second of CPU) is asked at most half the time: the pause
    after it is as long as it took, so two workers polling a run do not starve the run they wait on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        asked = time.monotonic()
        v = pred()
        if v:
            return v
        time.sleep(max(interval, time.monotonic() - asked))
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def async_wait_for(pred, timeout: float = PATIENCE, interval: float = 0.05, what: str = "condition"):
    """wait_for on an asyncio loop: the loop (a client's session, a watcher) runs while this waits."""
    import asyncio

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Headless:
    """`rlsup up CONFIG --headless` as a real child process."""

    def __init__(self, config: Path, run_dir: Path, *extra: str, env: dict | None = None):
        self.run_dir = run_dir
        e = dict(os.environ)
        e.update(env or {})
        e.setdefault("RLSUP_GPU_SAMPLER", "none")
        # As in an activated venv (the README's commands): `python` is the interpreter running the tests.
        e["PATH"] = os.path.dirname(PY) + os.pathsep + e.get("PATH", "")
        self.proc = subprocess.Popen(
            # Preflight has its own tests; here the supervisor's handling of broken things is under test.
            [PY, "-m", "rlsup.supervisor.cli", "up", str(config), "--headless", "--skip-checks", "--run-dir",
             str(run_dir), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e, cwd=config.parent,
        )
        self.output = ""

    def events(self) -> list[dict]:
        return read_events(self.run_dir)

    def wait_event(self, pred, timeout: float = PATIENCE, what: str = "event") -> dict:
        def find():
            for e in self.events():
                if pred(e):
                    return e
            if self.proc.poll() is not None:
                raise AssertionError(f"supervisor exited ({self.proc.returncode}) before {what}:\n{self.read()}")
            return None

        return wait_for(find, timeout, what=what)

    def wait(self, timeout: float = 60.0) -> int:
        try:
            rc = self.proc.wait(timeout)
        finally:
            self.read()
        return rc

    def read(self) -> str:
        if self.proc.poll() is not None and self.proc.stdout and not self.proc.stdout.closed:
            self.output += self.proc.stdout.read()
            self.proc.stdout.close()
        return self.output

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)


@pytest.fixture
def headless(tmp_path):
    started: list[Headless] = []

    def start(config: Path, *extra: str, env: dict | None = None) -> Headless:
        h = Headless(config, tmp_path / "run", *extra, env=env)
        started.append(h)
        return h

    yield start
    for h in started:
        if h.proc.poll() is None:
            h.proc.send_signal(signal.SIGTERM)
            try:
                h.proc.wait(30)
            except subprocess.TimeoutExpired:
                h.proc.kill()
        h.read()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is not alive for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def cli_env(extra: dict | None = None) -> dict:
    """The environment of an `rlsup` command run as a user would (venv on PATH, no GPU sampling)."""
    e = dict(os.environ)
    e.setdefault("RLSUP_GPU_SAMPLER", "none")
    e["PATH"] = os.path.dirname(PY) + os.pathsep + e.get("PATH", "")
    e.pop("RLSUP_RUN_DIR", None)
    e.update(extra or {})
    return e


def rlsup(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 60.0,
          check: bool = False) -> subprocess.CompletedProcess:
    """Run the real `rlsup` CLI (as `python -m rlsup.supervisor.cli`) and capture its output."""
    r = subprocess.run([PY, "-m", "rlsup.supervisor.cli", *args], capture_output=True, text=True, cwd=cwd,
                       env=cli_env(env), timeout=timeout, stdin=subprocess.DEVNULL)
    if check and r.returncode != 0:
        raise AssertionError(f"rlsup {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


class Daemon:
    """A supervisor started with `rlsup up CONFIG -d`; torn down with `rlsup down` (then by force)."""

    def __init__(self, config: Path, run_dir: Path, env: dict | None = None):
        self.config = config
        self.run_dir = run_dir
        self.env = env
        self.up = rlsup("up", str(config), "-d", "--run-dir", str(run_dir), cwd=config.parent, env=env)
        if self.up.returncode != 0:
            raise AssertionError(f"rlsup up -d failed ({self.up.returncode}):\n{self.up.stdout}\n{self.up.stderr}")

    @property
    def sock(self) -> Path:
        return self.run_dir / "rlsup.sock"

    @property
    def pid(self) -> int:
        return int(json.loads((self.run_dir / "rlsup.lock").read_text())["pid"])

    def cli(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return rlsup(*args, "--run-dir", str(self.run_dir), cwd=self.config.parent, env=self.env, **kw)

    def events(self) -> list[dict]:
        return read_events(self.run_dir)

    def wait_event(self, pred, timeout: float = PATIENCE, what: str = "event") -> dict:
        return wait_for(lambda: next((e for e in self.events() if pred(e)), None), timeout, what=what)

    def kill_everything(self) -> None:
        from rlsup.supervisor.monitor.process import find_marked, terminate_processes

        try:
            pid = self.pid
        except (OSError, ValueError, KeyError):
            pid = None
        if pid and pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        terminate_processes(find_marked(str(self.run_dir)), signal.SIGKILL, 2.0)


@pytest.fixture
def daemon(tmp_path):
    started: list[Daemon] = []

    def start(config: Path, run_dir: Path | None = None, env: dict | None = None) -> Daemon:
        d = Daemon(config, run_dir or tmp_path / "run", env)
        started.append(d)
        return d

    yield start
    for d in started:
        from rlsup.supervisor.rundir.layout import RunPaths, is_locked

        if is_locked(RunPaths(d.run_dir)):
            d.cli("down", timeout=60)
        d.kill_everything()


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """One real OpenSSH server on 127.0.0.1 for every SSH test (skipped, with the reason printed,
    only when sshd truly cannot start here)."""
    from tests.sshd import Sshd, SshdUnavailable

    server = Sshd(tmp_path_factory.mktemp("sshd"))
    try:
        server.start()
    except SshdUnavailable as e:
        print(f"SSH tests skipped: {e}")
        pytest.skip(f"sshd cannot start here: {e}")
    yield server
    server.stop()


# ------------------------------------------------------------------------------- the fast tier
#
# `pytest -m "not e2e"` is the fast tier: it leaves out every test that starts processes (rlsup
# itself, components, sshd, tmux) or a TUI, or builds a Hugging Face model (importing transformers'
# models alone takes 5-10 s of a minute's budget). A test is marked `e2e` where its own code, a fixture
# it uses, or a function of its module that it calls (two calls deep) does one of PROCESS_STARTERS.
# Marking by what the code does, not by hand, keeps a new end-to-end test out of the fast tier.

import inspect  # noqa: E402
import re  # noqa: E402
import types  # noqa: E402

PROCESS_STARTERS = re.compile(
    r"\bsubprocess\.|\bPopen\(|\brlsup\(|\.run_test\(|\btmux\b|\bheadless\(|\bdaemon\(|\bfault_run\(|\bos\.fork\("
    r"|\bcreate_subprocess_|\bsshd\b|\bFaultRun\(|\bDaemon\(|\bHeadless\(|\bRlsupRun\(|\bpexpect\b|\.cli\("
    r"|\bsnap_compare\b|\bSupervisor\(|\bRun\(|\bfrom transformers import ")
_E2E_FILES = re.compile(r"(?:_e2e|^test_tmux\w*)\.py$")
_starts_cache: dict[object, bool] = {}


def _starts_processes(fn: object, module: types.ModuleType | None, depth: int = 2) -> bool:
    key = (fn, depth)
    if key in _starts_cache:
        return _starts_cache[key]
    _starts_cache[key] = False  # recursion guard
    src = _source(fn)
    hit = bool(PROCESS_STARTERS.search(src))
    code = getattr(fn, "__code__", None)
    if not hit and depth and module is not None and code is not None:
        names = code.co_names + tuple(c for k in code.co_consts if isinstance(k, types.CodeType) for c in k.co_names)
        callees = [getattr(module, n, None) for n in names]
        for m in _LOCAL_IMPORT.finditer(src):  # `from test_trainer_stack import _module` inside the test
            other = sys.modules.get(m.group(1)) or sys.modules.get(f"tests.trainer.{m.group(1)}")
            # Only test code: an attribute of a library (`from transformers import X`) can import it
            # lazily, which cost 4 s of every collection.
            if other is not None and _is_test_code(other):
                callees += [getattr(other, n.strip(), None) for n in m.group(2).split(",")]
        for callee in callees:
            cmod = _module_of(callee) if isinstance(callee, (types.FunctionType, type)) else None
            if cmod is not None and _is_test_code(cmod) and _starts_processes(callee, cmod, depth - 1):
                hit = True
                break
    _starts_cache[key] = hit
    return hit


_LOCAL_IMPORT = re.compile(r"^\s+from (\w+) import ([\w, ]+)$", re.M)


# Every conftest.py is imported as the module `conftest`, so looking a function's or class's module up
# by name (inspect.getmodule, inspect.getsource of a class) can give another directory's conftest: the
# `workdir` fixture of tests/journeys/ then looked like it started nothing, and a README journey ran in
# the fast tier. A function's own globals and code name its module and file whatever the module's name.
def _functions_of(obj: object) -> list[types.FunctionType]:
    if isinstance(obj, types.FunctionType):
        return [obj]
    if isinstance(obj, type):
        return [f for v in vars(obj).values()
                for f in (v, getattr(v, "__func__", None), getattr(v, "fget", None))
                if isinstance(f, types.FunctionType)]
    return []


def _source(obj: object) -> str:
    out = []
    for f in _functions_of(obj):
        try:
            out.append(inspect.getsource(f))
        except (OSError, TypeError):
            pass
    return "\n".join(out)


def _module_of(obj: object) -> types.ModuleType | None:
    fns = _functions_of(obj)
    if not fns:
        return inspect.getmodule(obj)
    g = fns[0].__globals__
    mod = sys.modules.get(g.get("__name__", ""))
    if mod is not None and mod.__dict__ is g:
        return mod
    view = types.ModuleType(g.get("__name__", "conftest"))
    view.__dict__.update(g)
    return view
_TESTS_DIR = str(Path(__file__).parent)


def _is_test_code(module: types.ModuleType) -> bool:
    return (getattr(module, "__file__", None) or "").startswith(_TESTS_DIR)


def _fast_tier(config) -> bool:
    return "not e2e" in (config.getoption("markexpr") or "")


def pytest_configure(config):
    """The fast tier runs property tests at a tenth of their examples (:mod:`tests.tier`)."""
    from tests import tier

    tier.FAST = _fast_tier(config)


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject's addopts): three workers for two cores (the cores this process may run on, and
    half as many again). Most e2e tests spend much of their time waiting on real processes, so one worker a
    core left the cores idle part of the time: on 2 idle cores the README's suite took 15:27 with two workers
    and 11:24 with three (the budget is 12 minutes). Four workers on two cores made three tests that wait on
    real processes fail at a load of 8-10, in an earlier state of the suite."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores + max(1, cores // 2)


# A property test (Hypothesis) computes for as long as its examples take: a few seconds on an idle core,
# many times that at a load average of 10. pyproject's 120 s is for a test that waits on processes.
PROPERTY_TIMEOUT = 900


def pytest_collection_modifyitems(config, items):
    e2e = pytest.mark.e2e
    for item in items:
        fn = getattr(item, "function", None)
        if getattr(fn, "is_hypothesis_test", False) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(PROPERTY_TIMEOUT))
        if item.get_closest_marker("e2e") is not None:
            continue
        module = getattr(item, "module", None)
        hit = bool(_E2E_FILES.search(item.path.name)) or (fn is not None and _starts_processes(fn, module))
        if not hit:
            info = getattr(item, "_fixtureinfo", None)
            for defs in (info.name2fixturedefs.values() if info is not None else ()):
                fmod = _module_of(defs[-1].func)
                if fmod is None or fmod.__name__.startswith(("_pytest", "pytest")):
                    continue  # pytest's own (tmp_path, monkeypatch, capsys...)
                if _starts_processes(defs[-1].func, fmod):
                    hit = True
                    break
        if hit:
            item.add_marker(e2e)
    _heavy_files_first(items)


def _heavy_files_first(items) -> None:
    """Files with slow tests first, then those with other e2e tests, then the rest (each group in collection
    order): ``--dist loadfile`` hands files out in this order, so the long ones start early and the many short
    ones fill the gaps at the end, instead of a demo stack starting last and running alone."""
    rank: dict[Path, int] = {}
    for item in items:
        r = 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("e2e") else 2
        rank[item.path] = min(r, rank.get(item.path, 2))
    items.sort(key=lambda it: rank[it.path])
