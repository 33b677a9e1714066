"""`rlsup up CONFIG` with a `slurm:` block in a real tmux: submit, the job's state while pending, then the
TUI on the supervisor that runs in the job's batch step."""

from __future__ import annotations

import json
import shlex

from tests.conftest import PY, SCRIPTS, wait_for, write_config
from tests.tui.test_tmux_e2e import Tmux


def test_up_submits_then_opens_the_tui_on_the_job(slurm, tmp_path):
    run = tmp_path / "run"
    cfg = write_config(tmp_path, f"""
        run_dir: {run}
        slurm: {{nodes: 2, gpus_per_node: 2}}
        components:
          learner:
            nodes: 2
            gpus: 1
            command: {PY} {SCRIPTS}/stepper.py --total 100000 --sleep 0.2
            progress: {{preset: rlsup}}
    """)
    # Both nodes busy with another job first: the run's job pends, and `up` says so.
    blocker = slurm.cluster.run("sbatch", "--parsable", "-N2", "--exclusive", "--output=/dev/null", "--wrap", "sleep 600").stdout.strip()
    tmux = Tmux()
    try:
        env = {**slurm.env, "TERM": "xterm-256color", "RLSUP_GPU_SAMPLER": "fake:2xA40"}
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()
                           if k in ("PATH", "RLSUP_GPU_SAMPLER", "HOME", "SLURM_CONF", "TERM"))
        cmd = (f"cd {shlex.quote(str(tmp_path))} && env {exports} {shlex.quote(PY)} -m rlsup.supervisor.cli up "
               f"{shlex.quote(str(cfg))}; echo RLSUP-TUI-EXIT=$?; sleep 600")
        tmux("new-session", "-d", "-s", "t", "-x", "200", "-y", "50", cmd)
        tmux("set-option", "-t", "t", "status", "off")
        tmux("set-option", "-s", "escape-time", "0")
        tmux("set-option", "-g", "window-size", "manual")
        tmux("resize-window", "-t", "t", "-x", "200", "-y", "50")
        screen = tmux.wait_screen("PENDING", 60)
        assert "submitted batch job" in screen
        slurm.cluster.run("scancel", blocker)
        tmux.wait_screen("learner", 90)
        wait_for(lambda: "running" in tmux.screen(), 60, 0.3, what="the learner running in the TUI")
        wait_for(lambda: "Step" in tmux.screen() or "/100000" in tmux.screen(), 60, 0.3, what="progress")
        # The GPU panel: every node's GPUs, sampled by a step on each node, grouped by node.
        n1, n2 = slurm.cluster.nodes
        tmux.wait_screen(f"── {n2}", 60)
        assert f"── {n1}" in tmux.screen()
        st = json.loads(slurm.rlsup("status", "--run-dir", str(run), "--json").stdout)
        assert sorted({g.get("node") for g in st["gpus"]}) == [n1, n2] and len(st["gpus"]) == 4, st["gpus"]
        # The step's processes are under slurmstepd: the `srun` client's few MB are not the learner's.
        res = wait_for(lambda: json.loads(slurm.rlsup("status", "--run-dir", str(run), "--json").stdout)
                       ["components"]["learner"]["resources"], 30, 0.5, what="a resources sample")
        assert res["rss_mb"] is None and res["cpu_pct"] is None, res
        tmux.keys("q")  # leave the TUI: the job goes on
        tmux.wait_screen("RLSUP-TUI-EXIT=0", 30)
        job = slurm.job_of(run)
        assert slurm.job_state(job) == "RUNNING"
        assert slurm.rlsup("down", "--run-dir", str(run)).returncode == 0
        wait_for(lambda: slurm.job_state(job) in ("COMPLETED", "GONE"), 30, what="the job ended")
    finally:
        tmux.kill()
