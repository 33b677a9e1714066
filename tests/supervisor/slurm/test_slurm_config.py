"""The `slurm:` block, per-component nodes/gpus/colocate and the RLSUP_NODES/HEAD/NNODES variables."""

from __future__ import annotations

import os

import pytest

from rlsup.supervisor.config import placement
from rlsup.supervisor.config.loader import ConfigError, load_config
from rlsup.supervisor.slurm import jobs
from rlsup.supervisor.slurm.launcher import SlurmLauncher

BASE = """\
run_dir: {run}
slurm:
  nodes: 2
  gpus_per_node: 8
  partition: gpu
  time: "24:00:00"
  requeue: true
  sbatch_args: [--account=rl]
components:
  inference:
    nodes: 1
    gpus: 8
    command: python -m sglang.launch_server --host 0.0.0.0 --port 30000
    ready: {{http: "http://${{RLSUP_HEAD_INFERENCE}}:30000/health"}}
  trainer:
    nodes: 1
    command: torchrun --nnodes ${{RLSUP_NNODES_TRAINER}} --rdzv-endpoint ${{RLSUP_HEAD_TRAINER}}:29500 train.py
    depends_on: {{inference: ready}}
  orchestrator:
    colocate: trainer
    command: python -m orch --inference http://${{RLSUP_HEAD_INFERENCE}}:30000
"""


def _write(tmp_path, text: str):
    p = tmp_path / "c.yaml"
    p.write_text(text.format(run=tmp_path / "run"))
    return p


def _problems(tmp_path, text: str, environ=None) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load_config(_write(tmp_path, text), environ=environ)
    return [str(p) for p in e.value.problems]


def test_inside_the_job_every_component_knows_every_components_nodes(tmp_path):
    env = {**os.environ, "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu-[07-08]"}
    cfg = load_config(_write(tmp_path, BASE), environ=env)
    assert cfg.placement == {"inference": ["gpu-07"], "trainer": ["gpu-08"], "orchestrator": ["gpu-08"]}
    assert cfg.components["trainer"].command.startswith("torchrun --nnodes 1 --rdzv-endpoint gpu-08:29500")
    assert cfg.components["inference"].ready.http == "http://gpu-07:30000/health"
    assert cfg.components["inference"].gpu_count == 8 and cfg.components["inference"].gpus is None
    assert placement.variables(cfg.placement)["RLSUP_NODES_ORCHESTRATOR"] == "gpu-08"
    launcher = SlurmLauncher.for_run(cfg, env)
    argv = launcher.argv("inference", 3, ["python", "x.py"])
    assert argv[1:] == ["--jobid=42", "--job-name=rlsup:inference:3", "--nodes=1", "--ntasks=1", "--ntasks-per-node=1",
                        "--exact", "--gres=gpu:8", "-l", "--kill-on-bad-exit=1", "--nodelist=gpu-07", "--",
                        "python", "x.py"]
    assert "--gres=none" in launcher.argv("orchestrator", 1, ["x"])  # a CPU component takes no GPU of the job


