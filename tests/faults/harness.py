"""The fault matrix's shared machinery: real runs, and the invariants every fault test asserts.

Every process a fault test starts carries ``RLSUP_FAULT_TOKEN=<token>`` in its environment
(the CLI, the daemon, the zygote, the monitors and the components inherit it); a process that
clears its environment carries the token in its command line instead. That makes "no orphan"
checkable without trusting anything rlsup itself uses to find processes: walk ``/proc``.

The invariants (see docs/faults.md):

- no orphan: no live process with the token, no live monitor, no member in the run's cgroups;
- no lost line: the components write numbered lines and a copy of their own; the log files hold
  every line of the copy, numbered without a gap or a repeat;
- every journal line parses, and ``seq`` strictly increases;
- the daemon answers ``rlsup status`` after the fault;
- memory bounded (where the fault is about memory).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import PY, SCRIPTS, cli_env, write_config

TOKEN_VAR = "RLSUP_FAULT_TOKEN"
LIVENESS_S = 60.0  # generous: the machine has 2 cores shared with others


def figure(name: str, **values: object) -> None:
    """Print one measured figure (shown with ``pytest -s``) and keep it in $RLSUP_FAULT_FIGURES."""
    line = json.dumps({"figure": name, **values}, default=str)
    print(f"\nFIGURE {line}")
    out = os.environ.get("RLSUP_FAULT_FIGURES")
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


# ---------------------------------------------------------------------- /proc


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _state(pid: int) -> str:
    stat = _read(f"/proc/{pid}/stat")
    return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3].decode() if stat else "X"


def alive(pid: int) -> bool:
    return _state(pid) not in ("Z", "X", "")


def processes_with(token: str) -> list[tuple[int, str]]:
    """Live processes (not zombies) whose environment or command line carries ``token``."""
    me = os.getpid()
    needle_env = f"{TOKEN_VAR}={token}".encode()
    needle = token.encode()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        cmd = _read(f"/proc/{pid}/cmdline")
        if needle in cmd or needle_env in _read(f"/proc/{pid}/environ"):
            if alive(pid):
                out.append((pid, cmd.replace(b"\0", b" ").decode(errors="replace")[:160]))
    return out


def cgroup_dir(run_dir: Path) -> Path | None:
    """Where rlsup puts the run's cgroups (as :class:`rlsup.supervisor.monitor.process.Cgroups` does)."""
    from rlsup.supervisor.monitor.process import _cgroup2_mount, _own_cgroup

    mount, own = _cgroup2_mount(), _own_cgroup()
    if mount is None or own is None:
        return None
    tag = hashlib.sha256(str(run_dir).encode()).hexdigest()[:12]
    return Path(mount) / own.lstrip("/") / f"rlsup-{tag}"


def cgroup_members(run_dir: Path) -> dict[str, list[int]]:
    base = cgroup_dir(run_dir)
    out: dict[str, list[int]] = {}
    if base is None or not base.is_dir():
        return out
    for procs in base.rglob("cgroup.procs"):
        pids = [int(x) for x in _read(str(procs)).split()]
        if pids:
            out[str(procs.parent)] = pids
    return out


# ---------------------------------------------------------------------- the invariants


def assert_no_orphans(token: str, run_dir: Path, timeout: float = LIVENESS_S) -> None:
    """Nothing of the run is alive: no process with the token, no cgroup member."""
    deadline = time.monotonic() + timeout
    while True:
        procs = processes_with(token)
        members = cgroup_members(run_dir)
        if not procs and not members:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"processes of the run outlived it: {procs}; cgroup members: {members}")
        time.sleep(0.1)


def journal(run_dir: Path) -> list[dict]:
    """Every line of events.jsonl, each of which must be a whole JSON object; seq strictly increasing."""
    raw = (run_dir / "events.jsonl").read_bytes()
    assert not raw or raw.endswith(b"\n"), f"events.jsonl ends in a torn line: {raw[-200:]!r}"
    events, last = [], 0
    for n, line in enumerate(raw.split(b"\n")[:-1], 1):
        try:
            e = json.loads(line)
        except ValueError as err:
            raise AssertionError(f"events.jsonl line {n} does not parse ({err}): {line[:300]!r}") from None
        assert isinstance(e, dict) and isinstance(e.get("seq"), int), f"line {n} is not an event: {line[:300]!r}"
        assert e["seq"] > last, f"line {n}: seq {e['seq']} after {last}"
        last = e["seq"]
        events.append(e)
    return events


LINE_RE = re.compile(rb"^a(\d+) (\d{9}) ")


def log_files(run_dir: Path, name: str) -> list[Path]:
    """``NAME.log.K`` ... ``NAME.log.1``, ``NAME.log``: oldest first."""
    logs = run_dir / "logs"
    rotated = sorted((p for p in logs.glob(f"{name}.log.*") if p.suffix.lstrip(".").isdigit()),
                     key=lambda p: -int(p.suffix[1:]))
    return rotated + [logs / f"{name}.log"]


