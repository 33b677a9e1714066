"""Multi-node runs against a real Slurm (slurmctld + two slurmd on this host): the user's path.

`rlsup up CONFIG` with a `slurm:` block submits the job from the "login node" (this test), the
supervisor runs in the job's batch step, and each component attempt is an srun step on its nodes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import PY, SCRIPTS, free_port, read_events, wait_for, write_config

GRACEFUL = """import signal, sys, time, os
def term(*a):
    print("got SIGTERM: saving", flush=True); time.sleep(1.0); print("saved, bye", flush=True); sys.exit(0)
signal.signal(signal.SIGTERM, term)
print("up on", os.environ.get("SLURMD_NODENAME"), "step", os.environ.get("SLURM_STEP_ID"), flush=True)
while True: time.sleep(0.1)
"""


def _events(run: Path, kind: str, comp: str | None = None) -> list[dict]:
    return [e for e in read_events(run) if e["kind"] == kind and (comp is None or e.get("component") == comp)]


def _log(run: Path, comp: str) -> str:
    p = run / "logs" / f"{comp}.log"
    return p.read_text(errors="replace") if p.exists() else ""


def _graceful(tmp: Path) -> Path:
    p = tmp / "graceful_step.py"
    p.write_text(GRACEFUL)
    return p


def _anchor_and_trainer(tmp: Path, run: Path, trainer: str) -> Path:
    """A two-node run with `requeue: true`: an `anchor` on the first node (the batch node, which the
    node-failure tests keep) and a `trainer` on the second, given as its YAML lines (indented 4)."""
    return write_config(tmp, f"""
        run_dir: {run}
        slurm: {{nodes: 2, requeue: true}}
        components:
          anchor:
            nodes: 1
            command: {PY} {_graceful(tmp)}
          trainer:
            nodes: 1
