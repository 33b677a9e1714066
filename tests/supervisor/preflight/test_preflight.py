"""Preflight checks on real conditions: files, sockets, processes; GPUs through a fake sampler."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import psutil
import pytest

from rlsup.supervisor.config.loader import ConfigError, load_config
from rlsup.supervisor.gpu.nvml import GpuProcess, NoneSampler
from rlsup.supervisor.monitor.process import find_marked
from rlsup.supervisor.preflight.checks import Finding, exit_code, format_findings, run_checks
from tests.supervisor.gpu.fakes import FakeSampler

FIXTURES = Path(__file__).parent.parent.parent / "fixtures" / "preflight"
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fill(tmp: Path, template: str, dest_dir: Path | None = None, **extra: object) -> Path:
    """Write FIXTURES/template with its placeholders filled; returns the config's path."""
    text = (FIXTURES / template).read_text()
    subs = {"py": PY, "tmp": str(tmp), "fixtures": str(FIXTURES), **{k: str(v) for k, v in extra.items()}}
    for k, v in subs.items():
        text = text.replace("{" + k + "}", v)
    out = (dest_dir or tmp) / template
    out.write_text(text)
    return out


def write(tmp: Path, text: str) -> Path:
    p = tmp / "run.yaml"
    p.write_text(text.replace("{py}", PY).replace("{tmp}", str(tmp)))
    return p


def of(findings: list[Finding], check: str, severity: str = "error", component: str | None = "*") -> list[Finding]:
    return [f for f in findings if f.check == check and severity in ("*", f.severity)
            and (component == "*" or f.component == component)]


# ------------------------------------------------------------------------------------------ sound


def test_sound_config_passes_every_check(tmp_path):
    cfg = load_config(fill(tmp_path, "sound.yaml", port=free_port()))
    progress: list[str] = []
    findings = run_checks(cfg, smoke=True, gpu_sampler=FakeSampler(2), min_free_gb=0.01,
                          on_progress=progress.append)
    assert [f for f in findings if f.severity != "info"] == []
    assert exit_code(findings) == 0
    # Free memory of each GPU named is shown.
    infos = of(findings, "gpu", "info")
    assert {f.component for f in infos} == {"server", "trainer"}
    assert all("79.6 of 79.6 GiB free" in f.message for f in infos)
    assert any("smoke trainer: ok" in m for m in progress)
    assert format_findings(findings, config_path="sound.yaml").endswith("0 errors, 0 warnings")
    # Nothing left behind by the write round trip, and nothing created either.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sound.yaml"]


# ------------------------------------------------------------------------------------------ broken


@pytest.fixture
def held_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


def test_broken_config_lists_every_problem_with_a_fix(tmp_path, held_port):
    (tmp_path / "afile").write_text("a file where the run dir's parent should be")
    path = fill(tmp_path, "broken.yaml", held=held_port)
    cfg = load_config(path)
    # The hanging smoke command sleeps an hour: run_checks returning at all (this test has 120 s) says it
    # was ended at its 1.5 s timeout, not waited for, however loaded the machine.
    findings = run_checks(cfg, smoke=True, smoke_timeout=1.5, gpu_sampler=FakeSampler(2))
    assert exit_code(findings) == 1

    (module,) = [f for f in of(findings, "command", component="inference")]
    assert "rlsup_no_such_module_xyz" in module.message and PY in module.message
    assert module.where == f"{cfg.source}:7"
    (cwd,) = of(findings, "cwd", component="orchestrator")
    assert "no_such_dir does not exist" in cwd.message and cwd.where == f"{cfg.source}:13"
    (missing,) = of(findings, "command", component="orchestrator")
    assert "'rlsup-no-such-command-xyz' is not on PATH" in missing.message and missing.where == f"{cfg.source}:12"
    (script,) = of(findings, "command", component="trainer")
    assert "no_such_train.py does not exist" in script.message

    (port,) = of(findings, "port")
    assert f"port {held_port}" in port.message and f"pid {os.getpid()}" in port.message
    assert "inference" in port.message and port.fix

    (rundir,) = of(findings, "writable")
    assert "afile is a file" in rundir.message and rundir.where == f"{cfg.source}:4"

    (gpu5,) = of(findings, "gpu", component="trainer")
    assert "GPU 5 does not exist" in gpu5.message and "indices 0, 1" in gpu5.message
    (overlap,) = of(findings, "gpu", "warning", component="orchestrator")
    assert "shares GPU 0 with inference" in overlap.message

    (var,) = of(findings, "env", "warning", component="hanger")
    assert "RLSUP_PREFLIGHT_UNSET_XYZ" in var.message

    (attr,) = of(findings, "smoke", component="trainer")
    assert "AttributeError" in attr.message and "learning_rate" in attr.message
    assert f"{FIXTURES / 'train_attr.py'}:7" in attr.message or "train_attr.py:7" in attr.message
    assert "train_attr.py:7" in attr.fix

    (hang,) = of(findings, "smoke", component="hanger")
    assert "did not finish within 1.5s" in hang.message and "| warming up" in hang.message
    assert not find_marked(cfg.run_dir, "hanger"), "the hanging smoke command was left running"

    text = format_findings(findings, config_path="broken.yaml", source=cfg.source)
    assert text.splitlines()[-1] == "9 errors, 2 warnings"
    assert "broken.yaml:7: error [command] inference:" in text
    assert text.count("    fix: ") == 11
    # Errors first.
    sev = [line.split(" [")[0].rsplit(" ", 1)[-1] for line in text.splitlines() if " [" in line]
    assert sev == sorted(sev, key=["error", "warning", "info"].index)