def numbered(data: bytes) -> dict[int, list[int]]:
    """attempt -> line numbers, in the order they appear (other lines are ignored)."""
    out: dict[int, list[int]] = {}
    for line in data.split(b"\n"):
        m = LINE_RE.match(line)
        if m:
            out.setdefault(int(m.group(1)), []).append(int(m.group(2)))
    return out


def assert_no_lost_line(run_dir: Path, name: str, copy: Path) -> dict[int, int]:
    """The log holds every line of the child's own copy, byte for byte, numbered 1..N per attempt
    with no gap and no repeat. Returns lines per attempt."""
    log = b"".join(p.read_bytes() for p in log_files(run_dir, name) if p.exists())
    mine = copy.read_bytes()
    got, want = numbered(log), numbered(mine)
    out = {}
    for attempt, nums in got.items():
        bad = next((i for i, n in enumerate(nums, 1) if n != i), None)
        assert bad is None, (f"attempt {attempt}: line {bad} of the log is number {nums[bad - 1]}: lines "
                             "missing, repeated or out of order")
        out[attempt] = len(nums)
    for attempt, nums in want.items():
        assert out.get(attempt, 0) >= len(nums), \
            f"attempt {attempt}: the child wrote {len(nums)} lines, the log has {out.get(attempt, 0)}"
    # Byte-exact, not just numbered: every line of the copy is in the log as written.
    log_lines = set(log.split(b"\n"))
    missing = [ln for ln in mine.split(b"\n") if ln and ln not in log_lines]
    assert not missing, f"{len(missing)} line(s) of the child's copy differ in the log, e.g. {missing[0][:120]!r}"
    return out


# ---------------------------------------------------------------------- a run under test


class FaultRun:
    """A run of rlsup started the way a user would (``rlsup up -d`` or ``--headless``), every
    process of it marked with this test's token."""

    def __init__(self, tmp_path: Path, run_dir: Path, token: str, env: dict[str, str] | None = None):
        self.tmp = tmp_path
        self.run_dir = run_dir
        self.token = token
        self.env = {TOKEN_VAR: token, **(env or {})}
        self.headless_proc: subprocess.Popen | None = None
        self.config: Path | None = None

    # -- starting

    def write_config(self, text: str, name: str = "run.yaml") -> Path:
        self.config = write_config(self.tmp, text.replace("{tmp}", str(self.tmp)), name)
        return self.config

    def cli(self, *args: str, timeout: float = LIVENESS_S, run_dir: bool = True, **kw) -> subprocess.CompletedProcess:
        extra = ["--run-dir", str(self.run_dir)] if run_dir else []
        return subprocess.run([PY, "-m", "rlsup.supervisor.cli", *args, *extra], capture_output=True, text=True,
                              cwd=self.tmp, env=cli_env(self.env), timeout=timeout, stdin=subprocess.DEVNULL, **kw)

    def up(self, *extra: str, check: bool = True, timeout: float = LIVENESS_S) -> subprocess.CompletedProcess:
        assert self.config is not None
        r = self.cli("up", str(self.config), "-d", *extra, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"rlsup up -d exited {r.returncode}:\n{r.stdout}\n{r.stderr}\n{self.daemon_log()}")
        return r

    def headless(self, *extra: str, new_session: bool = True) -> subprocess.Popen:
        assert self.config is not None
        self.headless_proc = subprocess.Popen(
            [PY, "-m", "rlsup.supervisor.cli", "up", str(self.config), "--headless", "--skip-checks", "--run-dir",
             str(self.run_dir), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cli_env(self.env), cwd=self.tmp,
            start_new_session=new_session, stdin=subprocess.DEVNULL)
        return self.headless_proc

    # -- looking

    @property
    def pid(self) -> int:
        return int(json.loads((self.run_dir / "rlsup.lock").read_text())["pid"])

    def events(self) -> list[dict]:
        from rlsup.supervisor.rundir.journal import read_records

        return [r.to_dict() for r in read_records(self.run_dir / "events.jsonl")]

    def wait_event(self, pred, timeout: float = LIVENESS_S, what: str = "event", since: int = 0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in self.events():
                if e.get("seq", 0) > since and pred(e):
                    return e
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}; last events: "
                             f"{[(e.get('kind'), e.get('component')) for e in self.events()[-15:]]}\n{self.daemon_log()}")

    def status(self, timeout: float = LIVENESS_S) -> dict:
        r = self.cli("status", "--json", timeout=timeout)
        assert r.returncode == 0, f"rlsup status failed ({r.returncode}): {r.stderr}"
        return json.loads(r.stdout)

    def wait_status(self, pred, timeout: float = LIVENESS_S, what: str = "status") -> dict:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.status()
            if pred(last):
                return last
            time.sleep(0.5)  # each look is a CLI process: on 2 shared cores, not too often
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}; last status: "
                             f"{json.dumps(last)[:2000]}")

    def daemon_log(self) -> str:
        try:
            return "supervisor.log:\n" + (self.run_dir / "supervisor.log").read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    # -- ending

    def down(self, timeout: float = LIVENESS_S) -> subprocess.CompletedProcess:
        return self.cli("down", timeout=timeout)

    def kill_everything(self) -> None:
        """Teardown whatever happened: SIGKILL every process with the token (thawed first)."""
        for _ in range(3):
            procs = processes_with(self.token)
            if not procs:
                break
            for pid, _cmd in procs:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        base = cgroup_dir(self.run_dir)
        if base is not None and base.is_dir():
            for d in sorted(base.rglob("*"), key=lambda p: -len(p.parts)):
                if d.is_dir():
                    with contextlib.suppress(OSError):
                        (d / "cgroup.kill").write_text("1")
                    with contextlib.suppress(OSError):
                        d.rmdir()
            with contextlib.suppress(OSError):
                base.rmdir()
        if self.headless_proc is not None and self.headless_proc.poll() is None:
            self.headless_proc.kill()
            self.headless_proc.wait(10)


