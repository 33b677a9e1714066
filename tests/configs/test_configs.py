"""Every shipped config (configs/*.yaml, configs/presets/*.yaml) loads and passes `rlsup check`'s
fast preflight, apart from findings that only say the framework is not installed on this machine."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from rlsup.supervisor.config.loader import load_config
from rlsup.supervisor.preflight.checks import run_checks
from rlsup.supervisor.records.presets import PRESETS
from tests.supervisor.records.preset_reference import parse_line

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml")) + sorted((ROOT / "configs" / "presets").glob("*.yaml"))
PRESET_FILES = sorted((ROOT / "configs" / "presets").glob("*.yaml"))
# Executables a config may name that a CPU-only test machine does not have.
NOT_INSTALLED_OK = {"python", "python3", "uv", "trl", "accelerate", "vllm", "torchrun", "ray"}
_NOT_ON_PATH = re.compile(r"command cannot be run: '([^']+)' is not on PATH")
# `up`'s quick module check (issue 26): a framework's package that is not installed here.
_NOT_INSTALLED_HERE = re.compile(r"module '[^']+' is not importable by .*: package '(sglang|vllm|areal|verl|trl|"
                                 r"prime_rl|transformers|datasets)' is not installed there")
# Scripts a preset runs from the framework's checkout (not in its wheel), absent where the test runs.
CHECKOUT_SCRIPTS = ("examples/math/gsm8k_rl.py",)


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


def test_the_expected_configs_exist() -> None:
    names = {p.name for p in PRESET_FILES}
    assert {"prime-rl.yaml", "areal.yaml", "verl.yaml", "trl.yaml"} <= names
    assert (ROOT / "configs" / "a40.yaml").exists() and (ROOT / "configs" / "a40-vllm.yaml").exists()


@pytest.mark.parametrize("path", CONFIGS, ids=_ids(CONFIGS))
def test_config_passes_fast_preflight(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # relative checkpoint dirs resolve here; preflight leaves nothing behind
    # As after the README's `. .venv/bin/activate`: `python` in a config is this venv's (without it, the result
    # hung on whether an earlier test in this process had put the venv on PATH).
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    cfg = load_config(path, run_dir=str(tmp_path / "run"))
    findings = run_checks(cfg, fast=True, min_free_gb=0.0)
    unexpected = []
    for f in findings:
        if f.severity == "info":
            continue
        m = _NOT_ON_PATH.search(f.message)
        if f.severity == "error" and f.check == "command" and m and m.group(1) in NOT_INSTALLED_OK:
            continue  # the framework is not installed here
        if f.severity == "error" and f.check == "command" and _NOT_INSTALLED_HERE.search(f.message):
            continue  # nor is its Python package
        if f.check == "command" and "does not exist" in f.message and f.message.split()[2].endswith(CHECKOUT_SCRIPTS):
            continue  # the preset runs from the framework's checkout
        if f.check == "slurm" and "a filesystem local to this machine" in f.message:
            continue  # the test puts the run dir in a local temp dir; a cluster's would be shared
        if f.check == "port" and "already in use" in f.message:
            continue  # another process on this machine (a parallel test) holds the default port
        unexpected.append(f)
    assert not unexpected, "\n".join(f"{f.severity} [{f.check}] {f.component}: {f.message}" for f in unexpected)
    assert list(tmp_path.iterdir()) == [], "preflight left files behind"
    for name, comp in cfg.components.items():
        if comp.progress is not None and comp.progress.preset is not None:
            assert comp.progress.preset in PRESETS, f"{name}: unknown preset {comp.progress.preset}"


@pytest.mark.parametrize("path", PRESET_FILES, ids=_ids(PRESET_FILES))
def test_preset_notes_its_version_and_sources(path: Path) -> None:
    text = path.read_text()
    assert re.search(r"^# (?:Written against|Pinned to) .+", text, re.M), "no framework version noted"
    assert re.search(r"^#.*https://\S+", text, re.M), "no source URL"
    cfg = load_config(path)
    assert any(c.progress is not None and c.progress.preset for c in cfg.components.values())
    assert any(c.resume is not None for c in cfg.components.values())
    assert any(c.exit_on_end for c in cfg.components.values())


@pytest.mark.parametrize("name", ["a40.yaml", "a40-vllm.yaml"])
def test_a40_configs_share_one_gpu_safely(name: str) -> None:
    cfg = load_config(ROOT / "configs" / name, environ={})
    inf, orch, trainer = (cfg.components[n] for n in ("inference", "orchestrator", "trainer"))
    assert inf.gpus == [0] and trainer.gpus == [0] and orch.gpus is None
    assert inf.ready is not None and inf.ready.http and inf.ready.http.endswith("/health")
    assert inf.ready.timeout >= 900 and inf.alive is not None
    command = inf.command if isinstance(inf.command, str) else " ".join(inf.command)
    fraction = re.search(r"--(?:mem-fraction-static|gpu-memory-utilization) (\d*\.\d+)", command)
    assert fraction and float(fraction.group(1)) <= 0.6, "the trainer needs what the server leaves"
    assert "rlsup.trainer.hf latest" in command  # a restarted server loads the newest weights
    argv = trainer.argv()
    for flag in ("--model", "--micro-batch", "--max-seq-len", "--weight-sync"):
        assert flag in argv, flag
    assert float(orch.argv()[orch.argv().index("--request-timeout") + 1]) >= 600
    assert int(orch.argv()[orch.argv().index("--concurrency") + 1]) > 0
    assert "inference" in orch.restart_with and trainer.depends_on == {"inference": "ready"}
    assert trainer.resume is not None and trainer.resume.layout == "prime-rl"
    assert trainer.resume.args == ["--resume-step", "{step}"] and trainer.exit_on_end
    assert orch.progress.preset == trainer.progress.preset == "rlsup"


def test_rlsup_preset_reads_the_hf_trainer_line() -> None:
    from rlsup.trainer.steplog import format_step

    line = format_step(7, 200, {"reward": 0.4375, "loss": -0.0123, "trained": 192, "tokens": 40960,
                                "peak_mem_gb": 13.52, "off_policy": 1, "wait_s": 0.01, "train_s": 21.3})
    step, total, metrics = parse_line(PRESETS["rlsup"], line)
    assert (step, total) == (7, 200)
    assert metrics["reward"] == pytest.approx(0.4375, abs=1e-3) and metrics["peak_mem_gb"] == pytest.approx(13.52)


@pytest.mark.parametrize(("name", "package", "extra"), [("a40-vllm.yaml", "vllm", "vllm"),
                                                         ("a40.yaml", "sglang", "sglang")])
def test_check_names_the_missing_engine_and_its_extra(name: str, package: str, extra: str, tmp_path: Path) -> None:
    """`rlsup check` on a machine without the engine: the inference command's interpreter is asked, and the
    finding names the package and the rlsup extra that installs it (the engine runs as `python -m`, so it is
    checked in the trainer's own python rather than as some `vllm` on PATH)."""
    import importlib.util

    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    cfg = load_config(ROOT / "configs" / name, run_dir=str(tmp_path / "run"))
    findings = [f for f in run_checks(cfg, min_free_gb=0.0) if f.component == "inference" and f.check == "command"]
    assert len(findings) == 1, findings
    f = findings[0]
    assert f.severity == "error"
    assert f"package '{package}' is not installed" in f.message
    assert f"pip install 'rlsup[{extra}]'" in f.fix


def test_a40_vllm_states_the_reload_each_version_gets() -> None:
    """The config's comments say what rlsup.trainer.sync does per vLLM version (the version bounds read in
    the wheels: tests/contract/servers.py), and the server has the dev routes, on loopback only."""
    from rlsup.trainer import sync

    text = (ROOT / "configs" / "a40-vllm.yaml").read_text()
    header = " ".join(" ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#")).split())
    assert "0.10.2 - 0.15.1" in header and '"update_config"' in header
    assert "0.16.0 and newer" in header and '"weights_path"' in header
    assert "empty body up to 0.25.1" in header and "from 0.26.0" in header and "from 0.12.0" in header
    assert "0.11-0.14" not in header  # the old "written against 0.11-0.14" note is gone
    assert sync.pause_query((0, 15, 1)).startswith("wait_for_inflight_requests=true")
    assert sync.pause_query((0, 16, 0)).startswith("mode=wait")
    cfg = load_config(ROOT / "configs" / "a40-vllm.yaml", environ={})
    inf = cfg.components["inference"]
    assert inf.env.get("VLLM_SERVER_DEV_MODE") == "1"
    command = inf.command if isinstance(inf.command, str) else " ".join(inf.command)
    assert "--host 127.0.0.1" in command and "python -m vllm.entrypoints.cli.main serve" in command
    assert "--weight-sync vllm" in " ".join(cfg.components["trainer"].argv())


