"""The presets' commands against what upstream needs to start on a real pod (issue 28), read at the pinned
versions: each assertion names the upstream file that makes it necessary. The commands themselves are run
through the frameworks' real entry points by .ci/presets.sh (tests/presets/test_entry_points.py)."""

from __future__ import annotations

import re
from pathlib import Path

from rlsup.supervisor.config.loader import load_config

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "configs" / "presets"


def _overrides(argv: list[str]) -> dict[str, str]:
    return dict(a.split("=", 1) for a in argv if "=" in a and not a.startswith("-"))


def _gpus(backend: str) -> int:
    """GPUs of an AReaL allocation such as `sglang:d1p1t1` (areal/api/alloc_mode.py: d * p * t)."""
    dims = dict((k, int(v)) for k, v in re.findall(r"([dpt])(\d+)", backend.split(":", 1)[1]))
    return dims.get("d", 1) * dims.get("p", 1) * dims.get("t", 1)


def test_verl_rollout_tensor_parallel_fits_the_gpus() -> None:
    """verl v0.7.0 defaults rollout TP to 2 (verl/trainer/config/rollout/rollout.yaml); with one GPU
    verl/workers/fsdp_workers.py _build_rollout asserts world_size % (tp * dp) == 0."""
    cfg = load_config(PRESETS / "verl.yaml", environ={})
    trainer = cfg.components["trainer"]
    o = _overrides(trainer.argv())
    tp = int(o["actor_rollout_ref.rollout.tensor_model_parallel_size"])
    n = int(o["trainer.n_gpus_per_node"]) * int(o["trainer.nnodes"])
    assert n % tp == 0 and tp == 1
    assert trainer.gpus is not None and len(trainer.gpus) == int(o["trainer.n_gpus_per_node"])


def test_areal_runs_the_single_controller_example_with_one_gpu_per_engine() -> None:
    """AReaL v1.0.4: the SPMD launcher (areal/infra/launcher/local.py local_main) parses the deprecated
    `allocation_mode` and fails without it; the quickstart runs the script with scheduler.type=local."""
    cfg = load_config(PRESETS / "areal.yaml", environ={})
    trainer = cfg.components["trainer"]
    argv = trainer.argv()
    assert argv[:4] == ["python3", "examples/math/gsm8k_rl.py", "--config", "examples/math/gsm8k_grpo.yaml"]
    o = _overrides(argv)
    assert o["scheduler.type"] == "local"
    if "areal.infra.launcher.local" in argv or "-m" in argv:  # the SPMD launcher needs allocation_mode
        assert "allocation_mode" in o
    need = _gpus(o["rollout.backend"]) + _gpus(o["actor.backend"])
    assert trainer.gpus is not None and len(trainer.gpus) == need == int(o["cluster.n_gpus_per_node"])
    assert o["recover.mode"] == "auto" and int(o["recover.freq_steps"]) > 0


def test_prime_rl_every_component_reads_the_run_dir_rl_writes() -> None:
    """prime-rl 559b447: without --run.name the run dir is `<envs>--<model>--<random>`
    (configs/rl.py _resolve_run_name), so `outputs/configs` never exists; the preset names it."""
    env = {"PRIME_OUTPUT_DIR": "/data/out", "PRIME_RUN_NAME": "exp7"}
    cfg = load_config(PRESETS / "prime-rl.yaml", environ=env)
    rl = cfg.components["configs"].argv()
    assert rl[:3] == ["uv", "run", "rl"] and "--dry-run" in rl
    run_dir = Path(rl[rl.index("--output-dir") + 1]) / rl[rl.index("--run.name") + 1]
    assert run_dir == Path("/data/out/exp7")
    assert int(rl[rl.index("--ckpt.interval") + 1]) > 0  # the example checkpoints only at the end
    for name, comp in cfg.components.items():
        if name == "configs":
            continue
        argv = comp.argv()
        assert Path(argv[argv.index("@") + 1]).is_relative_to(run_dir / "configs"), (name, argv)
        if comp.resume is not None:
            assert Path(comp.resume.checkpoints) == run_dir / "checkpoints"
    port = rl[rl.index("--inference.server.port") + 1]
    assert rl[rl.index("--orchestrator.model.client.base-url") + 1] == f"http://localhost:{port}/v1"
    assert cfg.components["inference"].ready is not None and f":{port}/" in cfg.components["inference"].ready.http


def test_prime_rl_trainer_runs_under_torchrun() -> None:
    """rl.py rl_local starts `torchrun ... -m prime_rl.trainer.rl.train @ trainer.json`; the `trainer`
    script alone has no RANK and fails in dist.init_process_group (src/prime_rl/trainer/utils.py)."""
    argv = load_config(PRESETS / "prime-rl.yaml", environ={}).components["trainer"].argv()
    assert argv[:3] == ["uv", "run", "torchrun"]
    assert argv[argv.index("-m") + 1] == "prime_rl.trainer.rl.train"
    assert "--nproc-per-node" in argv


def test_prime_rl_trainer_and_orchestrator_restart_together_and_clean_like_rl() -> None:
    """rl.py stops every process on any failure; a resumed `rl` deletes rollouts/step_N and
    broadcasts/step_N past the resume step (utils/pathing.py clean_future_steps)."""
    cfg = load_config(PRESETS / "prime-rl.yaml", environ={"PRIME_RUN_NAME": "r"})
    orch, trainer, rl = cfg.components["orchestrator"], cfg.components["trainer"], cfg.components["configs"]
    assert "trainer" in orch.restart_with and "orchestrator" in trainer.restart_with
    for comp in (orch, trainer):
        assert {"inference", "env-reverse-text"} <= set(comp.restart_with)
        assert comp.resume is not None and comp.resume.args == ["--resume.step", "{step}"]
        assert sorted(comp.resume.clean) == ["outputs/r/broadcasts/step_*", "outputs/r/rollouts/step_*"]
    # `rl --dry-run` refuses a run dir with checkpoints unless it resumes (utils/pathing.py validate_run_dir)
    assert rl.resume is not None and rl.resume.args == ["--resume.step", "{step}"]
    assert rl.resume.checkpoints == orch.resume.checkpoints == trainer.resume.checkpoints