""" + textwrap.indent(textwrap.dedent(trainer), " " * 12))


def test_two_components_on_two_nodes_then_the_allocation_is_released(slurm, tmp_path):
    run = tmp_path / "run"
    port = free_port()
    cfg = write_config(tmp_path, f"""
        run_dir: {run}
        slurm: {{nodes: 2, gpus_per_node: 2, time: "10:00"}}
        components:
          inference:
            nodes: 1
            gpus: 2
            shell: true
            command: echo "inference on $SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES"; exec {PY} {SCRIPTS}/http_server.py {port} {tmp_path}/down
            # The README's URL: this test cluster's node names (rn1, rn2) are not in DNS; RLSUP_HEAD_C is
            # Slurm's NodeAddr of the component's first node (127.0.0.1 here), which reaches it.
            ready: {{http: "http://${{RLSUP_HEAD_INFERENCE}}:{port}/health", timeout: 60}}
          trainer:
            nodes: 1
            depends_on: {{inference: ready}}
            command: [sh, -c, 'echo "trainer on $SLURMD_NODENAME inference on $RLSUP_NODES_INFERENCE at ${{RLSUP_HEAD_INFERENCE}} nnodes=$RLSUP_NNODES_TRAINER gpus=$CUDA_VISIBLE_DEVICES"; curl -sf http://$RLSUP_HEAD_INFERENCE:{port}/health && echo " reached"; sleep 2']
            restart: {{policy: never}}
            exit_on_end: true
    """)
    r = slurm.rlsup("up", str(cfg), "--headless")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "submitted batch job" in r.stdout
    n1, n2 = slurm.cluster.nodes
    inf, tr = _log(run, "inference"), _log(run, "trainer")
    assert f"0: inference on {n1} gpus=0,1" in inf
    assert f"0: trainer on {n2} inference on {n1} at 127.0.0.1 nnodes=1 gpus=" in tr  # a CPU component: no GPU
    assert " reached" in tr, tr  # ${RLSUP_HEAD_INFERENCE} reaches the server where its node name does not resolve
    # The server on the batch node answered its probe, though its process is Slurm's, not a child of ours.
    assert _events(run, "ready", "inference")
    assert len(_events(run, "completed", "trainer")) == 1
    started = _events(run, "run_started")
    assert started[0]["slurm"]["job_id"] and started[0]["slurm"]["restart_count"] == 0
    # The run ended, so did the job: nothing holds the nodes.
    wait_for(slurm.cluster.all_idle, 30, what="nodes idle after the run")
    assert not [j for j in slurm.cluster.jobs() if j[1] in ("RUNNING", "PENDING")]


def test_a_crash_is_restarted_as_a_new_step_in_the_same_allocation(slurm, tmp_path):
    run = tmp_path / "run"
    once = tmp_path / "once"
    cfg = write_config(tmp_path, f"""
        run_dir: {run}
        slurm: {{nodes: 2}}
        components:
          trainer:
            nodes: 2
            shell: true
            command: echo "job=$SLURM_JOB_ID step=$SLURM_STEP_ID rank=$SLURM_PROCID"; sleep 1; if [ ! -e {once} ] && [ "$SLURM_PROCID" = 1 ]; then touch {once}; exit 3; fi; sleep 1
            restart: {{backoff: {{initial: 0.2, max: 0.2}}}}
    """)
    r = slurm.rlsup("up", str(cfg), "--headless")
    assert r.returncode == 0, r.stdout + r.stderr
    started = _events(run, "started", "trainer")
    assert len(started) == 2
    ids = [e["step_id"] for e in started]
    assert all(ids) and len(set(ids)) == 2 and len({i.split(".")[0] for i in ids}) == 1, ids  # J.S, J.S'
    assert started[0]["nodes"] == slurm.cluster.nodes
    exited = _events(run, "exited", "trainer")
    assert exited[0]["exit_code"] not in (0, None)  # srun: the highest of its tasks (rank 0 got SIGTERM from --kill-on-bad-exit)
    log = _log(run, "trainer")
    steps = {line.split("step=")[1].split()[0] for line in log.splitlines() if "step=" in line}
    jobs = {line.split("job=")[1].split()[0] for line in log.splitlines() if "job=" in line}
    assert len(steps) == 2 and len(jobs) == 1, log  # a new step, the same allocation
    assert "rank=0" in log and "rank=1" in log  # one task per node, labelled
    assert "task 1: Exited with exit code 3" in log  # srun's attribution to rank and node


def test_down_stops_the_step_through_scancel_so_its_sigterm_handler_runs(slurm, tmp_path):
    run = tmp_path / "run"
    cfg = write_config(tmp_path, f"""
        run_dir: {run}
        slurm: {{nodes: 2}}
        components:
          server:
            nodes: 1
            command: {PY} {_graceful(tmp_path)}
          trainer:
            nodes: 1
            depends_on: [server]
            command: {PY} {_graceful(tmp_path)}
            stop: {{signal: SIGTERM, timeout: 20}}
    """)
    r = slurm.rlsup("up", str(cfg), "-d")
    assert r.returncode == 0, r.stdout + r.stderr
    job = slurm.job_of(run)
    wait_for(lambda: "up on" in _log(run, "trainer") and "up on" in _log(run, "server"), 60, what="both up")
    d = slurm.rlsup("down", "--run-dir", str(run))
    assert d.returncode == 0, d.stdout + d.stderr
    for comp in ("server", "trainer"):
        log = _log(run, comp)
        # SIGTERM to the srun client would have SIGKILLed the step with no grace: the handler finished.
        assert "got SIGTERM: saving" in log and "saved, bye" in log, log
    stopped = [e["component"] for e in _events(run, "stopped")]
    assert stopped.index("trainer") < stopped.index("server")  # dependency order
    wait_for(lambda: slurm.job_state(job) in ("COMPLETED", "GONE"), 30, what="the job ended")
    wait_for(slurm.cluster.all_idle, 30, what="allocation released")


def test_supervisor_killed_inside_the_job_is_replaced_and_adopts_the_steps(slurm, tmp_path):
    run = tmp_path / "run"
    cfg = write_config(tmp_path, f"""
        run_dir: {run}
        slurm: {{nodes: 2}}
        components:
          trainer:
            nodes: 2
            command: {PY} {_graceful(tmp_path)}
    """)
    assert slurm.rlsup("up", str(cfg), "-d").returncode == 0
    job = slurm.job_of(run)
    wait_for(lambda: _log(run, "trainer").count("up on") == 2, 60, what="trainer up on both nodes")
    # `started` is journalled once Slurm lists the step (its id): the tasks may print before that.
    wait_for(lambda: _events(run, "started", "trainer"), 30, what="the trainer's start journalled")
    owner = json.loads((run / "rlsup.lock").read_text())
    steps_before = [s for s in slurm.cluster.steps(job) if s[1].startswith("rlsup:trainer")]

    def samplers() -> set[str]:
        return {s[0] for s in slurm.cluster.steps(job) if s[1] == "rlsup:gpus"}
    samplers_before = wait_for(lambda: (lambda g: g if len(g) == 2 else None)(samplers()), 60,
                               what="a GPU sampler step on each node")
    os.kill(owner["pid"], signal.SIGKILL)
    wait_for(lambda: _events(run, "adopted", "trainer"), 60, what="the new supervisor adopted the trainer")
    # The new supervisor's own samplers, one per node; the old ones (no reader any more) cancelled.
    wait_for(lambda: (lambda g: len(g) == 2 and not g & samplers_before)(samplers()), 60,
             what=f"two new GPU sampler steps and none of {sorted(samplers_before)}")
    new_owner = json.loads((run / "rlsup.lock").read_text())
    assert new_owner["pid"] != owner["pid"]
    steps_after = [s for s in slurm.cluster.steps(job) if s[1].startswith("rlsup:trainer")]
    assert steps_after == steps_before  # the same step ran on: adopted, not restarted
    assert len(_events(run, "started", "trainer")) == 1
    # ... and the adopted step still stops through Slurm, gracefully.
    assert slurm.rlsup("down", "--run-dir", str(run)).returncode == 0
    assert _log(run, "trainer").count("saved, bye") == 2
    wait_for(lambda: slurm.job_state(job) in ("COMPLETED", "GONE"), 30, what="the job ended")


def test_attach_from_outside_the_allocation_through_an_srun_bridge(slurm, tmp_path):
    run = tmp_path / "run"
    cfg = write_config(tmp_path, f"""
        run_dir: {run}
        slurm: {{nodes: 1}}
        components:
          trainer:
            command: {PY} {SCRIPTS}/stepper.py --total 40 --sleep 0.25
            progress: {{preset: rlsup}}
    """)
    assert slurm.rlsup("up", str(cfg), "-d").returncode == 0
    job = slurm.job_of(run)
    wait_for(lambda: _events(run, "started", "trainer"), 60, what="the trainer started")
    # `rlsup status` from the login node, through `srun --overlap ... rlsup bridge` (forced here: this
    # host sees the socket; on a cluster it is used when the supervisor's host is another).
    st = slurm.rlsup("status", "--run-dir", str(run), "--json", env={"RLSUP_SLURM_BRIDGE": "srun"})
    assert st.returncode == 0 and json.loads(st.stdout)["components"]["trainer"]["state"] in ("running", "completed")
    a = slurm.popen("attach", "--run-dir", str(run), "--plain", env={"RLSUP_SLURM_BRIDGE": "srun"})
    wait_for(lambda: any(s[1] == "rlsup:bridge" for s in slurm.cluster.steps(job)), 60, what="attach's bridge step")
    a.kill()
    # `rlsup up` again from the login node finds the live job (squeue --json) and follows it, here through
    # `srun --jobid=J --overlap rlsup bridge` as on a cluster that bars SSH to compute nodes.
    p = slurm.popen("up", str(cfg), "--plain", env={"RLSUP_SLURM_BRIDGE": "srun"})
    wait_for(lambda: any(s[1] == "rlsup:bridge" for s in slurm.cluster.steps(job)), 60, what="the bridge step")
    out, _ = p.communicate(timeout=90)
    assert "already has job" in out or "a supervisor is already running" in out, out
    assert "trainer" in out and "completed" in out, out
    st = slurm.rlsup("status", "--run-dir", str(run), "--json")
    assert json.loads(st.stdout)["components"]["trainer"]["state"] == "completed", st.stdout
    # `rlsup fleet --slurm` lists it from squeue --json, ended, with how it ended.
    fl = slurm.rlsup("fleet", "--slurm", "--json")
    assert fl.returncode == 0, fl.stdout + fl.stderr
    mine = [p for p in json.loads(fl.stdout)["pods"] if f"#{job} " in p["label"]]
    assert mine and mine[0]["connected"] and "every component completed" in mine[0]["ended"]["note"], fl.stdout
    # A new run in the same dir is a new job there: the fleet shows the run dir once, with its newest job.
    r = slurm.rlsup("up", str(cfg), "--fresh", "--headless")
    assert r.returncode == 0, r.stdout + r.stderr
    listed = slurm.cluster.run("squeue", "-h", "-t", "all", "-o", "%i %k").stdout.splitlines()
    ids = [int(i) for i, _, c in (ln.partition(" ") for ln in listed) if c.strip() == f"rlsup run_dir={run}"]
    again = str(max(ids))
    assert len(ids) == 2 and again != job, ids
    pods = [p for p in json.loads(slurm.rlsup("fleet", "--slurm", "--json").stdout)["pods"]
            if p.get("run_dir") == str(run)]
    assert len(pods) == 1 and f"#{again} " in pods[0]["label"], pods


def test_node_failure_requeues_the_job_and_the_run_resumes_from_its_checkpoint(slurm, tmp_path):
    run = tmp_path / "run"
    ck = tmp_path / "ckpt"
    cfg = _anchor_and_trainer(tmp_path, run, f"""
        command: {PY} {SCRIPTS}/stepper.py --total 400 --sleep 0.1 --ckpt {ck} --ckpt-every 5
        progress: {{preset: rlsup}}
        resume: {{checkpoints: {ck}, layout: glob, step_pattern: 'step_(\\d+)', args: ["--resume-step", "{{step}}"]}}
    """)
    assert slurm.rlsup("up", str(cfg), "-d").returncode == 0
    job = slurm.job_of(run)
    wait_for(lambda: (ck / "step_10").exists(), 60, what="a checkpoint")
    # Attached from the login node across the requeue: it waits for the requeued job's supervisor.
    att = slurm.popen("attach", "--run-dir", str(run), "--plain")
    n2 = slurm.cluster.nodes[1]
    t0 = time.monotonic()
    slurm.cluster.kill_node(n2)  # its slurmd, slurmstepd and the trainer: the node is gone
    flag = wait_for(lambda: [e for e in _events(run, "flag", "trainer") if e["type"] == "node_failure"], 90,
                    what="the node failure seen")[0]
    seen_s = time.monotonic() - t0
    assert n2 in flag["message"] and "requeueing job" in flag["action"], flag
    exited = wait_for(lambda: _events(run, "exited", "trainer"), 30, what="the trainer's exit journalled")
    assert exited[0]["diagnosis"]["category"] == "node_failure" and exited[0]["diagnosis"]["node"] == n2
    wait_for(lambda: slurm.job_state(job) in ("PENDING", "REQUEUED"), 60, what="the job requeued")
    ended = wait_for(lambda: _events(run, "run_ended"), 30, what="the batch step's run ended")[-1]
    assert f"job {job} requeued after a node failure" in ended["reason"], ended
    ckpt_before = max(int(p.name.split("_")[1]) for p in ck.glob("step_*"))
    # The node comes back (ReturnToService=2); Slurm holds a requeued job for 120 s: the test lets it go now.
    slurm.cluster.start_node(n2)
    wait_for(lambda: slurm.cluster.node_states().get(n2, "").startswith("idle"), 60, what="the node back")
    slurm.cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    wait_for(lambda: len(_events(run, "run_started")) >= 2, 120, what="the requeued supervisor")
    again = _events(run, "run_started")[-1]
    assert again["slurm"]["restart_count"] == 1 and again["slurm"]["job_id"] == job
    resumed = wait_for(lambda: [e for e in _events(run, "started", "trainer") if e.get("resume")], 60,
                       what="the trainer resumed")[-1]
    assert resumed["resume"]["step"] >= 10 and resumed["resume"]["step"] <= ckpt_before
    wait_for(lambda: f"starting at step {resumed['resume']['step'] + 1}" in _log(run, "trainer"), 60,
             what="the trainer going on from its checkpoint")
    print(f"node failure seen after {seen_s:.1f}s")
    assert att.poll() is None, att.communicate(timeout=5)[0]  # still attached, to the requeued job's run
    assert slurm.rlsup("down", "--run-dir", str(run)).returncode == 0
    out = att.communicate(timeout=60)[0]
    first_end = out.index(f"job {job} requeued after a node failure")
    assert f"job {job} was requeued" in out[first_end:], out
    assert "resuming from step" in out[first_end:] and "stopped by user (rlsup down)" in out[first_end:], out


def test_an_attach_asleep_through_a_requeued_jobs_whole_run_shows_it_and_its_end_when_it_wakes(slurm, tmp_path):
    """A login-node attach that missed all of a requeued job's run (a laptop asleep, here SIGSTOP; or a
    supervisor that started and ended between two of its tries, as the test above saw) waited for good
    for a supervisor that would never come, `rlsup down` or not. It reads what it missed from the run
    dir, prints the run's end and exits."""
    run = tmp_path / "run"
    cfg = _anchor_and_trainer(tmp_path, run, f"command: {PY} {_graceful(tmp_path)}")
    assert slurm.rlsup("up", str(cfg), "-d").returncode == 0
    job = slurm.job_of(run)
    wait_for(lambda: _events(run, "started", "trainer"), 60, what="the trainer started")
    att = slurm.popen("attach", "--run-dir", str(run), "--plain")
    lines = _follow(att)
    wait_for(lambda: any("run started" in x for x in lines), 30, what="the attach following the run")
    os.kill(att.pid, signal.SIGSTOP)
    try:
        slurm.cluster.run("scontrol", "requeue", job)
        wait_for(lambda: _events(run, "run_ended"), 60, what="the first supervisor's end")
        _let_go(slurm, job)
        wait_for(lambda: len(_events(run, "started", "trainer")) >= 2, 120, what="the requeued job's trainer")
        assert slurm.rlsup("down", "--run-dir", str(run)).returncode == 0
        wait_for(lambda: slurm.job_state(job) not in ("RUNNING", "COMPLETING"), 60, what="the job ended")
    finally:
        os.kill(att.pid, signal.SIGCONT)
    assert att.wait(timeout=60) == 0
    out = "".join(lines)
    print(out)
    assert "run resumed (job" in out and "stopped by user (rlsup down)" in out, out
    assert out.count("run started (job") == 1, out  # what it had shown is not shown again


