"""A real Slurm cluster on this host for the Slurm tests: munged, slurmctld and two slurmd.

Everything lives in one temp dir (config, state, spool, logs, the munge key and socket, and fake GPUs
as ``mknod`` character devices that gres.conf lists); every daemon is a child started in the
foreground (``-D``/``-F``) and stopped by its pid, so nothing is left behind. Clients find the
cluster through ``SLURM_CONF`` (set in :meth:`Cluster.env`), and munge through ``AuthInfo=socket=``.

The two nodes are ``<prefix>1`` and ``<prefix>2``, both ``NodeAddr=127.0.0.1`` with their own port;
``SlurmdTimeout=10`` so that a killed slurmd is noticed by slurmctld within the node-failure test.

``hide={node: dir}`` starts that node's slurmd in a mount namespace of its own with an empty tmpfs over
``dir``: every step on that node sees an empty directory there, as a node that does not mount the
cluster's shared filesystem would. The namespace (and its mount) ends with the last process in it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

NEEDED = ("slurmctld", "slurmd", "munged", "sbatch", "srun", "squeue", "scancel", "scontrol")


def missing() -> list[str]:
    """The Slurm and munge programs this host lacks (the tests skip with this list)."""
    paths = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [p for p in NEEDED if shutil.which(p, path=paths) is None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _which(p: str) -> str:
    found = shutil.which(p, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    assert found, p
    return found


class Cluster:
    def __init__(self, root: Path, *, nodes: int = 2, gpus_per_node: int = 2, cpus: int = 8, prefix: str = "rn",
                 hide: dict[str, Path] | None = None):
        self.root = root
        self.nodes = [f"{prefix}{i + 1}" for i in range(nodes)]
        self.gpus_per_node = gpus_per_node
        self.cpus = cpus
        self.partition = "rlsup"
        self.urgent = "urgent"  # the same nodes at a higher priority tier: a job there preempts (requeues) ours
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.conf = root / "slurm.conf"
        self.munge_sock = root / "munge" / "munge.sock"
        self.ctld_port = _free_port()
        self.node_ports = {n: _free_port() for n in self.nodes}
        self.hide = dict(hide or {})

    # ------------------------------------------------------------------ setup

    def env(self) -> dict[str, str]:
        """Client environment: where slurm.conf is (munge's socket is named in it)."""
        return {"SLURM_CONF": str(self.conf)}

    def _write(self) -> None:
        r = self.root
        for d in ("munge", "ctld", "spool", "log", "dev"):
            (r / d).mkdir(parents=True, exist_ok=True)
        os.chmod(r / "munge", 0o711)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        gres = []
        for n in self.nodes:
            (r / "spool" / n).mkdir(exist_ok=True)
            for g in range(self.gpus_per_node):
                dev = r / "dev" / f"{n}-gpu{g}"
                if not dev.exists():
                    os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # a character device, like /dev/null
            gres.append(f"NodeName={n} Name=gpu File={r}/dev/{n}-gpu[0-{self.gpus_per_node - 1}]")
        (r / "gres.conf").write_text("AutoDetect=off\n" + "\n".join(gres) + "\n")
        lines = [
            "ClusterName=rlsuptest",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_sock}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={r}/ctld",
            f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldPidFile={r}/ctld/slurmctld.pid",
            f"SlurmdPidFile={r}/spool/%n/slurmd.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "SchedulerType=sched/builtin",
            "SchedulerParameters=sched_interval=1",
            "MpiDefault=none",
            "SlurmdTimeout=10",
            "SlurmctldTimeout=30",
            "MessageTimeout=5",
            "InactiveLimit=0",
            "KillWait=5",
            "MinJobAge=300",
            "ReturnToService=2",
            "JobRequeue=1",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "SlurmdParameters=config_overrides",
            "PropagateResourceLimits=NONE",
            # Preemption as clusters with spot-like partitions have it: a job of a higher tier requeues ours
            # after a grace time, and the job's own --signal is its notice (not SIGTERM to every task).
            "PreemptType=preempt/partition_prio",
            "PreemptMode=REQUEUE",
            "SlurmctldParameters=preempt_send_user_signal",
        ]
        for n in self.nodes:
            lines.append(f"NodeName={n} NodeAddr=127.0.0.1 NodeHostname={socket.gethostname()} "
                         f"Port={self.node_ports[n]} CPUs={self.cpus} Gres=gpu:{self.gpus_per_node} State=UNKNOWN")
        lines.append(f"PartitionName={self.partition} Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE "
                     "State=UP OverSubscribe=NO PriorityTier=1 PreemptMode=REQUEUE GraceTime=60")
        lines.append(f"PartitionName={self.urgent} Nodes={','.join(self.nodes)} MaxTime=INFINITE State=UP "
                     "OverSubscribe=NO PriorityTier=10 PreemptMode=OFF")
        self.conf.write_text("\n".join(x for x in lines if x) + "\n")

    def start(self, timeout: float = 60.0) -> Cluster:
        self._write()
        r = self.root
        log = open(r / "log" / "daemons.out", "ab")
        self.procs["munged"] = subprocess.Popen(
            [_which("munged"), "-F", "-f", f"--key-file={r}/munge/munge.key", f"--socket={self.munge_sock}",
             f"--pid-file={r}/munge/munged.pid", f"--log-file={r}/log/munged.log",
             f"--seed-file={r}/munge/munged.seed"], stdout=log, stderr=log, start_new_session=True)
        self._wait(lambda: self.munge_sock.exists(), 10, "munged")
        env = {**os.environ, **self.env()}
        self.procs["slurmctld"] = subprocess.Popen(
            [_which("slurmctld"), "-D", "-c", "-i", "-f", str(self.conf)], stdout=log, stderr=log, env=env,
            start_new_session=True)
        for n in self.nodes:
            self.start_node(n)
        self._wait(self.all_idle, timeout, "nodes idle")
        return self

    def start_node(self, node: str) -> None:
        log = open(self.root / "log" / "daemons.out", "ab")
        env = {**os.environ, **self.env()}
        argv = [_which("slurmd"), "-D", "-N", node, "-f", str(self.conf)]
        if node in self.hide:  # a node blind to that dir: slurmd (and so its steps) in a mount namespace of its own
            argv = [_which("unshare"), "-m", "--propagation", "private", "sh", "-c",
                    'mount -t tmpfs -o size=1m rlsup-not-shared "$0" && exec "$@"', str(self.hide[node]), *argv]
        self.procs[f"slurmd-{node}"] = subprocess.Popen(argv, stdout=log, stderr=log, env=env, start_new_session=True)

    def _wait(self, cond, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited ({p.returncode}) while waiting for {what}:\n{self.logs()}")
            with contextlib.suppress(Exception):
                if cond():
                    return
            time.sleep(0.2)
        raise TimeoutError(f"waited {timeout}s for {what}:\n{self.logs()}")

    def logs(self) -> str:
        out = []
        for f in sorted((self.root / "log").glob("*")):
            with contextlib.suppress(OSError):
                out.append(f"--- {f.name}\n" + f.read_text(errors="replace")[-3000:])
        return "\n".join(out)

    # ------------------------------------------------------------------ queries

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, env={**os.environ, **self.env()},
                              check=check, timeout=timeout)

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t").stdout
        return {a: b for a, b in (line.split() for line in out.splitlines() if line.strip())}

    def all_idle(self) -> bool:
        st = self.node_states()
        return all(st.get(n, "").rstrip("*") in ("idle",) for n in self.nodes)

    def jobs(self) -> list[tuple[str, str]]:
        out = self.run("squeue", "-h", "-o", "%i %T").stdout
        return [tuple(line.split()) for line in out.splitlines() if line.strip()]  # type: ignore[misc]

    def steps(self, job: str) -> list[tuple[str, str, str]]:
        """(step id, name, nodes) of a job's running steps."""
        out = self.run("squeue", "-h", "-s", "-j", job, "-o", "%i %j %N", check=False).stdout
        return [tuple(line.split(None, 2)) for line in out.splitlines() if line.strip()]  # type: ignore[misc]

    def kill_node(self, node: str) -> None:
        """A node dies: its slurmd and every process of its steps (slurmstepd and the tasks)."""
        p = self.procs.pop(f"slurmd-{node}")
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        log = f"{self.root}/log/slurmd-{node}.log"
        for pid in _pids():
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                fds = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            except OSError:
                continue
            # slurmstepd of that node holds its slurmd's log open; the tasks carry its name.
            if log in fds or f"SLURMD_NODENAME={node}".encode() in env:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    # ------------------------------------------------------------------ teardown

    def stop(self) -> None:
        """Cancel every job, stop the daemons and every process they started (steps included)."""
        with contextlib.suppress(Exception):
            self.run("scancel", "-u", "root", check=False, timeout=10)
        for name in sorted(self.procs, key=lambda n: (n == "munged", n == "slurmctld")):
            p = self.procs[name]
            if p.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(OSError):
                        os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        self.procs.clear()
        # slurmstepd and job processes left by a killed slurmd: they name our spool dir or cluster's conf.
        mark = str(self.root).encode()
        for _ in range(3):
            found = False
            for pid in _pids():
                if pid == os.getpid():
                    continue
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                    env = Path(f"/proc/{pid}/environ").read_bytes()
                except OSError:
                    continue
                if mark in cmd or mark in env:
                    found = True
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
            if not found:
                break
            time.sleep(0.2)


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]
