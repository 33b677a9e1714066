"""Config loading: every bad input gives FILE:LINE:COL and a key path, never a traceback."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlsup.supervisor.client.fleet import load_fleet
from rlsup.supervisor.config.loader import ConfigError, load_config
from tests.conftest import interpolate

ROOT = Path(__file__).resolve().parents[3]


def load(tmp_path, text, **kw):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return load_config(p, **kw)


def problems(tmp_path, text, **kw):
    with pytest.raises(ConfigError) as ei:
        load(tmp_path, text, **kw)
    return [str(p) for p in ei.value.problems]


GOOD = """\
name: demo
env: {HF_HOME: /tmp/hf, N: 3}
components:
  inference:
    command: python -m http.server 8000
    ready: {http: "http://127.0.0.1:8000/", timeout: 30}
    alive: {tcp: "127.0.0.1:8000", interval: 5, failures: 2}
  trainer:
    command: ["python", "-c", "print(1)"]
    depends_on: {inference: ready}
    gpus: [0, 1]
    progress: {pattern: 'Step (?P<step>\\d+)', total: 10, stall_after: 60}
    restart: {policy: always, backoff: {initial: 1, factor: 3, max: 30}}
    stop: {signal: INT, timeout: 5}
    exit_on_end: true
"""


def test_good_config(tmp_path):
    cfg = load(tmp_path, GOOD)
    assert cfg.name == "demo"
    assert cfg.run_dir.endswith("runs/demo")
    assert cfg.env == {"HF_HOME": "/tmp/hf", "N": "3"}
    t = cfg.components["trainer"]
    assert t.depends_on == {"inference": "ready"}
    assert t.stop.signal == "SIGINT"
    assert cfg.components["inference"].argv() == ["python", "-m", "http.server", "8000"]
    assert cfg.topo_order() == ["inference", "trainer"]


def test_name_defaults_to_stem_and_run_dir_override(tmp_path):
    p = tmp_path / "my-run.yaml"
    p.write_text("components: {a: {command: 'true'}}\n")
    cfg = load_config(p, run_dir=str(tmp_path / "x"))
    assert cfg.name == "my-run" and cfg.run_dir == str(tmp_path / "x")


def test_yaml_syntax_error_has_position(tmp_path):
    out = problems(tmp_path, "components:\n  a:\n    command: [unclosed\n")
    assert len(out) == 1 and "YAML syntax error" in out[0]
    assert out[0].startswith(f"{tmp_path}/c.yaml:")


def test_unknown_key_did_you_mean(tmp_path):
    out = problems(tmp_path, "components:\n  a:\n    command: 'true'\n    restart: {polcy: always}\n")
    assert out == [f"{tmp_path}/c.yaml:4:15: components.a.restart: unknown key 'polcy'; did you mean 'policy'?"]


def test_unknown_top_level_and_component_keys(tmp_path):
    out = problems(tmp_path, "componets: {}\n")
    assert any("unknown key 'componets'; did you mean 'components'?" in o for o in out)
    assert any("missing required key 'components'" in o for o in out)
    out = problems(tmp_path, "components:\n  a:\n    comand: x\n")
    assert any(":3:5: components.a: unknown key 'comand'; did you mean 'command'?" in o for o in out)


def test_wrong_types(tmp_path):
    out = problems(tmp_path, "components:\n  a:\n    command: 'true'\n    restart: {max_restarts: lots}\n"
                             "    gpus: zero\n")
    assert any(o.startswith(f"{tmp_path}/c.yaml:4:") and "components.a.restart.max_restarts" in o
               and "'lots'" in o for o in out)
    assert any(":5:11: components.a.gpus" in o for o in out)


def test_a_restart_policy_alone_is_short_for_its_block(tmp_path):
    """`restart: never` (as docker compose writes it) is `restart: {policy: never}`; a policy that is none of the
    three is named with its line."""
    cfg = load(tmp_path, "components:\n  a:\n    command: 'true'\n    restart: never\n")
    assert cfg.components["a"].restart.policy == "never" and cfg.components["a"].restart.max_restarts == 10
    out = problems(tmp_path, "components:\n  a:\n    command: 'true'\n    restart: sometimes\n")
    assert any(o.startswith(f"{tmp_path}/c.yaml:4:") and "components.a.restart: " in o and "'never' (got 'sometimes')" in o
               for o in out), out


def test_unknown_dependency_and_cycle(tmp_path):
    out = problems(tmp_path, """\
components:
  a: {command: 'true', depends_on: [b]}
  b: {command: 'true', depends_on: {a: ready}}
  c: {command: 'true', depends_on: [inferense]}
  inference: {command: 'true'}