def _follow(att) -> list[str]:
    """The lines ``att`` prints, as they come (read by a thread)."""
    lines: list[str] = []

    def read() -> None:
        for line in att.stdout:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_a_session_through_srun_follows_a_requeued_job_to_its_new_batch_host(slurm, tmp_path):
    """Where SSH to compute nodes is barred, `rlsup up` (and attach) on the login node reach the supervisor
    through `srun ... rlsup bridge` on the job's batch host. The host is looked up at each connect: after a
    requeue the supervisor runs on another node, and `up`'s bridge to the first one was refused for as
    long as the job ran."""
    run = tmp_path / "run"
    cfg = write_config(tmp_path, f"""
        run_dir: {run}
        slurm: {{nodes: 1, requeue: true}}
        components:
          trainer: {{command: {PY} {_graceful(tmp_path)}}}
    """)
    att = slurm.popen("up", str(cfg), "--plain", env={"RLSUP_SLURM_BRIDGE": "srun"})  # `attach` shares the bridge
    lines = _follow(att)
    job = slurm.job_of(run)
    first = wait_for(lambda: _events(run, "run_started"), 60, what="the supervisor")[0]["slurm"]["nodes"][0]
    wait_for(lambda: any("trainer" in x and "started" in x for x in lines), 30, what="the attach following")
    slurm.cluster.run("scontrol", "requeue", job)
    wait_for(lambda: slurm.job_state(job) == "PENDING", 60, what="the job requeued")
    slurm.cluster.run("scontrol", "update", f"JobId={job}", f"ExcNodeList={first}", "StartTime=now")
    again = wait_for(lambda: _events(run, "run_started")[1:], 120, what="the requeued supervisor")[0]
    assert again["slurm"]["nodes"] != [first], again
    wait_for(lambda: any("reconnected" in x for x in lines), 60, what="the attach reconnected")
    assert slurm.rlsup("down", "--run-dir", str(run)).returncode == 0
    assert att.wait(timeout=60) == 0
    out = "".join(lines)
    assert "reconnected" in out and out.count("run started (job") == 1, out
    assert "run resumed (job" in out and "stopped by user (rlsup down)" in out, out
    # The requeue it followed is not taken for a new one when the requeued job's run ends.
    assert "was requeued" not in out[out.index("stopped by user (rlsup down)"):], out