def test_fast_skips_interpreters_gpus_and_smoke(tmp_path, held_port, monkeypatch):
    from rlsup.supervisor.preflight import checks

    # `up` gives the quick module lookup 5 s, then leaves what it does not know to the run; this test
    # wants its answer however loaded the machine.
    monkeypatch.setattr(checks, "QUICK_MODULES_S", 120.0)
    (tmp_path / "afile").write_text("x")
    cfg = load_config(fill(tmp_path, "broken.yaml", held=held_port))

    class Exploding:
        def sample(self):
            raise AssertionError("fast checks must not sample GPUs")

        def close(self):
            pass

    said: list[str] = []
    findings = run_checks(cfg, fast=True, gpu_sampler=Exploding(), on_progress=said.append)
    # Neither the per-interpreter module check nor the GPUs (Exploding) nor a smoke command ran.
    assert said and not [m for m in said if "in their interpreters" in m or "GPUs" in m or "smoke" in m], said
    assert not of(findings, "smoke", "*")
    assert not of(findings, "gpu", "error") and not of(findings, "gpu", "warning")
    # The module check runs in fast mode too (issue 26: `up` with the wrong venv), batched and quick.
    found = of(findings, "command", component="inference")
    assert len(found) == 1 and "rlsup_no_such_module_xyz" in found[0].message, found
    assert of(findings, "port") and of(findings, "writable") and of(findings, "cwd", component="orchestrator")


# -------------------------------------------------------------------------------------- one by one


def test_module_checked_in_the_interpreter_on_the_components_path(tmp_path):
    bindir = tmp_path / "venv" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "python").symlink_to(PY)
    (tmp_path / "pkg_here").mkdir()
    (tmp_path / "pkg_here" / "__init__.py").write_text("")
    (tmp_path / "pkg_bad").mkdir()
    (tmp_path / "pkg_bad" / "__init__.py").write_text("raise RuntimeError('broken package init')\n")
    cfg = load_config(write(tmp_path, f"""
components:
  ok_stdlib: {{command: python -m json.tool --help, env: {{PATH: "{bindir}:/usr/bin:/bin"}}}}
  ok_cwd: {{command: python -m pkg_here, cwd: "{tmp_path}", env: {{PATH: "{bindir}:/usr/bin:/bin"}}}}
  missing: {{command: python -m rlsup_nope_xyz, env: {{PATH: "{bindir}:/usr/bin:/bin"}}}}
  raising: {{command: python -m pkg_bad.sub, cwd: "{tmp_path}", env: {{PATH: "{bindir}:/usr/bin:/bin"}}}}
"""))
    findings = of(run_checks(cfg, gpu_sampler=NoneSampler()), "command")
    assert {f.component for f in findings} == {"missing", "raising"}
    (missing,) = [f for f in findings if f.component == "missing"]
    assert f"{bindir}/python" in missing.message
    (raising,) = [f for f in findings if f.component == "raising"]
    assert "RuntimeError: broken package init" in raising.message


