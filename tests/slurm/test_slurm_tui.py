"""`rlsup up CONFIG` with a `slurm:` block in a real tmux: submit, the job's state while pending, then the
TUI on the supervisor that runs in the job's batch step."""

from __future__ import annotations

import json
import shlex

import pytest

from tests.conftest import PY, SCRIPTS, read_events, wait_for, write_config
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
        _tui_up(tmux, slurm, tmp_path, cfg)
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


def _tui_up(tmux: Tmux, slurm, tmp_path, cfg, *args: str, **env: str) -> None:
    """`rlsup up CONFIG` (or `rlsup ARGS`) in a 200x50 tmux, with the login node's environment (and ``env``)."""
    env = {**slurm.env, "TERM": "xterm-256color", "RLSUP_GPU_SAMPLER": "fake:2xA40", **env}
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()
                       if k in ("PATH", "RLSUP_GPU_SAMPLER", "HOME", "SLURM_CONF", "TERM", "RLSUP_SLURM_BRIDGE"))
    argv = " ".join(shlex.quote(a) for a in (args or ("up", str(cfg))))
    cmd = (f"cd {shlex.quote(str(tmp_path))} && env {exports} {shlex.quote(PY)} -m rlsup.supervisor.cli {argv}; "
           "echo RLSUP-TUI-EXIT=$?; sleep 600")
    tmux("new-session", "-d", "-s", "t", "-x", "200", "-y", "50", cmd)
    tmux("set-option", "-t", "t", "status", "off")
    tmux("set-option", "-s", "escape-time", "0")
    tmux("set-option", "-g", "window-size", "manual")
    tmux("resize-window", "-t", "t", "-x", "200", "-y", "50")


@pytest.mark.parametrize("opened", ["before the end", "after the end"])
def test_the_tui_on_an_ended_jobs_run_follows_it_into_the_job_its_resume_submits(slurm, tmp_path, opened):
    """`rlsup up CONFIG` (the TUI on job J), then `rlsup down` from another shell (or `rlsup attach` opened after
    it), reached through `srun ... rlsup bridge` as from a login node that cannot reach the compute node's
    socket: the job ends and the TUI says the run ended. `rlsup up CONFIG --resume -d` submits job K: the TUI
    attaches to K's supervisor by itself (it stayed on J's ended run for good, its commands refused) and its
    keys work again."""
    run = tmp_path / "run"
    cfg = write_config(tmp_path, f"""
        run_dir: {run}
        slurm: {{nodes: 1}}
        components:
          learner:
            command: {PY} {SCRIPTS}/stepper.py --total 100000 --sleep 0.2
            progress: {{preset: rlsup}}
    """)
    tmux = Tmux()
    try:
        if opened == "before the end":
            _tui_up(tmux, slurm, tmp_path, cfg, RLSUP_SLURM_BRIDGE="srun")
            wait_for(lambda: "running" in tmux.screen() and "/100000" in tmux.screen(), 120, 0.3,
                     what="the learner running in the TUI")
        else:
            assert slurm.rlsup("up", str(cfg), "-d").returncode == 0
            wait_for(lambda: any(e["kind"] == "started" for e in read_events(run)) if run.exists() else False,
                     120, 0.3, what="the learner started")
        first = slurm.job_of(run)
        assert slurm.rlsup("down", "--run-dir", str(run)).returncode == 0
        if opened == "after the end":
            _tui_up(tmux, slurm, tmp_path, cfg, "attach", "--run-dir", str(run), RLSUP_SLURM_BRIDGE="srun")
        tmux.wait_screen("run ended · read-only", 60)
        wait_for(lambda: slurm.job_state(first) in ("COMPLETED", "GONE"), 60, what="the first job ended")
        up = slurm.rlsup("up", str(cfg), "--resume", "-d")
        assert up.returncode == 0, up.stdout + up.stderr
        again = slurm.job_of(run)
        assert again != first
        tmux.wait_screen("● attached", 90)
        tmux.wait_gone("run ended")
        tmux.wait_screen("2/0", 30)  # the att/rst column: the resumed run's second attempt
        # through srun into the new job (this host's socket would do here, not on a cluster)
        wait_for(lambda: any(st[1] == "rlsup:bridge" for st in slurm.cluster.steps(again)), 30,
                 what="the TUI's bridge step in the new job")
        tmux.keys("1", "r")
        tmux.wait_screen("Restart learner?")  # not "r: not possible" (an ended run is read-only)
        tmux.keys("y")
        wait_for(lambda: any(e["kind"] == "started" and e["component"] == "learner" and e.get("attempt") == 3
                             for e in read_events(run)), 60, 0.3, what="learner attempt 3 in the journal")
        tmux.keys("q")
        tmux.wait_screen("RLSUP-TUI-EXIT=0", 30)
        assert slurm.rlsup("down", "--run-dir", str(run)).returncode == 0
        wait_for(lambda: slurm.job_state(again) in ("COMPLETED", "GONE"), 60, what="the second job ended")
    finally:
        tmux.kill()
