"""A Ray stack on Slurm, against the real Slurm of tests/slurm and a real Ray (``ray[default]``).

The Ray head is a component (``ray start --head --block`` on the first node, ready when the GCS answers
through the dashboard), a Ray worker is a component on the second node (``ray start --address --block``),
and a real Ray driver (tests/slurm/ray_driver.py: ``ray.init()`` with ``RAY_ADDRESS``, one actor per node,
``Step N/T``; it stands in for verl's main_ppo, which needs GPUs) depends on the head being ready. The
driver has the Ray probe (``probe: {ray: {url}}``), which reads the dashboard's state API.

Ray comes from a venv of its own (``RLSUP_RAY_VENV``, default ``~/.cache/rlsup-ci/ray-2.60.0``, made by
.ci/slurm.sh); the test skips, saying so, where there is none.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import read_events, wait_for, write_config

RAY_VENV = Path(os.environ.get("RLSUP_RAY_VENV") or Path.home() / ".cache" / "rlsup-ci" / "ray-2.60.0")
DRIVER = Path(__file__).parent / "ray_driver.py"


def _ports(n: int) -> list[int]:
    """``n`` distinct free ports between Ray's worker ports (10002-19999) and the kernel's ephemeral range: while the
    head starts, Ray's own processes take ephemeral ports, and one took the client server's port chosen from that
    range (CI, 2026-12-01: "Failed to bind to address 127.0.0.1:42801", the head in a restart loop)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        top = int(f.read().split()[0])
    out: list[int] = []
    for port in random.sample(range(20000, top), 500):
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        out.append(port)
        if len(out) == n:
            return out
    raise AssertionError(f"no {n} free ports in 20000-{top}")


def _events(run: Path, kind: str, comp: str | None = None) -> list[dict]:
    return [e for e in read_events(run) if e["kind"] == kind and (comp is None or e.get("component") == comp)]


def _log(run: Path, comp: str) -> str:
    p = run / "logs" / f"{comp}.log"
    return p.read_text(errors="replace") if p.exists() else ""


def _pids_with(mark: bytes, in_env: bytes | None = None) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes()
            env = Path(f"/proc/{p}/environ").read_bytes() if in_env else b""
        except OSError:
            continue
        if mark in cmd and (in_env is None or in_env in env.split(b"\0")):
            out.append(int(p))
    return out