def test_on_a_login_node_placeholders_stand_in_and_nothing_is_a_step(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    cfg = load_config(_write(tmp_path, BASE), environ=env)
    assert cfg.placement["trainer"] == ["c-node-1"]
    assert SlurmLauncher.for_run(cfg, env) is None


def test_without_the_block_nothing_changes(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("components:\n  a: {command: 'true', gpus: [0, 1]}\n")
    cfg = load_config(p, environ={"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n1"})
    assert cfg.slurm is None and cfg.placement == {} and cfg.components["a"].gpus == [0, 1]
    assert SlurmLauncher.for_run(cfg, {"SLURM_JOB_ID": "1"}) is None


def test_slurm_keys_are_checked_with_file_line_col(tmp_path):
    out = _problems(tmp_path, BASE.replace('time: "24:00:00"', "time: tomorrow"))
    assert out == [f"{tmp_path}/c.yaml:6:9: slurm.time: time 'tomorrow' is not a Slurm time limit (minutes, "
                   "HH:MM:SS, or D-HH:MM:SS)"]
    text = BASE.replace("colocate: trainer", "colocate: trainr").replace("gpus: 8", "gpus: 9") \
        .replace("  trainer:\n    nodes: 1", "  trainer:\n    nodes: 3")
    out = _problems(tmp_path, text)
    assert any(":12:11: components.inference.gpus: 9 GPUs per node, but the allocation has "
               "slurm.gpus_per_node: 8" in o for o in out), out
    assert any(":16:12: components.trainer.nodes: 3 nodes, but the allocation has slurm.nodes: 2" in o
               for o in out), out
    assert any(":20:15: components.orchestrator.colocate: unknown component 'trainr'; did you mean 'trainer'?" in o
               for o in out), out


def test_a_gpu_count_or_nodes_without_the_block_is_an_error_that_says_what_to_write(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("components:\n  a:\n    command: 'true'\n    gpus: 2\n    nodes: 2\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    out = [str(x) for x in e.value.problems]
    assert any(":4:11: components.a.gpus: a GPU count needs a `slurm:` block" in o and "gpus: [0, 1]" in o
               for o in out), out
    assert any(":5:5: components.a.nodes: `nodes` places a component on nodes of a Slurm allocation" in o
               for o in out), out


def test_gpu_indices_with_the_block_say_to_write_a_count(tmp_path):
    out = _problems(tmp_path, BASE.replace("gpus: 8", "gpus: [0, 1]"))
    assert any("components.inference.gpus: with a `slurm:` block, `gpus` is a count per node and Slurm picks "
               "the GPUs: write `gpus: 2`" in o for o in out), out


@pytest.mark.parametrize("expr,names", [
    ("n1", ["n1"]), ("rn[1-3]", ["rn1", "rn2", "rn3"]), ("gpu-[07-09,12]", ["gpu-07", "gpu-08", "gpu-09", "gpu-12"]),
    ("a[1-2],b3", ["a1", "a2", "b3"]), ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
])
def test_slurm_host_lists_expand_in_order(expr, names):
    assert placement.expand_hostlist(expr) == names


def test_placement_takes_nodes_in_file_order_and_wraps():
    comps = {"a": {"nodes": 2}, "b": {"nodes": 1}, "c": {"colocate": "b"}, "d": {}}
    assert placement.place(comps, ["n1", "n2"]) == {"a": ["n1", "n2"], "b": ["n1"], "c": ["n1"], "d": ["n1"]}
    assert placement.place(comps, ["n1", "n2", "n3"])["b"] == ["n3"]


def test_nodes_rest_takes_every_node_no_other_component_takes():
    comps = {"head": {"nodes": 1}, "workers": {"nodes": "rest"}, "driver": {"colocate": "head"}, "x": {"nodes": 1}}
    assert placement.place(comps, ["n1", "n2", "n3", "n4"]) == {
        "head": ["n1"], "workers": ["n3", "n4"], "driver": ["n1"], "x": ["n2"]}


REST = """\
run_dir: {run}
slurm: {{nodes: 2}}
components:
  head: {{nodes: 1, command: "true"}}
  workers: {{nodes: rest, command: "true"}}
"""


def test_nodes_rest_that_leaves_no_node_or_is_asked_twice_is_refused_at_its_key(tmp_path):
    assert _problems(tmp_path, REST.replace("nodes: 2", "nodes: 1")) == [
        f"{tmp_path}/c.yaml:5:20: components.workers.nodes: `rest` leaves no node: the other components take 1 of "
        "slurm.nodes: 1; raise slurm.nodes"]
    twice = REST + '  more: {{nodes: rest, command: "true"}}\n'
    assert _problems(tmp_path, twice) == [
        f"{tmp_path}/c.yaml:6:17: components.more.nodes: workers already takes the rest of the nodes; give one of "
        "them a number of nodes"]
    assert _problems(tmp_path, REST.replace("rest", "all"))[0].startswith(f"{tmp_path}/c.yaml:5:20: "
                                                                         "components.workers.nodes: ")


@pytest.mark.parametrize("nodes", [2, 3, 5])
def test_the_verl_ray_slurm_presets_workers_take_every_node_but_the_heads(nodes):
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "NODES": str(nodes), "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": f"g[1-{nodes}]"}
    cfg = load_config(root / "configs" / "presets" / "verl-ray-slurm.yaml", environ=env)
    assert cfg.placement["ray-head"] == ["g1"] and cfg.placement["trainer"] == ["g1"]
    assert cfg.placement["ray-workers"] == [f"g{i}" for i in range(2, nodes + 1)]
    assert f"trainer.nnodes={nodes}" in cfg.components["trainer"].command


def test_the_batch_script_runs_the_supervisor_headless_and_resumes_after_a_requeue(tmp_path):
    cfg = load_config(_write(tmp_path, BASE), environ={})
    argv = jobs.sbatch_argv(cfg, cfg.run_dir, "/work")
    assert "--nodes=2" in argv and "--gres=gpu:8" in argv and "--partition=gpu" in argv and "--time=24:00:00" in argv
    assert "--requeue" in argv and "--no-kill" in argv and argv[-1] == "--account=rl"
    assert f"--comment=rlsup run_dir={cfg.run_dir}" in argv and "--job-name=rlsup:c" in argv
    script = jobs.batch_script(str(tmp_path / "c.yaml"), cfg.run_dir, python="/venv/bin/python")
    assert "/venv/bin/python -m rlsup.supervisor.cli up" in script and "--headless" in script
    assert 'SLURM_RESTART_COUNT:-0}" -gt 0 ]; then resume="--resume"' in script


MOUNTINFO = [
    "22 1 0:21 / / rw,relatime - ext4 /dev/sda1 rw",
    "30 22 0:40 / /shared rw,relatime - nfs4 fs:/export rw",
    "31 22 0:41 / /lustre rw,relatime - lustre 10.0.0.1@o2ib:/fs rw",
]


def test_a_run_dir_on_a_local_disk_is_an_error_for_a_multi_node_cluster():
    from rlsup.supervisor.slurm.shared import problem

    found = problem("/home/me/runs/x", hosts=["gpu-01", "gpu-02"], mountinfo=MOUNTINFO)
    assert found is not None and "ext4" in found[0] and "shared filesystem" in found[1]
    assert problem("/shared/me/runs/x", hosts=["gpu-01", "gpu-02"], mountinfo=MOUNTINFO) is None
    assert problem("/lustre/runs/x", hosts=["gpu-01"], mountinfo=MOUNTINFO) is None


def test_a_cluster_whose_every_node_is_this_host_sees_any_filesystem():
    import socket

    from rlsup.supervisor.slurm.shared import problem

    assert problem("/home/me/runs/x", hosts=[socket.gethostname()] * 2, mountinfo=MOUNTINFO) is None


def test_a_gpu_keeps_its_node_through_the_socket_json():
    from rlsup.supervisor.gpu.nvml import GpuInfo, GpuSample, HostInfo

    g = GpuInfo(0, "NVIDIA A40", None, 1.0, 2.0, 3.0, None, None, None, node="gpu-07")
    s = GpuSample(1.0, "fake", (g, GpuInfo(1, "A40", None, None, None, None, None, None, None)), None,
                  HostInfo(0.0, 1, 0.0, 1.0, 0.0))
    d = s.to_dict()
    assert d["gpus"][0]["node"] == "gpu-07" and "node" not in d["gpus"][1]  # one-machine samples unchanged
    assert GpuSample.from_dict(d).gpus[0].node == "gpu-07"


def test_a_step_refused_on_a_node_the_job_lost_is_judged_from_the_jobs_node_list(tmp_path):
    """srun's words are the same for a step on a node the job lost and for one that asks too much (measured on
    22.05.8); only the job's node list (squeue, looked up off the event loop: needs_job_nodes, then job_nodes)
    tells them apart. The real-Slurm test kills a node: tests/slurm/test_slurm_runs.py."""
    from types import SimpleNamespace

    from rlsup.supervisor.diagnosis import diagnose

    env = {"SLURM_JOB_ID": "4", "SLURM_JOB_NODELIST": "wn[1-2]", "SLURM_NNODES": "2"}
    cfg = load_config(_write(tmp_path, BASE), environ=env)
    launcher = SlurmLauncher.for_run(cfg, env)
    launcher.requeue = False
    lines = ["srun: error: Unable to create step for job 4: Requested node configuration is not available"]
    diag = launcher.refine(diagnose(lines, exit_code=1).to_dict(), lines)  # the supervisor's, then Slurm's view
    assert launcher.needs_job_nodes(diag)
    tb = ["Traceback (most recent call last):", '  File "t.py", line 1, in <module>', "ValueError: x"]
    assert not launcher.needs_job_nodes(launcher.refine(diagnose(tb, exit_code=1).to_dict(), tb))
    comp = SimpleNamespace(name="trainer")
    trainer_node = launcher.nodes("trainer")[0]
    other = "wn1" if trainer_node == "wn2" else "wn2"

    def judge(job_nodes):
        att = SimpleNamespace(component="trainer", attempt=2)
        return launcher.ended(comp, att, {"exit_code": 1}, diag, job_nodes=job_nodes)[1]

    lost = judge(other)
    assert lost["category"] == "node_failure" and lost["node"] == trainer_node, lost
    assert f"job 4 runs on {other}" in lost["evidence"][0]
    assert judge("wn[1-2]")["category"] == "step_launch_failure"  # still there: it asked too much
    assert judge(None)["category"] == "step_launch_failure"  # squeue did not answer: no guess


def test_a_time_limit_asks_for_slurms_warning_and_a_requeueable_job_and_the_shell_passes_it_on(tmp_path):
    cfg = load_config(_write(tmp_path, BASE.replace("requeue: true", "requeue: false")), environ={})
    argv = jobs.sbatch_argv(cfg, cfg.run_dir, "/work")
    assert "--signal=B:USR1@120" in argv and "--requeue" in argv and "--no-requeue" not in argv
    script = jobs.batch_script(str(tmp_path / "c.yaml"), cfg.run_dir)
    assert "trap '[ -n \"$pid\" ] && kill -USR1 \"$pid\" 2>/dev/null' USR1" in script and " &\n    pid=$!" in script
    untimed = load_config(_write(tmp_path, BASE.replace('  time: "24:00:00"\n', "").replace("requeue: true",
                                                                                             "requeue: false")), environ={})
    argv = jobs.sbatch_argv(untimed, untimed.run_dir, "/work")
    assert not [a for a in argv if a.startswith(("--signal", "--time"))] and "--no-requeue" in argv


def test_a_component_that_keeps_its_work_on_notice_asks_for_slurms_notice_without_a_time_limit(tmp_path):
    """A preemption sends the user signal only where the job asked for one (`preempt_send_user_signal`): with a
    `preempt:` component the job asks for it, and is requeueable, though it has no time limit."""
    text = BASE.replace('  time: "24:00:00"\n', "").replace("requeue: true", "requeue: false")
    assert "preempt:" not in text
    trainer = text.index("  trainer:\n") + len("  trainer:\n")
    cfg = load_config(_write(tmp_path, text[:trainer] + "    preempt: {{signal: SIGUSR1, wait: 60}}\n" + text[trainer:]),
                      environ={})
    argv = jobs.sbatch_argv(cfg, cfg.run_dir, "/work")
    assert "--signal=B:USR1@120" in argv and "--requeue" in argv and "--no-requeue" not in argv
    assert not [a for a in argv if a.startswith("--time")]


def test_inside_the_job_rlsup_head_is_the_node_address_that_reaches_it_and_the_names_stay_in_rlsup_nodes(tmp_path):
    """issue 40, item 3: where node names do not resolve, Slurm's NodeAddr is what reaches a node."""
    env = {**os.environ, "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu-[07-08]",
           placement.ADDRS_ENV: "gpu-07=10.1.0.7,gpu-08=10.1.0.8"}
    cfg = load_config(_write(tmp_path, BASE), environ=env)
    assert cfg.components["inference"].ready.http == "http://10.1.0.7:30000/health"
    assert cfg.components["trainer"].command.startswith("torchrun --nnodes 1 --rdzv-endpoint 10.1.0.8:29500")
    v = placement.variables(cfg.placement, placement.node_addresses(env))
    assert (v["RLSUP_NODES_INFERENCE"], v["RLSUP_ADDRS_INFERENCE"], v["RLSUP_HEAD_INFERENCE"]) == (
        "gpu-07", "10.1.0.7", "10.1.0.7")
    assert placement.variables({"a": ["n1"]}, {})["RLSUP_HEAD_A"] == "n1"  # no NodeAddr known: the name


def test_components_sharing_a_node_beyond_its_gpus_are_refused_at_the_second_ones_nodes_key(tmp_path):
    """issue 40: `nodes:` adding up to more than slurm.nodes share nodes; a step that cannot get its GPUs there
    would wait for ever while its component shows `running`."""
    text = """\
run_dir: {run}
slurm: {{nodes: 1, gpus_per_node: 2}}
components:
  trainer:
    nodes: 1
    gpus: 2
    command: python train.py
  inference:
    nodes: 1
    gpus: 1
    command: python serve.py
"""
    out = _problems(tmp_path, text)
    assert len(out) == 1 and out[0].startswith(f"{tmp_path}/c.yaml:10:5: components.inference.gpus: trainer 2 + "
                                               "inference 1 GPUs on one node of the allocation"), out
    assert "would wait for GPUs for ever" in out[0]
    load_config(_write(tmp_path, text.replace("gpus: 1", "gpus: 0")), environ={})  # nothing shared: fine


def test_the_cluster_as_slurm_describes_it_and_what_it_can_never_give():
    from types import SimpleNamespace

    from rlsup.supervisor.slurm import cluster as cl

    c = cl.parse("PartitionName=gpu AllowGroups=ALL Default=YES MaxNodes=4 Nodes=g[01-08] State=UP\n"
                 "PartitionName=debug Default=NO MaxNodes=UNLIMITED Nodes=d1 State=UP\n",
                 "g01|gpu:h100:8(S:0-1)\ng02|gpu:8\nd1|(null)\n")
    assert c.partitions["gpu"].nodes[-1] == "g08" and c.partitions["gpu"].max_nodes == 4 and c.gpus["g01"] == 8
    s = SimpleNamespace(partition=None, nodes=2, gpus_per_node=8)
    assert cl.problems(s, c) == []
    assert cl.problems(SimpleNamespace(partition=None, nodes=5, gpus_per_node=0), c)[0][1].endswith("(MaxNodes)")
    assert cl.problems(SimpleNamespace(partition="debug", nodes=2, gpus_per_node=0), c)[0][2] == "nodes: 1 (or another partition)"
    assert "at most 0 GPU" in cl.problems(SimpleNamespace(partition="debug", nodes=1, gpus_per_node=1), c)[0][1]
    unknown = cl.problems(SimpleNamespace(partition="gpus", nodes=1, gpus_per_node=0), c)[0]
    assert unknown[0] == ("slurm", "partition") and "did you mean 'gpu'?" in unknown[1] and unknown[2] == "partition: gpu"


def test_a_huge_allocation_is_checked_without_listing_its_nodes(tmp_path):
    """The config fuzzer's find (a 120 s timeout in .ci/run): `slurm.nodes: ${N}` interpolated to a huge
    number made the shared-node check list every node of the allocation."""
    text = "run_dir: {run}\nslurm: {{nodes: '${{N}}'}}\ncomponents:\n  a: {{command: 'true', nodes: 1}}\n"
    cfg = load_config(_write(tmp_path, text), environ={**os.environ, "N": str(10 ** 12)})
    assert cfg.slurm.nodes == 10 ** 12