def test_a_restart_on_a_node_the_job_lost_is_a_node_failure_and_requeues(slurm, tmp_path):
    """A node dies while its component waits to restart (it had crashed on its own). With --no-kill Slurm
    drops the node from the job and the job runs on; the new step on that node is refused with "Requested
    node configuration is not available". Judged a launch failure, two such attempts made a "deterministic"
    repeated_error and a fatal run; it is the node that is lost, so with `requeue: true` the job is requeued."""
    run = tmp_path / "run"
    once = tmp_path / "once"
    cfg = _anchor_and_trainer(tmp_path, run, f"""
        shell: true
        command: if [ ! -e {once} ]; then touch {once}; echo "crash"; exit 3; fi; exec {PY} {_graceful(tmp_path)}
        restart: {{policy: on-failure, backoff: {{initial: 600, max: 600}}}}
    """)
    assert slurm.rlsup("up", str(cfg), "-d").returncode == 0
    job = slurm.job_of(run)
    wait_for(lambda: _events(run, "restart_scheduled", "trainer"), 60, what="the trainer's crash, then backoff")
    n2 = slurm.cluster.nodes[1]
    slurm.cluster.kill_node(n2)
    wait_for(lambda: slurm.cluster.node_states().get(n2, "").startswith("down"), 60, what="the node declared down")
    wait_for(lambda: n2 not in slurm.cluster.run("squeue", "-h", "-j", job, "-o", "%N").stdout, 30,
             what="the node dropped from the job")
    assert slurm.rlsup("restart", "trainer", "--run-dir", str(run)).returncode == 0  # now, not in 10 min
    flag = wait_for(lambda: [e for e in _events(run, "flag", "trainer") if e["type"] == "node_failure"], 60,
                    what="the node failure seen")[0]
    assert n2 in flag["message"] and "requeueing job" in flag["action"], flag
    exited = _events(run, "exited", "trainer")[-1]
    assert exited["diagnosis"]["category"] == "node_failure" and exited["diagnosis"]["node"] == n2, exited
    assert "Requested node configuration is not available" in _log(run, "trainer")
    assert not [e for e in _events(run, "fatal", "trainer")]
    wait_for(lambda: slurm.job_state(job) in ("PENDING", "REQUEUED"), 60, what="the job requeued")