def test_missing_command_and_non_executable_path(tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    cfg = load_config(write(tmp_path, """
components:
  a: {command: rlsup-definitely-missing-xyz}
  b: {command: ./launch.sh, cwd: "{tmp}"}
  c: {command: "FOO=1 rlsup-missing-in-shell-xyz --x", shell: true}
  d: {command: "cd /tmp && anything-goes", shell: true}
  e: {command: "cd /tmp && ./relative-to-tmp.sh && sh ./x.py", shell: true}
"""))
    found = {f.component: f for f in of(run_checks(cfg, fast=True), "command")}
    # d: the command after `cd` is read too (a bare name is looked up on PATH wherever the shell is);
    # e: paths relative to a directory only the shell knows are left to the smoke run
    assert set(found) == {"a", "b", "c", "d"}
    assert "'anything-goes' is not on PATH" in found["d"].message
    assert "'rlsup-definitely-missing-xyz' is not on PATH" in found["a"].message
    assert "launch.sh is not executable" in found["b"].message  # no x bit stops root too
    assert "rlsup-missing-in-shell-xyz" in found["c"].message


def test_missing_env_var_is_a_config_error_and_a_shell_var_a_warning(tmp_path, monkeypatch):
    monkeypatch.delenv("RLSUP_PF_MISSING", raising=False)
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, "components:\n  a: {command: 'echo ${RLSUP_PF_MISSING}'}\n"))
    assert "RLSUP_PF_MISSING is not set" in str(e.value)
    cfg = load_config(write(tmp_path, """
components:
  a: {shell: true, command: 'X=1; for i in 1 2; do echo $X $i $RLSUP_PF_MISSING ${RLSUP_PF_MISSING2:-d} $HOME; done'}
  b: {command: 'echo $$RLSUP_PF_LITERAL'}
"""))
    warns = of(run_checks(cfg, fast=True), "env", "warning")
    assert [(f.component, f.message.split("$")[1].split(" ")[0]) for f in warns] == [
        ("a", "RLSUP_PF_MISSING"), ("b", "RLSUP_PF_LITERAL,")]
    assert "passed literally" in warns[1].message


def test_env_file_unreadable(tmp_path):
    ef = tmp_path / "secrets.env"
    ef.write_text("A=1\n")
    cfg = load_config(write(tmp_path, "env_file: secrets.env\ncomponents:\n  a: {command: 'true'}\n"))
    assert not of(run_checks(cfg, fast=True), "env_file")
    ef.unlink()  # gone (or unmounted) between writing the config and starting the run
    (f,) = of(run_checks(cfg, fast=True), "env_file")
    assert "secrets.env" in f.message and "No such file" in f.message and f.where == f"{cfg.source}:1"


def test_cwd_missing_and_a_file(tmp_path):
    (tmp_path / "plain").write_text("")
    cfg = load_config(write(tmp_path, """
components:
  a: {command: 'true', cwd: "{tmp}/nope"}
  b: {command: 'true', cwd: "{tmp}/plain"}
"""))
    found = {f.component: f.message for f in of(run_checks(cfg, fast=True), "cwd")}
    assert "does not exist" in found["a"] and "is not a directory" in found["b"]


def test_checkpoint_parent_is_a_file_and_missing_dirs_will_be_created(tmp_path):
    (tmp_path / "blocker").write_text("")
    cfg = load_config(write(tmp_path, """
run_dir: "{tmp}/deep/new/run"
components:
  t:
    command: 'true'
    resume: {checkpoints: "{tmp}/blocker/ckpt"}
    watch: [{path: "{tmp}/rollouts/*.jsonl"}]
"""))
    findings = run_checks(cfg, fast=True, min_free_gb=0.01)
    (f,) = of(findings, "writable")
    assert f.component == "t" and "blocker is a file" in f.message and f.where == f"{cfg.source}:6"
    assert not (tmp_path / "deep").exists(), "the check must not create directories"


def _ro_dir_findings_as(uid: int | None, base: Path) -> list[dict]:
    """run_checks(fast) on a config whose run dir is inside a read-only dir, as ``uid`` (a forked
    child that drops root) or as ourselves (uid None)."""
    ro = base / "ro"
    ro.mkdir()
    if uid is not None:
        os.chown(ro, uid, uid)
    ro.chmod(0o500)
    cfg = load_config(write(base, "run_dir: \"{tmp}/ro/run\"\ncomponents:\n  a: {command: 'true'}\n"))
    if uid is None:
        return [asdict(f) for f in run_checks(cfg, fast=True)]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        code = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            out = json.dumps([asdict(f) for f in run_checks(cfg, fast=True)]).encode()
            os.write(w, out)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the unprivileged child failed"
    return json.loads(data)