""")
    assert any("dependency cycle: a -> b -> a" in o for o in out)
    assert any(":4:" in o and "unknown dependency 'inferense'; did you mean 'inference'?" in o for o in out)


def test_invalid_regexes(tmp_path):
    out = problems(tmp_path, """\
components:
  a:
    command: 'true'
    ready: {log: "Server (started"}
    progress: {pattern: 'Step \\d+'}
""")
    assert any(":4:" in o and "invalid regular expression" in o for o in out)
    assert any(":5:" in o and "needs a named group `step`" in o for o in out)


def test_probe_needs_exactly_one_kind(tmp_path):
    out = problems(tmp_path, "components:\n  a:\n    command: 'true'\n    ready: {http: 'http://x/', tcp: 'h:1'}\n")
    assert any("give exactly one of http, tcp, log, file" in o for o in out)


def test_missing_env_var_without_default(tmp_path):
    out = problems(tmp_path, "components:\n  a:\n    command: 'echo ${RLSUP_TEST_NOPE}'\n",
                   environ={})
    assert out == [f"{tmp_path}/c.yaml:3:14: components.a.command: environment variable RLSUP_TEST_NOPE "
                   "is not set and has no default (set it, add it to env_file, or write ${RLSUP_TEST_NOPE:-default})"]


def test_interpolation_defaults_env_file_and_run_dir(tmp_path):
    (tmp_path / ".env").write_text("# comment\nexport PORT=9000\nMODEL='Qwen/Qwen2.5-0.5B'\nSHELLWINS=file\n")
    cfg = load(tmp_path, """\
env_file: .env
run_dir: ${RUNS:-/tmp/rlsup-runs}/x
components:
  a:
    command: serve --port ${PORT} --model ${MODEL} --out ${RLSUP_RUN_DIR}/w --x ${SHELLWINS} --cost $$5 --d ${UNSET:-dflt}