def test_down_cancels_a_job_that_is_still_pending(slurm, tmp_path):
    run = tmp_path / "run"
    cfg = write_config(tmp_path, f"""
        run_dir: {run}
        slurm: {{nodes: 2}}
        components:
          trainer: {{nodes: 2, command: sleep 60}}
    """)
    blocker = slurm.cluster.run("sbatch", "--parsable", "-N2", "--exclusive", "--output=/dev/null", "--wrap", "sleep 600").stdout.strip()
    r = slurm.rlsup("up", str(cfg), "-d")
    assert r.returncode == 0 and "PENDING" in r.stdout, r.stdout + r.stderr
    job = slurm.job_of(run)
    d = slurm.rlsup("down", "--run-dir", str(run))
    assert d.returncode == 0 and f"job {job} was PENDING" in d.stdout, d.stdout + d.stderr
    wait_for(lambda: slurm.job_state(job) in ("CANCELLED", "GONE"), 30, what="the job cancelled")
    slurm.cluster.run("scancel", blocker)


@pytest.mark.timeout(600)  # a job's time limit of 2 minutes, then its requeue
def test_a_time_limit_warns_checkpoints_requeues_and_the_next_job_goes_on_from_that_step(slurm, tmp_path):
    """issue 40, item 2: with `slurm.time`, rlsup asks Slurm for a warning before the limit
    (--signal=B:USR1@N); the batch shell passes it on; the trainer (`preempt: {signal: SIGUSR1}`) checkpoints
    its step, the run ends *preempted* and requeues its own job, and the requeued job continues from that step."""
    run, cfg = _checkpointing_trainer(tmp_path, '{nodes: 1, time: "2", warn_before: 50}')  # warned up to 1 min early
    assert slurm.rlsup("up", str(cfg), "-d").returncode == 0
    job = slurm.job_of(run)
    ended = wait_for(lambda: _events(run, "run_ended"), 150, what="the run to end on Slurm's warning")[-1]
    assert "time limit" in ended["reason"] and f"job {job} requeued" in ended["reason"], ended
    stood = _checkpointed_at_the_notice(run, ended)
    wait_for(lambda: slurm.job_state(job) in ("PENDING", "REQUEUED"), 60, what="the job requeued")

    _requeued_job_goes_on_from(slurm, job, run, stood)