def test_read_only_directory(tmp_path):
    if os.geteuid() != 0:
        findings = _ro_dir_findings_as(None, tmp_path)
        uid = os.geteuid()
    else:
        # chmod does not stop root: drop to an unprivileged uid in a forked child, in a scratch dir it
        # can traverse (pytest's tmp_path is 0700 root).
        base = Path(tempfile.mkdtemp(prefix="rlsup-pf-"))
        try:
            base.chmod(0o755)
            uid = 65534
            findings = _ro_dir_findings_as(uid, base)
        finally:
            (base / "ro").chmod(0o700)
            import shutil

            shutil.rmtree(base)
    (f,) = [f for f in findings if f["check"] == "writable"]
    assert f["severity"] == "error"
    assert "ro/run is not writable (it does not exist yet; it will be created under" in f["message"]
    assert "Permission denied" in f["message"] and f"uid {uid}" in f["fix"]


def test_disk_space_below_threshold_shows_free_vs_needed(tmp_path):
    cfg = load_config(write(tmp_path, 'run_dir: "{tmp}/run"\ncomponents:\n  a: {command: "true"}\n'))
    (f,) = of(run_checks(cfg, fast=True, min_free_gb=1e9), "disk")
    assert "GB free on the file system of" in f.message and "needs 1e+09 GB" in f.message
    assert "run dir" in f.message


def test_gpu_overlap_missing_and_held_with_fake_sampler(tmp_path):
    cfg = load_config(write(tmp_path, """
components:
  a: {command: 'true', gpus: [0]}
  b: {command: 'true', gpus: [0, 1]}
  c: {command: 'true', gpus: [5]}
"""))
    fake = FakeSampler(2, "A100", processes={1: [GpuProcess(os.getpid(), 20480.0)]})
    findings = of(run_checks(cfg, gpu_sampler=fake), "gpu", "*")
    by = {(f.severity, f.component): f.message for f in findings}
    assert "GPU 5 does not exist: this machine has 2 GPU(s) (indices 0, 1)" in by[("error", "c")]
    assert "shares GPU 0 with a" in by[("warning", "b")]
    held = [f for f in findings if f.severity == "warning" and "already in use" in f.message]
    assert len(held) == 1 and f"pid {os.getpid()}" in held[0].message and "20.0 GiB" in held[0].message
    assert any("GPU 1 NVIDIA A100-SXM4-80GB: 59.5 of 80.0 GiB free" in f.message for f in findings)


def test_no_gpu_is_a_warning_not_a_crash(tmp_path):
    cfg = load_config(write(tmp_path, "components:\n  a: {command: 'true', gpus: [0]}\n  b: {command: 'true'}\n"))
    findings = run_checks(cfg, gpu_sampler=NoneSampler("no NVIDIA driver found (libnvidia-ml.so.1 not loadable)"))
    (w,) = of(findings, "gpu", "warning")
    assert w.component == "a" and "no NVIDIA driver found" in w.message
    assert exit_code(findings) == 0


def test_port_holder_named(held_port, tmp_path):
    cfg = load_config(write(tmp_path, f"""
components:
  srv: {{command: 'true', ready: {{tcp: "127.0.0.1:{held_port}"}}}}
  other: {{command: 'true', alive: {{http: "http://example.invalid:{held_port}/"}}}}
"""))
    (f,) = of(run_checks(cfg, fast=True), "port")
    me = psutil.Process()
    assert f.component == "srv" and f"pid {os.getpid()} ({me.name()}" in f.message


def test_smoke_spawn_failure_and_env(tmp_path):
    cfg = load_config(write(tmp_path, """
components:
  a: {command: 'true', smoke: rlsup-missing-smoke-xyz}
  b: {command: 'true', env: {K: v}, smoke: '{py} -c "import os,sys; sys.exit(0 if os.environ[\\"K\\"] == \\"v\\" and os.environ[\\"RLSUP_SMOKE\\"] == \\"1\\" else 9)"'}
"""))
    found = {f.component: f.message for f in of(run_checks(cfg, fast=True, smoke=True), "smoke")}
    assert set(found) == {"a"} and "cannot start" in found["a"]