""", environ={"SHELLWINS": "shell"})
    assert cfg.run_dir == "/tmp/rlsup-runs/x"
    assert cfg.components["a"].argv() == ["serve", "--port", "9000", "--model", "Qwen/Qwen2.5-0.5B", "--out",
                                          "/tmp/rlsup-runs/x/w", "--x", "shell", "--cost", "$5", "--d", "dflt"]
    assert cfg.file_env["PORT"] == "9000"


def test_interpolate_function():
    assert interpolate("a${X}b${Y:-d}c$$", {"X": "1"}) == ("a1bdc$", [])
    assert interpolate("${X:-d}", {"X": ""}) == ("d", [])
    assert interpolate("${X-d}", {"X": ""}) == ("", [])
    assert interpolate("${X}", {}) == ("", ["X"])


def test_duplicate_key(tmp_path):
    out = problems(tmp_path, "components:\n  a: {command: 'true'}\n  a: {command: 'false'}\n")
    assert any(":3:3:" in o and "duplicate key 'a' (first at line 2)" in o for o in out)


def test_bad_signal_and_shell_split(tmp_path):
    out = problems(tmp_path, "components:\n  a:\n    command: \"echo 'unbalanced\"\n    stop: {signal: SIGNOPE}\n")
    assert any("cannot split command like a shell would" in o for o in out)
    assert any("unknown signal 'SIGNOPE'" in o for o in out)


def test_shell_true(tmp_path):
    cfg = load(tmp_path, "components:\n  a: {command: 'echo hi | tr a-z A-Z', shell: true}\n")
    assert cfg.components["a"].argv() == ["/bin/sh", "-c", "echo hi | tr a-z A-Z"]


def test_empty_and_non_mapping(tmp_path):
    assert "the file is empty" in problems(tmp_path, "")[0]
    assert "top level must be a mapping" in problems(tmp_path, "- a\n- b\n")[0]


def _rlsup() -> list[str]:
    # The installed console script, not a module path: the CLI module may move, the script stays.
    here = Path(sys.executable).with_name("rlsup")
    found = str(here) if here.exists() else shutil.which("rlsup")
    if not found:
        pytest.skip("the rlsup console script is not installed (pip install -e .)")
    return [found]


def test_cli_check_exit_codes(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("components:\n  a: {command: 'true', restart: {polcy: x}}\n")
    r = subprocess.run([*_rlsup(), "check", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2
    assert f"{bad}:2:" in r.stderr and "did you mean 'policy'" in r.stderr and "Traceback" not in r.stderr
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    r = subprocess.run([*_rlsup(), "check", str(good)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "start order: inference, trainer" in r.stdout
    r = subprocess.run([*_rlsup(), "check", str(tmp_path / "nope.yaml")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "cannot read config" in r.stderr


# ---------------------------------------------------------------------------- documented examples


CONTRACT = ROOT / "docs" / "contract.md"  # the repository's contract (config keys, with examples)
# the pages the README's config and fleet sections moved to, with their examples
MOVED = [ROOT / "docs" / "config.md", ROOT / "docs" / "fleet.md"]


def _yaml_examples() -> list[tuple[str, str]]:
    out = []
    for doc in [ROOT / "README.md", CONTRACT, *MOVED]:
        text = doc.read_text(encoding="utf-8")
        for m in re.finditer(r"^```ya?ml\n(.*?)^```", text, re.S | re.M):
            line = text.count("\n", 0, m.start()) + 1
            out.append((f"{doc.name}:{line}", m.group(1)))
    return out


EXAMPLES = _yaml_examples()


SHIPPED = sorted((ROOT / "configs").glob("*.yaml")) + sorted((ROOT / "configs" / "presets").glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(ROOT)) for p in SHIPPED])
def test_shipped_config_loads(tmp_path, path):
    cfg = load_config(path, run_dir=str(tmp_path / "run"))
    assert cfg.topo_order() and all(c.argv() for c in cfg.components.values())


def test_restart_with_itself(tmp_path):
    out = problems(tmp_path, "components:\n  a: {command: 'true', restart_with: [a]}\n")
    assert out == [f"{tmp_path}/c.yaml:2:39: components.a.restart_with[0]: a component cannot restart with itself"]


def test_resume_clean_globs_that_can_never_match_a_step(tmp_path):
    """A step is read from each matched name: `rollouts` (the directory, not its step_N entries) or an empty
    glob would silently delete nothing on every resume."""
    out = problems(tmp_path, "components:\n  a:\n    command: 'true'\n    resume:\n      checkpoints: ck\n"
                             "      clean: [rollouts/, '', 'rollouts/step_*', 'broadcasts/step_[0-9]*', out/step_3]\n")
    assert len(out) == 2, out
    assert "components.a.resume.clean[0]: 'rollouts/' names no step" in out[0] and "'rollouts/step_*'" in out[0]
    assert "components.a.resume.clean[1]: an empty glob matches nothing" in out[1]


def test_the_docs_have_yaml_examples():
    assert sum(1 for where, _ in EXAMPLES if where.startswith("README.md")) >= 2
    assert sum(1 for where, _ in EXAMPLES if where.startswith(CONTRACT.name)) >= 1
    for doc in MOVED:
        assert sum(1 for where, _ in EXAMPLES if where.startswith(doc.name)) >= 1


def _with_elided_commands(text: str) -> str:
    """The contract's examples are illustrations that elide what is beside their point (its Slurm block's
    `orchestrator` shows only `colocate`): a component without a command gets a placeholder, so every
    key the example does show is still validated. README examples get no such help."""
    import yaml

    data = yaml.safe_load(text)
    comps = data.get("components") if isinstance(data, dict) else None
    if not isinstance(comps, dict) or all(isinstance(c, dict) and "command" in c for c in comps.values()):
        return text
    for c in comps.values():
        if isinstance(c, dict):
            c.setdefault("command", "true")
    return yaml.safe_dump(data, sort_keys=False)


@pytest.mark.parametrize("where, text", EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_documented_yaml_example_loads(tmp_path, where, text):
    # Read-only on the docs: each example is copied out and loaded as a user would load it. Commands
    # need not exist here (that is `check`'s business); the config itself must be valid.
    (tmp_path / ".env").write_text("")  # examples name `env_file: .env`
    p = tmp_path / "example.yaml"
    environ: dict[str, str] = {}
    if where.startswith(CONTRACT.name):
        text = _with_elided_commands(text)
        # Its Ray probe example is a Slurm run's driver: ${RLSUP_HEAD_C} comes from the elided `slurm:` block.
        environ = {v: "node1" for v in re.findall(r"\$\{(RLSUP_(?:HEAD|NODES|NNODES)_[A-Z0-9_]+)\}", text)}
    p.write_text(text)
    if re.search(r"^pods:", text, re.M):
        assert load_fleet(p, environ={})
        return
    cfg = load_config(p, environ=environ, run_dir=str(tmp_path / "run"))
    assert cfg.components
    for name in cfg.topo_order():
        assert cfg.components[name].argv()
    if "notify:" in text and " on: [" in text:
        assert cfg.notify is not None and "flag" in cfg.notify.on