@pytest.fixture
def ray_tmp():
    """Ray's temp dir: short (Ray's unix sockets live under it), and every Ray process names it, so the
    test can end whatever Ray left, whichever step or process group it is in."""
    if not (RAY_VENV / "bin" / "ray").exists():
        pytest.skip(f"no Ray venv at {RAY_VENV}: .ci/slurm.sh makes it (pip install 'ray[default]'), or set "
                    "RLSUP_RAY_VENV")
    d = Path(tempfile.mkdtemp(prefix="rlray-", dir="/tmp"))
    try:
        yield d
    finally:
        for _ in range(20):
            left = _pids_with(str(d).encode())
            if not left:
                break
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.25)
        assert not _pids_with(str(d).encode()), "Ray processes left behind"
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.timeout(420)
def test_ray_head_and_worker_as_components_a_dead_worker_node_is_seen_and_named(slurm, tmp_path, ray_tmp):
    run = tmp_path / "run"
    ck = tmp_path / "ckpt"
    token = tmp_path / "ray_token"
    token.write_text(secrets.token_hex(32))
    gcs, dash, client, agent1, agent2 = _ports(5)
    ray = RAY_VENV / "bin" / "ray"
    common = (f"--num-cpus 1 --num-gpus 0 --object-store-memory 100000000 --temp-dir {ray_tmp} "
              "--include-log-monitor false --disable-usage-stats")
    cfg = write_config(tmp_path, f"""
        run_dir: {run}
        slurm: {{nodes: 2, time: "10:00"}}
        env:
          RAY_AUTH_MODE: token                 # Ray 2.60's default for a new cluster, made explicit
          RAY_AUTH_TOKEN_PATH: {token}         # the same token for head, worker, driver and rlsup's probe
          RAY_USAGE_STATS_ENABLED: "0"
          RAY_health_check_period_ms: "1000"   # as the verl preset: a dead raylet is DEAD in ~5 s, not ~15 s
        components:
          ray-head:
            nodes: 1
            command: >-
              {ray} start --head --block --port {gcs} --dashboard-host 127.0.0.1 --dashboard-port {dash}
              --ray-client-server-port {client} --dashboard-agent-listen-port {agent1} {common}
            # ${{RLSUP_HEAD_RAY_HEAD}}: Slurm's NodeAddr of its node (this test cluster's names are not in DNS).
            ready: {{http: "http://${{RLSUP_HEAD_RAY_HEAD}}:{dash}/api/gcs_healthz", timeout: 120}}
            stop: {{signal: SIGTERM, timeout: 10}}
          ray-worker:
            nodes: 1
            depends_on: {{ray-head: ready}}
            command: >-
              {ray} start --block --address ${{RLSUP_HEAD_RAY_HEAD}}:{gcs} --dashboard-agent-listen-port {agent2} {common}
            ready: {{log: 'Ray runtime started', timeout: 120}}   # the node joined the head
            restart: {{backoff: {{initial: 1, max: 1}}}}
            stop: {{signal: SIGTERM, timeout: 10}}
          driver:
            colocate: ray-head
            depends_on: {{ray-head: ready, ray-worker: ready}}
            env: {{RAY_ADDRESS: "${{RLSUP_HEAD_RAY_HEAD}}:{gcs}"}}
            command: {RAY_VENV}/bin/python {DRIVER} --total 400 --sleep 0.3 --ckpt {ck} --ckpt-every 5
            progress: {{pattern: 'Step (?P<step>\\d+)/(?P<total>\\d+)'}}
            resume: {{checkpoints: {ck}, layout: glob, step_pattern: 'step_(\\d+)', args: ["--resume-step", "{{step}}"]}}
            restart: {{backoff: {{initial: 1, max: 1}}}}
            probe: {{ray: {{url: "http://${{RLSUP_HEAD_RAY_HEAD}}:{dash}", interval: 1}}}}
            stop: {{signal: SIGTERM, timeout: 10}}
    """)
    r = slurm.rlsup("up", str(cfg), "-d")
    assert r.returncode == 0, r.stdout + r.stderr
    job = slurm.job_of(run)
    n1, n2 = slurm.cluster.nodes
    wait_for(lambda: (ck / "step_10").exists(), 240, interval=0.5, what="the driver at step 10 on both nodes")
    assert _events(run, "ready", "ray-head")
    started = {e["component"]: e for e in _events(run, "started")}
    assert started["ray-head"]["nodes"] == [n1] and started["ray-worker"]["nodes"] == [n2]
    assert started["driver"]["nodes"] == [n1]
    steps = {s[1].split(":")[1] for s in slurm.cluster.steps(job) if s[1].startswith("rlsup:")}
    assert {"ray-head", "ray-worker", "driver"} <= steps, steps

    # The worker node's Ray dies: its raylet is killed (as the OOM killer or a crash would).
    raylets = _pids_with(b"raylet/raylet", in_env=f"SLURMD_NODENAME={n2}".encode())
    assert len(raylets) == 1, raylets
    t0 = time.time()
    os.kill(raylets[0], signal.SIGKILL)

    # The worker component ends at once: `ray start --block` sees its raylet gone and exits, the step ends.
    w_exit = wait_for(lambda: _events(run, "exited", "ray-worker"), 60, interval=0.2, what="the worker's exit")[0]
    assert w_exit["exit_code"] not in (0, None), w_exit
    assert "raylet" in _log(run, "ray-worker")  # Ray's own words: "Some Ray subprocesses exited unexpectedly"

    # Ray declares the node dead later (its GCS health check), and the probe names it on the driver.
    node_flag = wait_for(lambda: [e for e in _events(run, "flag", "driver") if e["type"] == "ray_node_died"], 90,
                         interval=0.2, what="the probe's ray_node_died flag")[0]
    assert node_flag["ts"] > w_exit["ts"]  # rlsup knew from the step's end before Ray's own verdict
    assert "is DEAD" in node_flag["message"], node_flag

    # The driver loses its actor on that node: Ray's cause (its node died) is in the exit's diagnosis.
    d_exit = wait_for(lambda: _events(run, "exited", "driver"), 90, interval=0.2, what="the driver's exit")[0]
    diag = d_exit["diagnosis"]
    assert diag["category"] == "ray_actor_died", diag
    assert diag["summary"].startswith("Ray actor learner-1 (Learner, pid "), diag["summary"]
    assert "died: its node died (Ray node " in diag["summary"] and "is DEAD" in diag["summary"], diag["summary"]
    dead_node = diag["ray"]["dead_nodes"][0]["node_id"]
    assert dead_node[:8] in diag["summary"] and dead_node[:8] in node_flag["message"]
    assert diag["ray"]["dead_actors"][0]["name"] == "learner-1"
    actor_flags = [e for e in _events(run, "flag", "driver") if e["type"] == "ray_actor_died"]
    assert actor_flags and "learner-1" in actor_flags[0]["message"], actor_flags
    print(f"worker component ended {w_exit['ts'] - t0:.1f}s after its raylet was killed; Ray declared the node "
          f"dead {node_flag['ts'] - t0:.1f}s after; the driver ended {d_exit['ts'] - t0:.1f}s after")

    # The worker is a new step in the same allocation and joins the head again; the driver is restarted
    # as configured and resumes from its newest checkpoint on both nodes.
    resumed = wait_for(lambda: [e for e in _events(run, "started", "driver") if e.get("resume")], 120,
                       interval=0.5, what="the driver restarted from its checkpoint")[-1]
    assert resumed["attempt"] == 2 and resumed["resume"]["step"] >= 10
    assert len(_events(run, "started", "ray-worker")) == 2
    mark = f"resuming: starting at step {resumed['resume']['step'] + 1}"
    wait_for(lambda: f"Step {resumed['resume']['step'] + 3}/400" in _log(run, "driver").partition(mark)[2], 120,
             interval=0.5, what="the resumed driver stepping on both nodes")

    # `rlsup why` and `rlsup diagnose` name the dead actor and its node.
    why = slurm.rlsup("why", "driver", "--attempt", "2", "--run-dir", str(run))
    assert why.returncode == 0, why.stdout + why.stderr
    assert "learner-1" in why.stdout and dead_node[:8] in why.stdout, why.stdout
    dj = slurm.rlsup("diagnose", str(run), "--json")
    assert "learner-1" in dj.stdout and dead_node[:8] in dj.stdout, dj.stdout[-3000:]
    st = json.loads(slurm.rlsup("status", "--run-dir", str(run), "--json").stdout)
    assert {f["type"] for f in st["components"]["driver"]["flags"]} >= {"ray_node_died", "ray_actor_died"}, st

    d = slurm.rlsup("down", "--run-dir", str(run), timeout=180)
    assert d.returncode == 0, d.stdout + d.stderr
    wait_for(lambda: slurm.job_state(job) in ("COMPLETED", "GONE"), 60, what="the job ended")
    # Nothing of Ray outlives the run: every Ray process names this temp dir.
    wait_for(lambda: not _pids_with(str(ray_tmp).encode()), 30, what="no Ray process left")
