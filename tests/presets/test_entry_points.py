"""Each preset's commands, taken from the preset file itself, run through the framework's real entry point
in that framework's own venv (built by .ci/presets.sh under ~/.cache/rlsup-ci/presets/), up to the point
where a GPU (or a GPU-only package: vLLM, SGLang) is required; each test asserts the line that shows it got
there. What each reaches, and why it stops there, is in docs/frameworks.md ("Launched for real").

Without RLSUP_PRESET_VENVS (set by .ci/presets.sh) or without a framework's venv, its test is skipped with
that reason. The model and data are built offline in the test (tests/presets/make_fixtures.py)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest
from conftest import free_port

from rlsup.supervisor.config.loader import load_config

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "configs" / "presets"
HERE = Path(__file__).resolve().parent
VENVS = os.environ.get("RLSUP_PRESET_VENVS")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
pytestmark = pytest.mark.timeout(900)


def venv(name: str) -> Path:
    if not VENVS:
        pytest.skip("framework venvs absent: `.ci/presets.sh` builds them under ~/.cache/rlsup-ci/presets/ "
                    "and runs these tests with RLSUP_PRESET_VENVS set")
    path = Path(VENVS) / name
    if not (path / "bin" / "python").exists():
        reason = {"prime-rl-559b447": "no prime-rl venv was built here (.ci/presets.sh builds one from the "
                                      "source in tests/presets/prime-rl/, or from RLSUP_PRIME_RL_SRC)"}
        pytest.skip(reason.get(name, f"no venv {path}: .ci/presets.sh could not install it"))
    return path


def run(argv: list[str], vdir: Path, *, cwd: Path, env: dict[str, str], timeout: float = 600,
        until: str | None = None) -> str:
    """The command as rlsup would start it (the component's env, its venv first on PATH); its output (ANSI
    colours removed). With ``until``, it is stopped (its whole session) once that text appeared: the
    frameworks that keep workers alive after a failed start would otherwise hold on until the timeout."""
    full = dict(os.environ)
    full.pop("VIRTUAL_ENV", None)
    full.update(env)
    full["PATH"] = f"{vdir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    full.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                 "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"})
    proc = subprocess.Popen(argv, cwd=cwd, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", stdin=subprocess.DEVNULL, start_new_session=True)
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(ANSI.sub("", line))
            if until is not None and until in lines[-1]:
                seen.set()
        seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if not seen.wait(timeout):
            raise AssertionError(f"{argv[:4]} still running after {timeout}s:\n{''.join(lines)[-4000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):  # it and what it left in its session (Ray, workers)
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        reader.join(10)
    return "".join(lines)


def fixture(vdir: Path, what: str, out: Path) -> Path:
    subprocess.run([str(vdir / "bin" / "python"), str(HERE / "make_fixtures.py"), what, str(out)], check=True,
                   capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return out


def component(preset: str, name: str, environ: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    comp = load_config(PRESETS / preset, environ=environ).components[name]
    env = dict(comp.env)
    if comp.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in comp.gpus)
    return comp.argv(), env


def tail(out: str, n: int = 3000) -> str:
    return out[-n:]


# ----------------------------------------------------------------------------------------------- TRL


def test_trl_server_parses_its_arguments_and_stops_at_vllm(tmp_path: Path) -> None:
    """`trl vllm-serve ...` (trl/cli.py -> trl/scripts/vllm_serve.py main): TrlParser takes every flag of
    the preset, then main() requires vLLM, which needs a GPU (not installed here)."""
    vdir = venv("trl-1.9.0")
    model = fixture(vdir, "model", tmp_path / "model")
    argv, env = component("trl.yaml", "vllm", {"MODEL": str(model), "TRL_PORT": str(free_port())})
    out = run(argv, vdir, cwd=tmp_path, env=env)
    assert "unrecognized arguments" not in out, tail(out)
    assert "vLLM is required to run the vLLM serve script" in out, tail(out)


def test_trl_trainer_launches_and_builds_the_grpo_trainer_up_to_vllm(tmp_path: Path) -> None:
    """The preset's trainer command (close the stale weight-update group, then `accelerate launch`) with the
    GRPO script its header describes: accelerate starts it, GRPOConfig parses --output_dir, the model and
    dataset load and GRPOTrainer reaches its vLLM client (trl/generation/vllm_generation.py _init_vllm)."""
    vdir = venv("trl-1.9.0")
    model = fixture(vdir, "model", tmp_path / "model")
    data = fixture(vdir, "gsm8k-hub", tmp_path / "gsm8k")
    port = str(free_port())
    environ = {"MODEL": str(model), "TRL_PORT": port, "TRL_SCRIPT": str(HERE / "trl_train_grpo.py"),
               "TRL_OUTPUT_DIR": str(tmp_path / "out")}
    argv, env = component("trl.yaml", "trainer", environ)
    assert argv[:2] == ["/bin/sh", "-c"]
    out = run(argv, vdir, cwd=tmp_path, env={**env, "MODEL": str(model), "TRL_DATA": str(data), "TRL_PORT": port})
    assert f"close_communicator: http://127.0.0.1:{port}/close_communicator/" in out, tail(out)
    assert "Loading weights" in out or "Generating train split" in out, tail(out)
    assert "vLLM is not available and `use_vllm` is set to True" in out, tail(out)


# ----------------------------------------------------------------------------------------------- verl


def test_verl_main_ppo_composes_validates_and_loads_data_up_to_the_gpu_pool(tmp_path: Path) -> None:
    """`python3 -m verl.trainer.main_ppo ...` (Hydra): the preset's overrides compose and pass verl's
    validate_config, Ray starts, the tokenizer and both parquet files load, and RayPPOTrainer.init_workers
    stops at the GPU resource pool (verl/trainer/ppo/ray_trainer.py _check_resource_available)."""
    vdir = venv("verl-0.7.0")
    model = fixture(vdir, "model", tmp_path / "model")
    data = fixture(vdir, "gsm8k-verl", tmp_path / "data")
    argv, env = component("verl.yaml", "trainer", {"MODEL": str(model), "VERL_DATA": str(data),
                                                   "VERL_CKPT": str(tmp_path / "ckpt")})
    assert "actor_rollout_ref.rollout.tensor_model_parallel_size=1" in argv
    ray_tmp = tempfile.mkdtemp(prefix="rlsup-ray-", dir="/tmp")  # Ray's socket paths must stay < 108 bytes
    try:
        out = run(argv, vdir, cwd=tmp_path, env={**env, "RAY_TMPDIR": ray_tmp})
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert "'tensor_model_parallel_size': 1" in out, tail(out)  # the resolved config TaskRunner printed
    assert "Size of train dataloader" in out, tail(out)
    assert "Total available GPUs 0 is less than total desired GPUs 1" in out, tail(out)


# ----------------------------------------------------------------------------------------------- AReaL


def test_areal_single_controller_example_starts_its_scheduler(tmp_path: Path) -> None:
    """`python3 examples/math/gsm8k_rl.py --config examples/math/gsm8k_grpo.yaml scheduler.type=local ...`
    (the example at tag v1.0.4, tests/presets/areal/): load_expr_config takes the preset's overrides, the
    tokenizer loads, PPOTrainer starts its LocalScheduler, the data service workers serve GSM8K, the actor's
    RPC worker starts and instantiates the FSDP PPO actor, whose initialize() stops at FlashAttention 2."""
    vdir = venv("areal-1.0.4")
    model = fixture(vdir, "model", tmp_path / "model")
    data = fixture(vdir, "gsm8k-hub", tmp_path / "gsm8k")
    argv, env = component("areal.yaml", "trainer", {"MODEL": str(model), "AREAL_FILEROOT": str(tmp_path / "fs"),
                                                    "USER": "ci"})
    assert "scheduler.type=local" in argv and "allocation_mode" not in " ".join(argv)
    # Offline and on this machine only: the data path, and AReaL's name-resolve records under tmp_path.
    argv = argv + [
        f"train_dataset.path={data}", f"valid_dataset.path={data}",
        f"cluster.name_resolve.nfs_record_root={tmp_path / 'name_resolve'}"]
    out = run(argv, vdir, cwd=HERE / "areal", env=env, timeout=600, until="EngineCallError")
    assert "Parsing error" not in out, tail(out)
    assert "LocalScheduler initialized with GPU devices" in out, tail(out)
    assert "Registered dataset gsm8k-grpo_trial0_train" in out, tail(out)
    assert "Engine 'actor/0' (class: areal.engine.fsdp_engine.FSDPPPOActor) instantiated successfully" in out, tail(out)
    # where it stops: the FSDP actor loads the model with FlashAttention 2, a CUDA-only package
    assert "FlashAttention2 has been toggled on" in out, tail(out)


# ----------------------------------------------------------------------------------------------- prime-rl


def prime_rl_src() -> Path:
    src = Path(os.environ.get("RLSUP_PRIME_RL_SRC")
               or Path.home() / ".cache" / "rlsup-ci" / "presets" / "src" / "prime-rl-559b447")
    if not (src / "examples" / "basic" / "reverse-text" / "rl.toml").is_file():
        pytest.skip(f"no prime-rl source at {src}: .ci/presets.sh unpacks tests/presets/prime-rl/"
                    "prime-rl-559b447.tar.gz there (or set RLSUP_PRIME_RL_SRC to a checkout at 559b447)")
    return src


def test_prime_rl_dry_run_writes_the_configs_every_component_reads(tmp_path: Path) -> None:
    """`uv run rl @ rl.toml ... --dry-run` (src/prime_rl/entrypoints/rl.py): validates the run dir and writes
    the sub-configs to <output_dir>/<run.name>/configs/, the paths the other components read. In a run dir
    with a previous run's artefacts it refuses to start fresh, and with the `--resume.step N` rlsup appends
    (the preset's resume args) it deletes rollouts and broadcasts past N (utils/pathing.py)."""
    vdir = venv("prime-rl-559b447")
    src = prime_rl_src()
    environ = {"PRIME_OUTPUT_DIR": str(tmp_path / "outputs"), "PRIME_RUN_NAME": "ci"}
    cfg = load_config(PRESETS / "prime-rl.yaml", environ=environ)
    rl = cfg.components["configs"]
    argv = rl.argv()
    assert argv[:2] == ["uv", "run"]
    argv = argv[2:]  # `uv run` would sync the project's env from the network first: the venv is that env
    out = run(argv, vdir, cwd=src, env={})
    assert "Dry run complete" in out, tail(out)
    for name, comp in cfg.components.items():
        if name != "configs":
            a = comp.argv()
            assert Path(a[a.index("@") + 1]).is_file(), (name, a)

    run_dir = tmp_path / "outputs" / "ci"
    (run_dir / "checkpoints" / "step_5" / "trainer").mkdir(parents=True)
    (run_dir / "checkpoints" / "step_5" / "trainer" / ".metadata").write_text("")
    (run_dir / "rollouts" / "step_7").mkdir(parents=True)
    (run_dir / "broadcasts" / "step_6").mkdir(parents=True)
    out = run(argv, vdir, cwd=src, env={})
    assert "already contains artifacts from a previous run" in out, tail(out)
    assert rl.resume is not None
    resumed = argv + [a.replace("{step}", "5") for a in rl.resume.args]
    out = run(resumed, vdir, cwd=src, env={})
    assert "Dry run complete" in out, tail(out)
    assert not (run_dir / "rollouts" / "step_7").exists() and not (run_dir / "broadcasts" / "step_6").exists()
    assert '"step": 5' in (run_dir / "configs" / "trainer.json").read_text()


def test_prime_rl_trainer_goes_through_torchrun(tmp_path: Path) -> None:
    """The preset's trainer command: torchrun's rendezvous (--standalone) starts local rank 0 of
    prime_rl.trainer.rl.train with RANK/WORLD_SIZE set; the module then needs the GPU training stack
    (torchtitan, flash-attn), which is not installed here."""
    vdir = venv("prime-rl-559b447")
    src = prime_rl_src()
    environ = {"PRIME_OUTPUT_DIR": str(tmp_path / "outputs"), "PRIME_RUN_NAME": "ci"}
    cfg = load_config(PRESETS / "prime-rl.yaml", environ=environ)
    out = run(cfg.components["configs"].argv()[2:], vdir, cwd=src, env={})
    assert "Dry run complete" in out, tail(out)
    argv, env = component("prime-rl.yaml", "trainer", environ)
    out = run(argv[2:], vdir, cwd=src, env=env, timeout=300)
    assert "RANK expected" not in out, tail(out)
    assert "local_rank: 0" in out and "prime_rl.trainer.rl.train FAILED" in out, tail(out)
    # the GPU training stack (prime-rl's pyproject: torchtitan, ring-flash-attn, flash-attn ...) is not installed
    assert re.search(r"No module named '(torchtitan|ring_flash_attn|flash_attn|liger_kernel)", out), tail(out)