@pytest.mark.parametrize("whose", ["this", "another"])
def test_port_held_by_a_component_of_a_run_says_which(tmp_path, whose):
    """A leftover of this run, or a component of another live run (its hint names that run's dir: a bare
    `rlsup down` would end whichever run the client finds, not necessarily the one holding the port)."""
    import subprocess

    cfg = load_config(write(tmp_path, 'run_dir: "{tmp}/run"\ncomponents:\n  srv: {command: "true"}\n'))
    theirs = cfg.run_dir if whose == "this" else str(tmp_path / "other run")
    env = dict(os.environ, RLSUP_RUN_DIR=theirs, RLSUP_COMPONENT="srv")
    holder = subprocess.Popen(
        [PY, "-c", "import socket,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); "
                   "print(s.getsockname()[1], flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True, env=env)
    try:
        port = int(holder.stdout.readline())
        cfg = load_config(write(tmp_path, f'run_dir: "{{tmp}}/run"\ncomponents:\n'
                                          f'  srv: {{command: "true", ready: {{http: "http://localhost:{port}/"}}}}\n'))
        (f,) = of(run_checks(cfg, fast=True), "port")
        assert f"pid {holder.pid} (" in f.message
        if whose == "this":
            assert "component srv of this run" in f.message
        else:
            assert f"component srv of the run in {theirs}" in f.message
            assert f"rlsup down --run-dir '{theirs}'" in f.fix
    finally:
        holder.kill()
        holder.wait()


def test_format_findings_names_the_config_as_typed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(write(tmp_path, "components:\n  a:\n    command: rlsup-missing-xyz\n    smoke: 'echo \"unclosed'\n"))
    findings = run_checks(cfg, fast=True, smoke=True)
    text = format_findings(findings, config_path="run.yaml")
    assert text.splitlines()[0].startswith("run.yaml:3: error [command] a: command cannot be run:")
    assert "run.yaml:4: error [smoke] a: smoke command cannot be split" in text
    assert text.splitlines()[-1] == "2 errors, 0 warnings" and exit_code(findings) == 1


def test_memory_fraction_follows_each_engines_semantics(tmp_path):
    """SGLang's --mem-fraction-static is a fraction of the memory free at start (sglang@v0.5.x
    model_runner_kv_cache_mixin.py profile_max_num_token: total_gpu_memory is the free memory measured
    before loading); vLLM's --gpu-memory-utilization is a fraction of total memory and vLLM refuses to
    start when less is free (vllm/v1/worker/gpu_worker.py Worker.init_device)."""
    from rlsup.supervisor.config.loader import load_config
    from rlsup.supervisor.gpu.nvml import GpuProcess
    from rlsup.supervisor.preflight.checks import memory_ask, run_checks

    def memory_fraction(comp):
        ask = memory_ask(comp)
        return (ask.flag, ask.fraction) if ask else None

    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(
        "name: frac\ncomponents:\n"
        "  sglang:\n    command: [python3, -m, sglang.launch_server, --mem-fraction-static, '0.6']\n    gpus: [0]\n"
        "  vllm:\n    command: 'vllm serve m --gpu-memory-utilization=0.3'\n    gpus: [1]\n"
        "  vllm_shell:\n    shell: true\n    command: 'exec vllm serve \"$(echo m)\" --gpu-memory-utilization 0.5'\n"
        "    gpus: [0]\n")
    cfg = load_config(str(cfg_path), run_dir=str(tmp_path / "run"))
    assert memory_fraction(cfg.components["sglang"]) == ("--mem-fraction-static", 0.6)
    assert memory_fraction(cfg.components["vllm"]) == ("--gpu-memory-utilization", 0.3)
    ask = memory_ask(cfg.components["vllm_shell"])  # read out of `exec ...` under shell: true
    assert ask is not None and (ask.engine, ask.of, ask.fraction) == ("vllm", "total", 0.5)
    # GPU 0 has 50 GiB of 80 taken by someone else.
    fake = FakeSampler(2, processes={0: [GpuProcess(os.getpid(), 50 * 1024.0)]})
    found = [f for f in run_checks(cfg, gpu_sampler=fake) if f.check == "gpu"]
    errors = [f for f in found if f.severity == "error"]
    # vLLM at 0.5 x 80 = 40 GiB > 29.5 free: refuses to start -> error. SGLang at 0.6 takes 0.6 of the
    # ~29.5 GiB free: it starts (no error) but gets less than on an empty GPU -> a warning that says so.
    assert [f.component for f in errors] == ["vllm_shell"]
    assert "Free memory on device" in errors[0].message and "lower --gpu-memory-utilization" in errors[0].fix
    sg_info = [f for f in found if f.component == "sglang" and "takes 0.6 of the memory free" in f.message]
    assert sg_info and "now 29.1 GiB -> ~17.5 GiB" in sg_info[0].message
    assert any(f.component == "sglang" and f.severity == "warning" and "fraction of the free memory" in f.message
               for f in found)


def test_exec_and_shell_commands_get_the_module_check_with_the_extra_that_installs_it(tmp_path):
    """configs/a40.yaml's inference command is `exec python -m sglang.launch_server ... "$(...)"` under
    shell: true: the interpreter must still be asked whether it can import sglang."""
    from rlsup.supervisor.preflight.checks import command_argvs
    from rlsup.supervisor.records.extras import install_hint

    bindir = tmp_path / "venv" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "python").symlink_to(PY)
    data = tmp_path / "gsm8k.jsonl"
    data.write_text('{"question": "q", "answer": "#### 1"}\n')
    cfg = load_config(write(tmp_path, f"""
components:
  inference:
    shell: true
    env: {{PATH: "{bindir}:/usr/bin:/bin"}}
    command: >-
      exec python -m sglang.launch_server
      --model-path "$(python -m rlsup.trainer.hf latest /nonexistent --default m)" --mem-fraction-static 0.45
  listed:
    command: ["{bindir}/python", "-m", "rlsup_no_such_pkg_xyz.server"]
  orch_by_name:
    command: "{PY} -m rlsup.trainer.orchestrator --server http://x --out o --task gsm8k --data openai/gsm8k:main"
  orch_by_file:
    command: "{PY} -m rlsup.trainer.orchestrator --server http://x --out o --task gsm8k --data {data}"
"""))
    argvs = command_argvs(cfg.components["inference"])
    assert [a[:3] for a in argvs] == [["python", "-m", "sglang.launch_server"]]
    findings = of(run_checks(cfg, gpu_sampler=NoneSampler()), "command")
    by = {}
    for f in findings:
        by.setdefault(f.component, []).append(f)
    have_sglang = importlib.util.find_spec("sglang") is not None
    have_datasets = importlib.util.find_spec("datasets") is not None
    if not have_sglang:
        (sg,) = by["inference"]
        assert "'sglang.launch_server'" in sg.message and "package 'sglang' is not installed" in sg.message
        assert "pip install 'rlsup[sglang]'" in sg.fix
    (listed,) = by["listed"]
    assert "rlsup_no_such_pkg_xyz" in listed.message
    if not have_datasets:
        (ds,) = by["orch_by_name"]
        assert "'datasets'" in ds.message and "loaded by name" in ds.message
        assert "pip install 'rlsup[gsm8k]'" in ds.fix
    assert "orch_by_file" not in by  # a local JSONL file needs no `datasets`
    assert install_hint("sglang.launch_server") == "pip install 'rlsup[sglang]'"
    assert install_hint("vllm") == "pip install 'rlsup[vllm]'"
    assert install_hint("datasets") == "pip install 'rlsup[gsm8k]'"
    assert install_hint("transformers.models") == "pip install 'rlsup[train]'"
    assert install_hint("rlsup_no_such_pkg_xyz") is None


def test_console_scripts_are_checked_in_their_own_interpreter(tmp_path):
    """`vllm serve` / `trl vllm-serve`: the package must import under the script's #! interpreter."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("vllm", "trl"):
        script = bindir / name
        script.write_text(f"#!{PY}\nimport sys\n")
        script.chmod(0o755)
    cfg = load_config(write(tmp_path, f"""
components:
  v: {{command: "vllm serve m --gpu-memory-utilization 0.3", env: {{PATH: "{bindir}:/usr/bin:/bin"}}}}
  t: {{command: "trl vllm-serve --model m", env: {{PATH: "{bindir}:/usr/bin:/bin"}}}}
"""))
    findings = of(run_checks(cfg, gpu_sampler=NoneSampler()), "command")
    msgs = {(f.component, f.message.split("'")[1]) for f in findings}
    if importlib.util.find_spec("vllm") is None:
        assert ("v", "vllm") in msgs and ("t", "vllm") in msgs
        assert any("pip install 'rlsup[vllm]'" in f.fix for f in findings if f.component == "v")
    if importlib.util.find_spec("trl") is None:
        assert ("t", "trl") in msgs


def test_an_inference_engine_without_a_liveness_probe_is_warned_about(tmp_path):
    """A vLLM API server can outlive its engine core (issue 42): without `alive`, a server that stops answering
    while its process lives is never restarted. The fix is the block to paste, with the readiness URL."""
    cfg = load_config(write(tmp_path, 'run_dir: "{tmp}/run"\ncomponents:\n'
                                      '  inference:\n'
                                      '    command: exec python -m vllm.entrypoints.cli.main serve m --port 8123\n'
                                      '    shell: true\n'
                                      '    ready: {http: "http://127.0.0.1:8123/health"}\n'
                                      '  sglang:\n'
                                      '    command: python -m sglang.launch_server --model-path m --port 31000\n'
                                      '  probed:\n'
                                      '    command: vllm serve m\n'
                                      '    alive: {http: "http://127.0.0.1:8000/health"}\n'
                                      '  trainer:\n'
                                      '    command: python -m rlsup.trainer.train --weight-sync vllm\n'))
    found = {f.component: f for f in of(run_checks(cfg, fast=True), "alive", "warning")}
    assert sorted(found) == ["inference", "sglang"]
    f = found["inference"]
    assert f.where and f.where.endswith(":3") and "vllm server without a liveness probe" in f.message
    assert 'alive: {http: "http://127.0.0.1:8123/health", interval: 15, failures: 4, timeout: 30}' in f.fix
    assert '"http://127.0.0.1:31000/health"' in found["sglang"].fix  # from --port, without a ready URL
    assert exit_code(of(run_checks(cfg, fast=True), "alive", "warning")) == 0  # a warning: the run may start


def test_a_config_with_nothing_to_say_is_parsed_once(tmp_path, monkeypatch):
    """`up`'s preflight re-reads the YAML only for the line of a finding: 10,000 components cost seconds a parse."""
    from rlsup.supervisor.preflight import checks

    lines = "".join(f"  c{i}: {{command: [/bin/true], restart: {{policy: never}}}}\n" for i in range(50))
    cfg = load_config(write(tmp_path, f"name: many\ncomponents:\n{lines}"))
    parsed: list[str] = []
    real = checks.load_yaml
    monkeypatch.setattr(checks, "load_yaml", lambda text, file: parsed.append(file) or real(text, file))
    assert [f for f in run_checks(cfg, fast=True) if f.severity != "info"] == []
    assert parsed == []
    (tmp_path / "afile").write_text("")
    cfg = load_config(write(tmp_path, "components:\n  a: {command: [/bin/true], cwd: " + str(tmp_path / "afile") + "}\n"))
    bad = [f for f in run_checks(cfg, fast=True) if f.severity == "error"]
    assert bad and all(f.where == f"{cfg.source}:2" for f in bad if f.component == "a")
    assert len(parsed) == 1  # once, however many findings


def test_the_run_environment_is_read_once_not_once_per_component(tmp_path, monkeypatch):
    """os.environ decodes every variable at each copy: two copies per component were most of `up`'s
    preflight at thousands of components."""
    from collections.abc import MutableMapping

    from rlsup.supervisor.preflight import checks

    class Counted(MutableMapping):  # type: ignore[type-arg]
        """os.environ itself underneath (pytest writes to it meanwhile), its copies counted."""

        copies = 0

        def __init__(self, env):
            self.env = env

        def __setitem__(self, k, v):
            self.env[k] = v

        def __delitem__(self, k):
            del self.env[k]

        def keys(self):  # what dict(mapping) calls
            Counted.copies += 1
            return self.env.keys()

        def __getitem__(self, k):
            return self.env[k]

        def __iter__(self):
            return iter(self.env)

        def __len__(self):
            return len(self.env)

    lines = "".join(f"  c{i}: {{command: 'echo $HOME', shell: true}}\n" for i in range(20))
    cfg = load_config(write(tmp_path, f"name: many\ncomponents:\n{lines}"))
    monkeypatch.setattr(checks.os, "environ", Counted(os.environ))
    assert [f for f in run_checks(cfg, fast=True) if f.check == "env"] == []  # $HOME is set: no warning
    assert Counted.copies == 1