@pytest.fixture
def token() -> str:
    return f"rlsupfault-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def fault_run(tmp_path, token):
    """``fault_run(run_dir=None, env=None) -> FaultRun``; everything it started is gone afterwards."""
    runs: list[FaultRun] = []

    def make(run_dir: Path | None = None, env: dict[str, str] | None = None) -> FaultRun:
        r = FaultRun(tmp_path, run_dir or tmp_path / "run", token, env)
        runs.append(r)
        return r

    yield make
    for r in runs:
        r.kill_everything()


# ---------------------------------------------------------------------- machine features


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"needs root {what} (CI runs as root: .ci/run)")


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (skipped, saying why, where mounting is not possible)."""
    need_root("to mount a 2 MiB tmpfs; as a user, `unshare --user --map-root-user --mount python -m pytest "
              "tests/faults/test_disk_full.py` gives it a private one")
    if shutil.which("mount") is None or shutil.which("umount") is None:
        pytest.skip("no mount/umount on this machine: cannot mount a 2 MiB tmpfs")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (a container without CAP_SYS_ADMIN?): "
                    f"{r.stderr.strip() or r.returncode}")
    try:
        yield mnt
    finally:
        unmount(mnt)


def unmount(mnt: Path) -> None:
    """Unmount, waiting up to 10 s for the last processes to let go; lazily after that."""
    for _ in range(50):
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode == 0:
            return
        time.sleep(0.2)
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.fixture
def loop_ext4(tmp_path):
    """A 256 MiB ext4 on a loop device, mounted with errors=remount-ro (sparse: costs what it holds);
    skipped, loudly, where that is not possible."""
    need_root("to mount a loop device")
    for tool in ("mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            pytest.skip(f"SKIPPED LOUDLY: no {tool} here, so no loop-mounted ext4 to turn read-only "
                        "(.ci/run installs e2fsprogs and mount)")
    img, mnt = tmp_path / "disk.img", tmp_path / "disk"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(256 << 20)
    r = subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["mount", "-o", "loop,errors=remount-ro", str(img), str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"SKIPPED LOUDLY: cannot mount a loop device here (no /dev/loop*, or no CAP_SYS_ADMIN): "
                    f"{r.stderr.strip()}")
    try:
        yield mnt
    finally:
        unmount(mnt)


def demo_with_flood(tmp: Path) -> str:
    """configs/demo.yaml with one more component flooding numbered lines (20,000/s; its copy in ``tmp``)."""
    import yaml

    cfg = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs" / "demo.yaml").read_text())
    cfg["components"]["flood"] = {
        "command": [PY, NUMBERED, "--copy", str(tmp / "flood.copy"), "--rate", "20000"],
        "stop": {"signal": "SIGTERM", "timeout": 5},
    }
    return yaml.safe_dump(cfg)


OTHER_USER = "rlsupfault"


@pytest.fixture(scope="session")
def other_user():
    """A second local user (created once; skipped where useradd is not possible). -> (uid, gid)"""
    import pwd

    need_root("to act as a second local user")
    try:
        pw = pwd.getpwnam(OTHER_USER)
    except KeyError:
        useradd = shutil.which("useradd")
        if useradd is None:
            pytest.skip("no useradd on this machine: cannot create a second user")
        r = subprocess.run([useradd, "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot create a second user: {r.stderr.strip()}")
        pw = pwd.getpwnam(OTHER_USER)
    return pw.pw_uid, pw.pw_gid


def as_user(uid: int, gid: int, code: str, *args: str) -> subprocess.CompletedProcess:
    """Run Python ``code`` (``sys.argv[1:]`` = ``args``) in a forked process that became another user.

    Forked rather than executed: the other user may not be allowed to run this interpreter (a venv
    under a private home). Returns what the code printed as ``stdout``, a traceback as ``stderr``.
    """
    import io
    import sys
    import traceback

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code_rc = 0
        buf = io.StringIO()
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            sys.argv = ["-c", *args]
            sys.stdout = buf
            exec(compile(code, "<as_user>", "exec"), {"__name__": "__main__"})
            out = "O" + buf.getvalue()
        except SystemExit as e:
            code_rc = e.code if isinstance(e.code, int) else 1
            out = "O" + buf.getvalue()
        except BaseException:  # noqa: BLE001 - reported to the parent
            code_rc = 1
            out = "E" + traceback.format_exc()
        try:
            data = out.encode()
            while data:
                data = data[os.write(w, data):]
        finally:
            os._exit(code_rc)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode()
    out, err = (text[1:], "") if text.startswith("O") else ("", text[1:])
    return subprocess.CompletedProcess([code], os.waitstatus_to_exitcode(status), out, err)


def cgroups_usable() -> str | None:
    """None when rlsup can track attempts in cgroup v2 here; else why not."""
    from rlsup.supervisor.monitor.process import _cgroup2_mount, _own_cgroup

    if os.geteuid() != 0:
        return "not root"
    if _cgroup2_mount() is None or _own_cgroup() is None:
        return "no cgroup v2 hierarchy"
    return None


NUMBERED = str(SCRIPTS / "numbered.py")
ESCAPEE = str(SCRIPTS / "escapee.py")


# ---------------------------------------------------------------------- a subscriber that reconnects


class Subscriber:
    """The product's own reconnecting :class:`~rlsup.supervisor.client.session.Session` (what the TUI uses),
    on a thread of its own, recording every log line by sequence number, gaps and events."""

    def __init__(self, sock: Path, lines: int = 0):
        import threading

        self.sock = sock
        self.lines_wanted = lines
        self.by_seq: dict[str, dict[int, str]] = {}
        self.dups: list[tuple[str, int]] = []  # same seq delivered twice with different text
        self.gaps: list[tuple[str, int, int]] = []
        self.events: list[dict] = []
        self.statuses: list[tuple[str, str]] = []
        self.snapshots = 0
        self._session = None
        self._loop = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="subscriber", daemon=True)
        self._thread.start()
        assert self._ready.wait(30), "the subscriber's loop did not start"

    # SessionListener
    def on_connection(self, status: str, detail: str) -> None:
        self.statuses.append((status, detail))

    def on_snapshot(self, snapshot: dict, resumed: bool) -> None:
        self.snapshots += 1
        for name, block in (snapshot.get("logs") or {}).items():
            self.on_logs(name, block["seq"], block["lines"])

    def on_event(self, e: dict) -> None:
        self.events.append(e.to_dict())  # the session hands records; the checks read the dicts that came

    def on_logs(self, component: str, seq: int, lines: list[str]) -> None:
        got = self.by_seq.setdefault(component, {})
        for i, line in enumerate(lines, seq):
            old = got.get(i)
            if old is not None and old != line:
                self.dups.append((component, i))
            got[i] = line

    def on_gap(self, component: str, from_seq: int, to_seq: int) -> None:
        self.gaps.append((component, from_seq, to_seq))

    def _main(self) -> None:
        import asyncio

        from rlsup.supervisor.client.session import Session, unix_connector

        async def go() -> None:
            self._loop = asyncio.get_running_loop()
            self._session = Session(unix_connector(self.sock, name="fault-subscriber"), self, lines=self.lines_wanted,
                                    backoff=(0.05, 0.3))
            self._ready.set()
            await self._session.run()

        asyncio.run(go())

    @property
    def attached(self) -> bool:
        return bool(self.statuses) and self.statuses[-1][0] == "attached"

    def close(self) -> None:
        import contextlib

        if self._loop is not None and self._session is not None:
            with contextlib.suppress(RuntimeError):  # its loop already ended (the session gave up)
                self._loop.call_soon_threadsafe(self._session.close)
        self._thread.join(30)

    def text(self, component: str) -> tuple[int, list[str]]:
        """(first seq, the lines in seq order); asserts the seqs are contiguous."""
        got = self.by_seq.get(component) or {}
        if not got:
            return 0, []
        first, last = min(got), max(got)
        missing = [s for s in range(first, last + 1) if s not in got]
        assert not missing, f"{len(missing)} seq(s) of {component} never reached the subscriber, e.g. {missing[:5]}"
        return first, [got[s] for s in range(first, last + 1)]