@pytest.mark.timeout(600)  # a grace time of 60 s, the preempting job, then the requeued one
def test_a_preemption_by_a_higher_tier_job_checkpoints_in_the_grace_time_and_the_requeued_job_goes_on(slurm, tmp_path):
    """issue 40, item 2: the cluster preempts (PreemptMode=REQUEUE, GraceTime=60, preempt_send_user_signal) our
    job for one in a higher-tier partition. The job asked for Slurm's notice because its trainer has `preempt:`
    (no time limit): the trainer checkpoints its step on SIGUSR1 inside the grace time, the run ends
    *preempted*, and once the other job is done the requeued job continues from that step."""
    run, cfg = _checkpointing_trainer(tmp_path, "{nodes: 1}")
    assert slurm.rlsup("up", str(cfg), "-d").returncode == 0
    job = slurm.job_of(run)
    wait_for(lambda: "Step 20/" in _log(run, "trainer"), 120, what="the trainer past step 20")
    urgent = slurm.cluster.run("sbatch", "--parsable", f"--partition={slurm.cluster.urgent}", "-N2", "--exclusive",
                               "--output=/dev/null", "--wrap", "sleep 15").stdout.strip()
    try:
        ended = wait_for(lambda: _events(run, "run_ended"), 120, what="the run to end on the preemption")[-1]
    except AssertionError as e:
        raise AssertionError(f"{e}\n{slurm.explain(job, run)}") from None
    assert f"job {job} is being preempted" in ended["reason"], ended
    stood = _checkpointed_at_the_notice(run, ended)
    assert stood > 20, stood
    # Slurm's SIGTERM to the requeued batch step comes after every component stopped: nothing to kill
    assert "killing what is left" not in (run / f"slurm-{job}.out").read_text()
    wait_for(lambda: slurm.job_state(urgent) in ("RUNNING", "COMPLETING", "COMPLETED", "GONE"), 120,
             what="the preempting job to run")

    _requeued_job_goes_on_from(slurm, job, run, stood)


