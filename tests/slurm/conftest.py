"""Fixtures of the Slurm tests: one real cluster (munged, slurmctld, two slurmd) for the session.

They run in `.ci/slurm.sh` (which installs Debian's slurm-wlm and munge); the README's test command
skips them with the reason, as it does where Slurm is not installed or the tests are not root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import PY, cli_env, wait_for
from tests.slurm.cluster import Cluster, missing


def _skip_reason() -> str | None:
    if missing():
        return (f"Slurm is not installed ({', '.join(missing())} missing): .ci/slurm.sh installs slurm-wlm and "
                "munge and runs these tests")
    if os.geteuid() != 0:
        return "the Slurm tests start slurmd, which must run as root"
    if os.environ.get("RLSUP_SLURM") != "1":
        return ("the Slurm tests run in .ci/slurm.sh against a real slurmctld/slurmd (RLSUP_SLURM=1 python -m pytest -n 0 "
                "tests/slurm runs them here)")
    return None


def pytest_collection_modifyitems(config, items):
    reason = _skip_reason()
    if reason is None:
        return
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def cluster():
    root = Path(tempfile.mkdtemp(prefix="rlsup-slurm-"))
    c = Cluster(root)
    try:
        c.start()
        yield c
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


class Slurm:
    """The cluster as a test sees it: the environment of a login node, and clean-up after the test."""

    def __init__(self, cluster: Cluster, tmp_path: Path):
        self.cluster = cluster
        self.tmp = tmp_path
        self.env = cli_env({**cluster.env(), "RLSUP_GPU_SAMPLER": "none"})
        self.procs: list[subprocess.Popen] = []

    def rlsup(self, *args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([PY, "-m", "rlsup.supervisor.cli", *args], capture_output=True, text=True,
                              cwd=self.tmp, env={**self.env, **(env or {})}, timeout=timeout, stdin=subprocess.DEVNULL)

    def popen(self, *args: str, env: dict | None = None) -> subprocess.Popen:
        p = subprocess.Popen([PY, "-m", "rlsup.supervisor.cli", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, cwd=self.tmp, env={**self.env, **(env or {})},
                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(p)
        return p

    def job_of(self, run_dir: Path) -> str:
        def find():
            out = self.cluster.run("squeue", "-h", "-o", "%i %k").stdout
            for line in out.splitlines():
                jid, _, comment = line.partition(" ")
                if comment.strip() == f"rlsup run_dir={run_dir}":
                    return jid
            return None
        return wait_for(find, 30, what=f"the job of {run_dir}")

    def job_state(self, job: str) -> str:
        out = self.cluster.run("scontrol", "show", "job", "-o", job, check=False).stdout
        for field in out.split():
            if field.startswith("JobState="):
                return field.split("=", 1)[1]
        return "GONE"

    def explain(self, job: str, run_dir: Path) -> str:
        """What a failed wait on a job needs to be understood from CI's log alone: the job as Slurm has it,
        its batch output, the run's last events, and Slurm's own logs."""
        parts = [self.cluster.run("scontrol", "show", "job", job, check=False).stdout]
        for out in sorted(run_dir.glob("slurm-*.out")):
            parts.append(f"--- {out.name}\n" + out.read_text(errors="replace")[-3000:])
        journal = run_dir / "events.jsonl"
        if journal.exists():
            parts.append("--- events.jsonl (last 25)\n" + "\n".join(journal.read_text(errors="replace").splitlines()[-25:]))
        for log in sorted((run_dir / "logs").glob("supervisor*.log")):
            parts.append(f"--- {log.name}\n" + log.read_text(errors="replace")[-3000:])
        return "\n".join(parts + [self.cluster.logs()])

    def cleanup(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.cluster.run("scancel", "-u", "root", check=False)
        for n in self.cluster.nodes:
            if f"slurmd-{n}" not in self.cluster.procs:
                self.cluster.start_node(n)
        wait_for(lambda: not [j for j in self.cluster.jobs() if j[1] in ("RUNNING", "COMPLETING", "PENDING")],
                 60, what="no jobs left")
        wait_for(self.cluster.all_idle, 60, what="nodes idle again")


@pytest.fixture
def slurm(cluster, tmp_path):
    s = Slurm(cluster, tmp_path)
    try:
        yield s
    finally:
        s.cleanup()
