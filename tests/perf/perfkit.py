"""Shared pieces of the side-by-side benchmarks: rlsup and supervisord runs, CPU and memory accounting.

Nothing here asserts a timing: the benchmarks print figures next to their targets and write JSON.

- :class:`RlsupRun`: ``rlsup up CONFIG --headless`` in the foreground; the supervisor is that
  process; its monitors (one per component, ``shim.py``) and the monitor zygote are its children.
- :class:`Supervisord`: supervisord 4.3.0 from PyPI, installed on first use into its own venv under
  ``tests/perf/.cache`` (gitignored), configured for the same workload with its logs on the same disk.
- CPU: utime+stime from ``/proc/PID/stat`` (a process's own time; its children's is not included),
  and for short windows the nanosecond run time summed over ``/proc/PID/task/*/schedstat``.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CACHE = HERE / ".cache"
RESULTS = HERE / "results"
WRITER = HERE / "writer.py"
PY = sys.executable
SUPERVISORD_VERSION = "4.3.0"
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def env(**extra: str) -> dict[str, str]:
    # a user's Python writes and reuses bytecode: a start-up measured without it measures the compiler
    e = {k: v for k, v in os.environ.items() if k not in ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE")}
    e["RLSUP_GPU_SAMPLER"] = "none"
    e.update(extra)
    return e


def source_path(label: str, src: Path, work: Path) -> str:
    """A PYTHONPATH entry under which ``rlsup`` is the source tree ``src`` (its supervisor, tui and trainer
    linked into a package of that name): how a benchmark runs another checkout beside this one."""
    shim = work / f"shim-{label}" / "rlsup"
    shim.mkdir(parents=True)
    for d in ("supervisor", "tui", "trainer"):
        (shim / d).symlink_to(src / d)
    return str(shim.parent)


def workdir(name: str, base: str | None = None) -> Path:
    """A fresh directory for one benchmark's run dirs and logs (all on the disk of ``base``)."""
    root = Path(base) if base else CACHE / "work"
    d = root / f"{name}-{os.getpid()}"
    if d.exists():
        subprocess.run(["rm", "-rf", str(d)], check=False)
    d.mkdir(parents=True)
    return d


def rmtree(p: Path) -> None:
    subprocess.run(["rm", "-rf", str(p)], check=False)


def chatty_writer(python: bool = False) -> list[str]:
    """argv prefix of the chatty writer: the C one (compiled on first use into the cache) if a C compiler
    is there, else writer.py's chatty mode (same lines, same schedule, several times the CPU)."""
    if not python:
        src = HERE / "chatty.c"
        import hashlib

        exe = CACHE / f"chatty-{hashlib.sha256(src.read_bytes()).hexdigest()[:12]}"
        if not exe.exists():
            CACHE.mkdir(parents=True, exist_ok=True)
            for cc in ("cc", "gcc", "clang"):
                try:
                    r = subprocess.run([cc, "-O2", "-o", str(exe), str(src)], capture_output=True, text=True)
                except OSError:
                    continue
                if r.returncode == 0:
                    break
        if exe.exists():
            return [str(exe)]
        print("no C compiler: the chatty writers are Python (writer.py chatty)", flush=True)
    return [PY, str(WRITER), "chatty"]


# ---------------------------------------------------------------------- /proc accounting


def cpu_ticks_s(pid: int) -> float:
    """utime + stime of ``pid`` itself (all its threads, dead ones included), in seconds."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read()
    fields = raw[raw.rfind(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def proc_stat(pid: int) -> dict[str, float]:
    """CPU seconds (utime+stime) and minor page faults of ``pid`` itself."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read()
    fields = raw[raw.rfind(b")") + 2:].split()
    return {"cpu_s": round((int(fields[11]) + int(fields[12])) / TICK, 3), "minflt": int(fields[7])}


def cpu_sched_s(pid: int) -> float:
    """Run time of ``pid``'s live threads from schedstat, in seconds (nanosecond resolution)."""
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def cpu_many(pids: Iterable[int], fn=cpu_ticks_s) -> dict[int, float]:
    out = {}
    for p in pids:
        try:
            out[p] = fn(p)
        except (OSError, ValueError):
            pass
    return out


def threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def memory(pid: int) -> dict[str, float]:
    """RSS, PSS, USS (MB) from smaps_rollup (USS = private clean + private dirty)."""
    vals: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                vals[parts[0][:-1]] = int(parts[1])
    mb = 1024.0
    return {"rss_mb": round(vals.get("Rss", 0) / mb, 2), "pss_mb": round(vals.get("Pss", 0) / mb, 2),
            "uss_mb": round((vals.get("Private_Clean", 0) + vals.get("Private_Dirty", 0)) / mb, 2)}


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "supervisor"],
                                capture_output=True, text=True).stdout.strip())
    return {"cores": os.cpu_count(), "python": sys.version.split()[0], "commit": commit + ("+dirty" if dirty else ""),
            "when": time.strftime("%Y-%m-%d %H:%M:%S")}


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def wait_for(pred, timeout: float, every: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


# ---------------------------------------------------------------------- rlsup


class Sock:
    """A minimal synchronous client of ``rlsup.sock`` (newline-delimited JSON): no subscription."""

    def __init__(self, path: Path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(str(path))
        self.buf = b""
        self.next_id = 1
        self.request("hello", version=1, client="bench")

    def send_many(self, reqs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        ids = []
        out = b""
        for r in reqs:
            rid = self.next_id
            self.next_id += 1
            ids.append(rid)
            out += json.dumps({"id": rid, **r}).encode() + b"\n"
        self.s.sendall(out)
        got: dict[int, dict[str, Any]] = {}
        while len(got) < len(ids):
            nl = self.buf.find(b"\n")
            if nl < 0:
                chunk = self.s.recv(1 << 20)
                if not chunk:
                    raise ConnectionError("supervisor closed the socket")
                self.buf += chunk
                continue
            line, self.buf = self.buf[:nl], self.buf[nl + 1:]
            msg = json.loads(line)
            if "id" in msg:
                got[msg["id"]] = msg
        return [got[i] for i in ids]

    def request(self, op: str, **kw: Any) -> dict[str, Any]:
        return self.send_many([{"op": op, **kw}])[0]

    def close(self) -> None:
        self.s.close()


def yaml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid YAML flow scalar


class RlsupRun:
    """One ``rlsup up --headless`` run of ``components`` (name -> dict(argv, env, progress))."""

    def __init__(self, base: Path, name: str, components: dict[str, dict[str, Any]], *, skip_checks: bool = True,
                 logs: dict[str, int] | None = None):
        self.base = base
        self.name = name
        self.run_dir = base / f"{name}-run"
        self.cfg = base / f"{name}.yaml"
        self.out = base / f"{name}.out"
        self.skip_checks = skip_checks
        lines = [f"name: {name}", "components:"]
        for cname, c in components.items():
            lines.append(f"  {cname}:")
            lines.append("    command: [" + ", ".join(yaml_str(a) for a in c["argv"]) + "]")
            lines.append("    restart: {policy: never}")
            if c.get("env"):
                lines.append("    env: {" + ", ".join(f"{k}: {yaml_str(v)}" for k, v in c["env"].items()) + "}")
            if c.get("progress"):
                lines.append(f"    progress: {{pattern: {yaml_str(c['progress'])}}}")
            if c.get("watch"):
                lines.append("    watch: [" + ", ".join(f"{{path: {yaml_str(w)}}}" for w in c["watch"]) + "]")
            if c.get("checkpoints"):
                lines.append(f"    resume: {{checkpoints: {yaml_str(c['checkpoints'])}, layout: prime-rl, "
                             "args: [--resume-step, '{step}']}")
        if logs:
            lines.append("logs: {" + ", ".join(f"{k}: {v}" for k, v in logs.items()) + "}")
        self.cfg.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen | None = None
        self.t_start = 0.0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        argv = [PY, "-m", "rlsup.supervisor.cli", "up", str(self.cfg), "--headless", "--run-dir", str(self.run_dir)]
        if self.skip_checks:
            argv.append("--skip-checks")
        self.t_start = time.perf_counter()
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env())

    def wait(self, timeout: float) -> tuple[int, float]:
        assert self.proc is not None
        rc = self.proc.wait(timeout)
        return rc, time.perf_counter() - self.t_start

    def wait_cpu(self, timeout: float) -> tuple[int, float, dict[str, float]]:
        """Wait for the supervisor to end, and read its CPU from its zombie before reaping it: its own
        (``self_s``) and that of the children it reaped (``children_s``: monitors, the zygote, and, through
        the monitors, the components)."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("rlsup did not end")
            time.sleep(0.005)
        whole = time.perf_counter() - self.t_start
        with open(f"/proc/{self.pid}/stat", "rb") as f:
            raw = f.read()
        fields = raw[raw.rfind(b")") + 2:].split()
        cpu = {"self_s": (int(fields[11]) + int(fields[12])) / TICK, "children_s": (int(fields[13]) + int(fields[14])) / TICK}
        rc = self.proc.wait(10)
        return rc, whole, cpu

    def state(self) -> dict[str, Any]:
        try:
            return json.loads((self.run_dir / "state.json").read_text())
        except (OSError, ValueError):
            return {}

    def sock(self) -> Sock:
        return wait_for(lambda: self._try_sock(), 120, what="rlsup.sock")

    def _try_sock(self) -> Sock | None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"rlsup exited early ({self.proc.returncode}): {self.out.read_text()[-2000:]}")
        try:
            return Sock(self.run_dir / "rlsup.sock")
        except OSError:
            return None

    def wait_running(self, sock: Sock, n: int, timeout: float = 300) -> dict[str, Any]:
        def ok():
            st = sock.request("snapshot", lines=0)["state"]
            comps = st["components"]
            return st if sum(1 for c in comps.values() if c.get("state") == "running") >= n else None
        return wait_for(ok, timeout, every=0.25, what=f"{n} components running")

    def monitor_pids(self, st: dict[str, Any] | None = None) -> dict[str, int]:
        st = st or self.state()
        return {n: c["monitor_pid"] for n, c in st.get("components", {}).items() if c.get("monitor_pid")}

    def child_pids(self, st: dict[str, Any] | None = None) -> dict[str, int]:
        st = st or self.state()
        return {n: c["pid"] for n, c in st.get("components", {}).items() if c.get("pid")}

    def zygote_pids(self, monitors: Iterable[int]) -> list[int]:
        mons = set(monitors)
        return [p for p in children(self.pid) if p not in mons and "shim.py" in cmdline(p)]

    def stop(self, timeout: float = 120) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGINT)  # a second Ctrl-C kills what is left
            self.proc.wait(30)


# ---------------------------------------------------------------------- supervisord


def supervisord_bin() -> Path:
    """supervisord 4.3.0 in its own venv under the cache (installed with pip on first use)."""
    venv = CACHE / f"supervisord-{SUPERVISORD_VERSION}"
    exe = venv / "bin" / "supervisord"
    if exe.exists():
        return venv / "bin"
    print(f"installing supervisor=={SUPERVISORD_VERSION} into {venv} ...", flush=True)
    subprocess.run([PY, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"supervisor=={SUPERVISORD_VERSION}"], check=True)
    return venv / "bin"


class Supervisord:
    """supervisord (foreground, ``-n``) with one ``[program:NAME]`` per component, stdout+stderr to a log
    file that never rotates; ``autostart`` as asked."""

    def __init__(self, base: Path, name: str, components: dict[str, dict[str, Any]], *, autostart: bool):
        self.bin = supervisord_bin()
        self.base = base
        self.dir = base / f"{name}-supervisord"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.conf = self.dir / "supervisord.conf"
        self.sock = self.dir / "sv.sock"
        self.logs = {n: self.dir / f"{n}.log" for n in components}
        parts = [
            "[unix_http_server]", f"file={self.sock}", "",
            "[supervisord]", f"logfile={self.dir / 'supervisord.log'}", f"pidfile={self.dir / 'supervisord.pid'}",
            f"childlogdir={self.dir}", "nodaemon=true", "minfds=4096", "minprocs=512", "loglevel=info", "",
            "[rpcinterface:supervisor]",
            "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface", "",
            "[supervisorctl]", f"serverurl=unix://{self.sock}", "",
        ]
        for n, c in components.items():
            envs = ",".join(f'{k}="{v}"' for k, v in (c.get("env") or {}).items())
            parts += [f"[program:{n}]", "command=" + shlex.join(c["argv"]),
                      f"autostart={'true' if autostart else 'false'}", "autorestart=false", "startsecs=0",
                      "startretries=0", "redirect_stderr=true", f"stdout_logfile={self.logs[n]}",
                      "stdout_logfile_maxbytes=0", "stdout_logfile_backups=0", "stopasgroup=true",
                      "killasgroup=true", "stopwaitsecs=5"]
            if envs:
                parts.append(f"environment={envs}")
            parts.append("")
        self.conf.write_text("\n".join(parts))
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        self.proc = subprocess.Popen([str(self.bin / "supervisord"), "-n", "-c", str(self.conf)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env(), cwd=str(self.dir))
        wait_for(lambda: self.sock.exists() and self.ctl("pid").returncode == 0, 60, what="supervisord")

    def ctl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.bin / "supervisorctl"), "-c", str(self.conf), *args], capture_output=True,
                              text=True, env=env())

    def status(self) -> dict[str, tuple[str, int | None]]:
        out = {}
        for line in self.ctl("status").stdout.splitlines():
            parts = line.split()
            if len(parts) >= 2:
                pid = None
                if "pid" in parts:
                    try:
                        pid = int(parts[parts.index("pid") + 1].rstrip(","))
                    except (ValueError, IndexError):
                        pass
                out[parts[0]] = (parts[1], pid)
        return out

    def wait_running(self, n: int, timeout: float = 300) -> dict[str, tuple[str, int | None]]:
        def ok():
            st = self.status()
            return st if sum(1 for s, _ in st.values() if s == "RUNNING") >= n else None
        return wait_for(ok, timeout, every=0.25, what=f"{n} supervisord programs running")

    def stop(self) -> None:
        """End supervisord and every program. supervisord stops its groups one after the other (one
        per program here), which takes minutes for 200: what is left after 10 s is killed."""
        if self.proc is None or self.proc.poll() is not None:
            return
        pids = [p for _, p in self.status().values() if p]
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            for p in pids:
                try:
                    os.killpg(p, signal.SIGKILL)  # each program leads its own process group
                except OSError:
                    pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


# ---------------------------------------------------------------------- output


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [[str(x) for x in r] for r in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    out = []
    for k, r in enumerate(cells):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "MISSED")


def save(name: str, result: dict[str, Any], out: str | None = None) -> Path:
    path = Path(out) if out else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path