@pytest.mark.timeout(600)
def test_the_requeue_waits_for_a_step_still_ending_after_its_srun_and_the_requeued_job_goes_on(slurm, tmp_path):
    """rlsup requeues its job only once Slurm no longer lists the steps it ended (a real-Slurm CI run had the
    requeue come while the trainer's step was still ending in slurmstepd, its srun gone). Here that window is
    seconds wide: at its SIGTERM the trainer ends its step's srun client at once (the supervisor sees it end)
    and its task goes on (until rlsup's own clean-up cancels the step, whose end then takes Slurm 2-3 s). The
    requeued job goes on (let go as :func:`_let_go` says: this test ran into that flake first)."""
    run, cfg = _checkpointing_trainer(tmp_path, "{nodes: 1}", " --linger 30")
    assert slurm.rlsup("up", str(cfg), "-d").returncode == 0
    job = slurm.job_of(run)
    wait_for(lambda: "Step 20/" in _log(run, "trainer"), 120, what="the trainer past step 20")
    listed: list[float] = []  # when a squeue began that still listed the trainer's step

    def watch() -> None:  # until the run has ended and Slurm no longer lists the step (30 s at most)
        deadline = time.time() + 30
        while time.time() < deadline:
            began, ended = time.time(), bool(_events(run, "run_ended"))
            if any(s[1] == "rlsup:trainer:1" for s in slurm.cluster.steps(job)):
                listed.append(began)
            elif ended:
                return
            time.sleep(0.1)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    slurm.cluster.run("scancel", "--batch", "--signal=USR1", job)  # Slurm's notice, as --signal=B:USR1 sends it
    try:
        ended = wait_for(lambda: _events(run, "run_ended"), 120, what="the run to end on the notice")[-1]
    except AssertionError as e:
        raise AssertionError(f"{e}\n{slurm.explain(job, run)}") from None
    watcher.join(30)
    exited = _events(run, "exited", "trainer")[0]
    assert exited["signal"] == "SIGKILL" and listed[-1] > exited["ts"], (exited, listed)  # the window was there
    assert listed[-1] < ended["ts"], f"requeued (run_ended at {ended['ts']}) while Slurm still listed the step at {listed[-1]}"
    assert f"job {job} requeued: " in ended["reason"], ended  # not "(step J.0 was still ending after 10 s)"
    stood = _checkpointed_at_the_notice(run, ended)
    wait_for(lambda: slurm.job_state(job) in ("PENDING", "REQUEUED"), 60, what="the job requeued")

    _requeued_job_goes_on_from(slurm, job, run, stood)


def _checkpointing_trainer(tmp_path: Path, slurm_block: str, extra: str = "") -> tuple[Path, Path]:
    """(run dir, config) of a one-node run whose trainer checkpoints on SIGUSR1 (`preempt:`) and resumes from
    its newest checkpoint; ``slurm_block`` is the `slurm:` value in flow style, ``extra`` more stepper.py
    arguments."""
    run = tmp_path / "run"
    ck = tmp_path / "ckpt"
    cfg = write_config(tmp_path, f"""
        run_dir: {run}
        slurm: {slurm_block}
        components:
          trainer:
            command: {PY} {SCRIPTS}/stepper.py --total 100000 --sleep 0.1 --ckpt {ck} --ckpt-every 1000{extra}
            progress: {{preset: rlsup}}
            resume: {{checkpoints: {ck}, layout: glob, step_pattern: 'step_(\\d+)', args: ["--resume-step", "{{step}}"]}}
            preempt: {{signal: SIGUSR1, wait: 30}}
    """)
    return run, cfg


def _checkpointed_at_the_notice(run: Path, ended: dict) -> int:
    """The run ended *preempted*, its trainer asked for and writing a checkpoint at the notice: that step."""
    assert ended["outcome"] == "preempted", ended
    stood = ended["checkpoints"]["trainer"]["step"]
    assert stood > 0 and f"Checkpoint of step {stood} written on SIGUSR1" in _log(run, "trainer")
    assert _events(run, "checkpoint_requested", "trainer") and not [
        e for e in _events(run, "flag", "trainer") if e["type"] == "checkpoint_problem"]
    return stood


