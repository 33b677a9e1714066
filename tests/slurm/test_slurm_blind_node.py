"""A run dir that one node of the job does not see, against a real Slurm: the in-job check's failure path.

The cluster of this module has two nodes, and its second node's slurmd runs in a mount namespace of its
own with an empty tmpfs over the directory that holds the run dirs (``Cluster(hide=...)``): a step on that
node finds an empty directory where the run dir is, as a node that does not mount the cluster's shared
filesystem would. The login node (this test) and the batch node see it. ``rlsup check`` cannot tell (every
node of this cluster is this host), so the supervisor's check inside the job must: the user sees the
blind node named and what to do, the job ends at once with a non-zero code, nothing is started on the
nodes, and the allocation is released.
"""

from __future__ import annotations

import json
import shlex
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.conftest import PY, read_events, wait_for, write_config
from tests.slurm.cluster import Cluster
from tests.slurm.conftest import Slurm
from tests.tui.test_tmux_e2e import Tmux


@pytest.fixture(scope="module")
def blind_cluster():
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is needed to hide a directory from one node")
    root = Path(tempfile.mkdtemp(prefix="rlsup-slurm-blind-"))
    shared = root / "shared"  # what the second node does not see
    shared.mkdir()
    c = Cluster(root, prefix="bn", hide={"bn2": shared})
    c.shared = shared  # type: ignore[attr-defined]
    try:
        c.start()
        # The premise, checked on the real nodes: bn1 sees a file there, bn2 an empty directory.
        (shared / "probe").write_text("x")
        for node, want in (("bn1", "probe"), ("bn2", "")):
            out = c.run("srun", "-N1", "-w", node, "--gres=none", "ls", "-A", str(shared)).stdout.strip()
            assert out == want, (node, out)
        (shared / "probe").unlink()
        yield c
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def blind(blind_cluster, tmp_path):
    s = Slurm(blind_cluster, tmp_path)
    try:
        yield s
    finally:
        s.cleanup()


def _config(s: Slurm, name: str) -> tuple[Path, Path]:
    run = s.cluster.shared / name  # type: ignore[attr-defined]
    cfg = write_config(s.tmp, f"""
        run_dir: {run}
        slurm: {{nodes: 2, time: "10:00"}}
        components:
          server:
            nodes: 1
            command: [sleep, "600"]
          trainer:
            nodes: 1
            depends_on: [server]
            command: [sleep, "600"]
    """)
    return run, cfg


def _ended_for_the_blind_node(s: Slurm, run: Path) -> dict:
    """What the journal says: the run ended before anything started, naming the blind node."""
    events = read_events(run)
    assert not [e for e in events if e["kind"] == "started"], events  # no component on a blind node
    ended = [e for e in events if e["kind"] == "run_ended"]
    assert len(ended) == 1, events
    assert ended[0]["exit_code"] != 0
    assert "bn2" in ended[0]["reason"] and "bn1" not in ended[0]["reason"], ended[0]
    assert "run_dir" in ended[0]["reason"] and "shared filesystem" in ended[0]["reason"], ended[0]
    return ended[0]


def _released(s: Slurm) -> None:
    wait_for(lambda: not [j for j in s.cluster.jobs() if j[1] in ("RUNNING", "PENDING", "COMPLETING")], 30,
             what="no job left in squeue")
    wait_for(s.cluster.all_idle, 30, what="the nodes idle again")


def test_up_in_the_tui_says_which_node_does_not_see_the_run_dir_and_ends_the_job(blind):
    run, cfg = _config(blind, "run-tui")
    tmux = Tmux()
    try:
        env = {**blind.env, "TERM": "xterm-256color"}
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()
                           if k in ("PATH", "RLSUP_GPU_SAMPLER", "HOME", "SLURM_CONF", "TERM"))
        cmd = (f"cd {shlex.quote(str(blind.tmp))} && env {exports} {shlex.quote(PY)} -m rlsup.supervisor.cli up "
               f"{shlex.quote(str(cfg))}; echo RLSUP-UP-EXIT=$?; sleep 600")
        tmux("new-session", "-d", "-s", "t", "-x", "200", "-y", "50", cmd)
        tmux("set-option", "-t", "t", "status", "off")
        screen = tmux.wait_screen("RLSUP-UP-EXIT=", 120)
        assert "submitted batch job" in screen, screen
        code = screen.split("RLSUP-UP-EXIT=")[1].split()[0]
        assert code != "0", screen
        flat = " ".join(screen.split())  # the message may wrap at the window's width
        assert "not visible on bn2" in flat and "run_dir" in flat and "shared filesystem" in flat, screen
    finally:
        tmux.kill()
    _ended_for_the_blind_node(blind, run)
    _released(blind)


def test_up_detached_then_status_says_why_the_run_ended(blind):
    run, cfg = _config(blind, "run-d")
    r = blind.rlsup("up", str(cfg), "-d")
    assert r.returncode == 0, r.stdout + r.stderr  # -d only submits: the job is the run
    assert "submitted batch job" in r.stdout
    job = r.stdout.split("submitted batch job ")[1].split()[0]
    wait_for(lambda: blind.job_state(job) not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"), 90,
             what="the job ended")
    assert blind.job_state(job) in ("FAILED", "GONE"), blind.job_state(job)
    _released(blind)
    end = _ended_for_the_blind_node(blind, run)
    st = blind.rlsup("status", "--run-dir", str(run))
    out = " ".join((st.stdout + st.stderr).split())
    assert "not visible on bn2" in out and "shared filesystem" in out, st.stdout + st.stderr
    view = json.loads(blind.rlsup("status", "--run-dir", str(run), "--json").stdout)
    assert all(c.get("state") not in ("running", "starting") for c in view["components"].values()), view
    assert end["exit_code"] == 1


def test_up_headless_prints_the_reason_and_exits_non_zero(blind):
    run, cfg = _config(blind, "run-headless")
    r = blind.rlsup("up", str(cfg), "--headless")
    out = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 1, r.stdout + r.stderr
    assert "not visible on bn2" in out and "put run_dir on the cluster's shared filesystem" in out, out
    _ended_for_the_blind_node(blind, run)
    _released(blind)
