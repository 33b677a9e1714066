"""Whether the run dir is on a filesystem every node of the allocation sees (``rlsup check``).

The supervisor, every monitor's log, the journal and the checkpoints live in the run dir, and the
supervisor runs on the job's first node while `rlsup attach/status/logs` run on a login node: a run
dir on a node-local disk splits the run in pieces that never meet. How it is decided:

- the filesystem type of the run dir (its nearest existing ancestor), from ``/proc/self/mountinfo``:
  network and parallel filesystems (NFS, Lustre, GPFS, BeeGFS, CephFS, WekaFS, FUSE mounts...) are
  shared; local ones (ext4, xfs, btrfs, tmpfs, overlay...) are not;
- unless every node of the partition is this host (``scontrol show node``: NodeHostname), as on a
  one-machine test cluster, where any filesystem is seen by all of its nodes.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from ..config.placement import expand_hostlist
from .jobs import key_values, run, tool
from .launcher import running_job

LOCAL = {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "f2fs", "vfat", "exfat", "ramfs", "ntfs",
         "ntfs3", "reiserfs", "jfs", "squashfs", "devtmpfs"}


def filesystem(path: str, mountinfo: Iterable[str] | None = None) -> tuple[str, str]:
    """(mount point, filesystem type) of ``path`` (its nearest existing ancestor on this machine)."""
    p = os.path.abspath(path)
    if mountinfo is None:
        while not os.path.exists(p) and p != "/":
            p = os.path.dirname(p)
        p = os.path.realpath(p)
        try:
            with open("/proc/self/mountinfo") as f:
                mountinfo = f.read().splitlines()
        except OSError:
            return "/", "unknown"
    best = ("/", "unknown")
    for line in mountinfo:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        mnt = fields[4].replace("\\040", " ")
        fstype = right.split()[0]
        if (p == mnt or p.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[0]):
            best = (mnt, fstype)
    return best


def node_hosts(partition: str | None = None) -> list[str] | None:
    """NodeHostname of every node of the partition (None where scontrol cannot say)."""
    if (out := run(["scontrol", "show", "node", "-o"], 20)) is None:
        return None
    p = run(["scontrol", "show", "partition", "-o", partition], 20) if partition else None
    part = key_values(p.stdout) if p is not None else {}
    parts = expand_hostlist(part["Nodes"]) if "Nodes" in part else None
    hosts = [f.get("NodeHostName") or f.get("NodeHostname") or f.get("NodeName") or ""
             for f in map(key_values, out.stdout.splitlines()) if parts is None or f.get("NodeName") in parts]
    return hosts or None


def problem(run_dir: str, partition: str | None = None, *, hosts: list[str] | None = None,
            mountinfo: Iterable[str] | None = None) -> tuple[str, str] | None:
    """(message, fix) when the run dir is not on a filesystem every node sees; None when it is."""
    mnt, fstype = filesystem(run_dir, mountinfo)
    base = fstype.split(".", 1)[0]
    if fstype not in LOCAL and base not in LOCAL:
        return None  # nfs, lustre, gpfs, beegfs, ceph, fuse.*: shared (or unknown: not ours to refuse)
    hosts = node_hosts(partition) if hosts is None else hosts
    if hosts and all(h in (socket.gethostname(), "localhost") for h in hosts):
        return None  # every node of the cluster is this host
    return (f"the run dir {run_dir} is on {fstype} ({mnt}), a filesystem local to this machine: the job's "
            "nodes will not see its journal, logs and checkpoints",
            "put run_dir on the cluster's shared filesystem (NFS, Lustre, GPFS...), e.g. "
            "run_dir: /shared/$USER/runs/<name>")


# Run once per node: each node answers for itself, so a node that answers nothing (its task never ran)
# is not mistaken for one that sees the run dir.
PROBE = 'if test -e "$1"; then echo "rlsup-sees $SLURMD_NODENAME"; else echo "rlsup-blind $SLURMD_NODENAME"; fi'


def probe_argv(job_id: str, nodes: list[str], marker: str) -> list[str]:
    """One overlapping step, one task per node of the job, that looks for ``marker``."""
    return [tool("srun"), f"--jobid={job_id}", "--overlap", f"--nodes={len(nodes)}",
            f"--ntasks={len(nodes)}", "--ntasks-per-node=1", f"--nodelist={','.join(nodes)}", "--gres=none",
            "--quiet", "--job-name=rlsup:shared-check", "sh", "-c", PROBE, "sh", marker]


def verdict(run_dir: str, nodes: list[str], stdout: str, returncode: int | None = 0, stderr: str = "") -> str | None:
    """The error from the probe's output (None: every node saw the marker)."""
    said = [(word, node.strip()) for word, _, node in (line.strip().partition(" ") for line in stdout.splitlines())]
    seen = {node for word, node in said if word == "rlsup-sees" and node}
    blind = {node for word, node in said if word == "rlsup-blind" and node}
    if blind:
        return (f"the run dir {run_dir} is not visible on {', '.join(sorted(blind))}: put run_dir on the cluster's "
                "shared filesystem (the journal, logs and checkpoints must be seen by every node)")
    silent = [n for n in nodes if n not in seen]
    if silent:
        err = " ".join(stderr.split())[-300:]
        return (f"could not check whether {', '.join(silent)} see the run dir {run_dir}: the check's step "
                f"(srun --overlap) exited {returncode}" + (f": {err}" if err else " with no answer from those nodes"))
    return None


def check_in_job(run_dir: str, job_id: str, nodes: list[str], timeout: float = 60.0) -> str | None:
    """Inside the job: does every node see the run dir? A marker file written here, looked for on each
    node by one overlapping step (:data:`PROBE`). The error, or None."""
    marker = os.path.join(run_dir, f".rlsup-shared-{uuid.uuid4().hex[:12]}")
    try:
        with open(marker, "w") as f:
            f.write("rlsup: is this file visible on every node of the job?\n")
        try:
            p = subprocess.run(probe_argv(job_id, nodes, marker), capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.SubprocessError) as e:
            return None if isinstance(e, FileNotFoundError) else f"could not check the run dir on the nodes: {e}"
        return verdict(run_dir, nodes, p.stdout, p.returncode, p.stderr)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(marker)


def check_job(cfg: Any, environ: Mapping[str, str] | None = None) -> str | None:
    """:func:`check_in_job` for a run in a Slurm job of two nodes or more (None elsewhere)."""
    job = running_job(cfg, environ)
    if job is None or len(job[1]) < 2:
        return None
    return check_in_job(str(cfg.run_dir), *job)