def _requeued_job_goes_on_from(slurm, job: str, run: Path, stood: int) -> None:
    """The requeued job starts again (let go at once), its supervisor resumes the trainer from step ``stood``
    and the trainer goes on from there; then `rlsup down`."""
    _let_go(slurm, job)

    def started_again() -> bool:
        if "Reason=BeginTime" in slurm.cluster.run("scontrol", "show", "job", job, check=False).stdout:
            slurm.cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)  # not taken yet
        # A batch launch that failed on this test cluster's busy slurmd is requeued *held* by Slurm itself
        # (Reason "launch failed requeued held"): not rlsup's doing; released as its admin would
        if "launch failed requeued held" in slurm.cluster.run("scontrol", "show", "job", job, check=False).stdout:
            print(f"job {job}: Slurm held it after a failed launch; releasing it")
            slurm.cluster.run("scontrol", "release", job, check=False)
        return len(_events(run, "run_started")) >= 2

    try:
        wait_for(started_again, 240, 2.0, what="the requeued job's supervisor")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{slurm.explain(job, run)}") from None
    resumed = wait_for(lambda: _events(run, "started", "trainer")[1:], 60, what="the trainer again")[0]
    assert resumed["resume"]["step"] == stood, resumed
    wait_for(lambda: f"starting at step {stood + 1}" in _log(run, "trainer"), 60, what="the trainer going on")
    assert slurm.rlsup("down", "--run-dir", str(run)).returncode == 0


def _let_go(slurm, job: str) -> None:
    """Let a requeued job start now rather than after Slurm's hold (its BeginTime, about two minutes), but not
    within the second its previous run was killed in: slurmd revokes a killed job's credential stamped with
    that second and refuses a launch whose credential is not newer ("Job J already killed, do not launch batch
    job"); the job then ends FAILED, NonZeroExitCode, Restarts=1. Slurm's hold is there to avoid just that;
    `StartTime=now` the moment the job was requeued ran into it (a CI flake of the time-limit test)."""
    if wait_for(lambda: (lambda st: st if st in ("PENDING", "RUNNING") else None)(slurm.job_state(job)), 60,
                what=f"job {job} pending again") == "RUNNING":
        return
    time.sleep(1.5)  # the kill came before the job was pending again: a later second now
    slurm.cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)


def test_a_job_that_can_never_start_is_said_plainly_not_waited_on(slurm, tmp_path):
    """issue 40: `slurm.nodes` beyond the partition pended for ever while `--headless` waited in silence. Last in
    the session with the other cancelled-before-it-started job: `fleet --slurm` lists such jobs (issue 40 item 5)."""
    cfg = write_config(tmp_path, f"""
        run_dir: {tmp_path}/run
        slurm: {{nodes: 3}}
        components:
          trainer:
            nodes: 1
            command: {PY} -c "print(1)"
    """)
    # `up -d` returns at once, but not with exit 0 and a "PENDING" that never clears
    d = slurm.rlsup("up", str(cfg), "-d", "--skip-checks", "--run-dir", f"{tmp_path}/run_d", timeout=90)
    out = d.stdout + d.stderr
    assert d.returncode == 1 and re.search(r"will never start: Partition(Config|NodeLimit) \(", out), out
    assert "rlsup down --run-dir run_d" in out, out
    assert slurm.rlsup("down", "--run-dir", f"{tmp_path}/run_d").returncode == 0

    r = slurm.rlsup("up", str(cfg), "--headless", "--skip-checks", timeout=90)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "submitted batch job" in out, out
    # Slurm names it PartitionConfig or PartitionNodeLimit (EnforcePartLimits, version): both never clear.
    assert re.search(r"will never start: Partition(Config|NodeLimit) \(", out), out
    assert "rlsup down --run-dir run" in out, out
    assert slurm.rlsup("down", "--run-dir", f"{tmp_path}/run").returncode == 0
    # `fleet --slurm` says plainly that it never started (not "reconnecting: connection closed by the
    # supervisor"), gives a command that attaches, and does not count it as a pod it failed to reach.
    fl = slurm.rlsup("fleet", "--slurm", "--json")
    pods = json.loads(fl.stdout)["pods"]
    mine = [p for p in pods if p["run_dir"] == f"{tmp_path}/run"]
    assert len(mine) == 1 and mine[0]["connection"] == "no_run", mine
    assert re.fullmatch(r"job \d+ CANCELLED before it started: no run", mine[0]["error"]), mine
    assert mine[0]["attach"] == f"rlsup attach --run-dir {tmp_path}/run"
    assert fl.returncode == (0 if all(p["connected"] or p["connection"] == "no_run" for p in pods) else 1)
    text = slurm.rlsup("fleet", "--slurm").stdout
    assert re.search(r"#\d+ cancelled +job \d+ CANCELLED before it started: no run", text), text