def _uncomment_second_source(text: str) -> str:
    """configs/presets/prime-rl.yaml with its commented `env-math` block and depends_on line switched on,
    as its header tells a user with a second [[orchestrator.train.source]] to do: nothing else changed."""
    out, in_block, found = [], False, 0
    for line in text.splitlines():
        if line == "  # env-math:":
            in_block, line, found = True, "  env-math:", found + 1
        elif in_block and line.startswith("  #   "):
            line = "    " + line[len("  #   "):]
        elif line == "      # env-math: started":
            line, found = "      env-math: started", found + 1
        elif line == "      # - env-math":
            line, found = "      - env-math", found + 1
        else:
            in_block = False
        out.append(line)
    assert found == 4, "the preset no longer shows the second env server the way its header says"
    return "\n".join(out) + "\n"


def test_prime_rl_second_source_validates_and_gates_the_orchestrator(tmp_path: Path) -> None:
    """prime-rl's `rl` starts one env server per data source (src/prime_rl/entrypoints/rl.py env_servers, at
    559b447) and the orchestrator connects to each: with two sources, the orchestrator may start only once
    both env components have started (and the inference server is ready)."""
    from rlsup.supervisor.rules.detectors import Seen, gate
    from rlsup.supervisor.rules.lifecycle import DepsMet, DepsWaiting

    path = tmp_path / "prime-rl.yaml"
    path.write_text(_uncomment_second_source((ROOT / "configs" / "presets" / "prime-rl.yaml").read_text()))
    cfg = load_config(path, run_dir=str(tmp_path / "run"), environ={})
    envs = {n: c for n, c in cfg.components.items() if n.startswith("env-")}
    assert set(envs) == {"env-reverse-text", "env-math"}
    assert envs["env-math"].argv() == ["uv", "run", "env-server", "@", "outputs/reverse-text/configs/envs/train/math.json"]
    assert envs["env-math"].depends_on == envs["env-reverse-text"].depends_on == {"configs": "completed"}
    orch = cfg.components["orchestrator"]
    assert orch.depends_on == {"inference": "ready", "env-reverse-text": "started", "env-math": "started"}
    for name in ("orchestrator", "trainer"):  # a restarting env server restarts both (as `rl` stops all)
        assert "env-math" in cfg.components[name].restart_with
    order = cfg.topo_order()
    assert order.index("orchestrator") > max(order.index("env-math"), order.index("env-reverse-text"))

    def seen(**states: str) -> dict[str, Seen]:
        base = {n: "pending" for n in cfg.components}
        base.update({"configs": "completed", "inference": "running"})
        base.update({k.replace("_", "-"): v for k, v in states.items()})
        # "starting" here is a process that exists and awaits readiness (started_at set): a spawn not
        # yet done does not count as started (issue 26: started events in dependency order).
        return {n: Seen(n, s, started_at=1.0 if s in ("starting", "running") else None) for n, s in base.items()}

    waiting = gate("orchestrator", cfg, seen(env_reverse_text="running"))
    assert isinstance(waiting, DepsWaiting) and any("env-math" in w for w in waiting.waiting)
    assert not any("env-reverse-text" in w for w in waiting.waiting)
    waiting = gate("orchestrator", cfg, seen(env_math="starting"))
    assert isinstance(waiting, DepsWaiting) and any("env-reverse-text" in w for w in waiting.waiting)
    assert isinstance(gate("orchestrator", cfg, seen(env_reverse_text="running", env_math="starting")), DepsMet)
    # and `rlsup check`'s fast preflight finds nothing but the framework missing from this machine
    findings = [f for f in run_checks(cfg, fast=True, min_free_gb=0.0) if f.severity != "info"]
    assert all(f.check in ("command", "port") for f in findings), findings
    assert {m.group(1) for f in findings if (m := _NOT_ON_PATH.search(f.message))} <= {"uv"}
