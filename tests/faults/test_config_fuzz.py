"""Config fuzzing (issue 16, Deliver 2): any bytes as a config give a Config or a ConfigError, never
another exception; through the installed `rlsup check` script, exit 0, 1 or 2 and no traceback.

Three generators: raw bytes; YAML-flavoured text built from the tokens that broke loaders before
(anchors, aliases, tags, merge keys, `${`, NUL, deep brackets); and documents derived from the
pydantic schema itself, so values reach every model and field (valid and invalid values mixed),
then dumped (shared objects become YAML aliases) and optionally mutated at the byte level.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from rlsup.supervisor.config.loader import ConfigError, load_config
from rlsup.supervisor.config.model import Component, Config
from tests.tier import examples

# deadline=None: the machine is shared, so a slow example is not a failure. database=None: nothing is
# written into the checkout (failures print the example and the seed to reproduce it).
# Example counts below keep the whole file near 20 s on a shared 2-core machine.
FUZZ = settings(max_examples=examples(300), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
ENVIRON = {"HOME": "/root", "A": "x", "EMPTY": ""}

# ---------------------------------------------------------------------------------- strategies

NAMES = ["a", "b", "trainer", "inference", "on", "yes", "bad name", "", "0", "a" * 80]
COMPONENT_NAMES = ["a", "b", "trainer", "inference", "on"]
TRICKY = [
    "", " ", "true", "python -m http.server 0", "echo 'unbalanced", "${A}", "${A:-${B:-c}}", "${A",
    "${NOPE}", "${1}", "${A:?x}", "$$", "a\x00b", "A=B", "SIGSTOP", "SIG_IGN", "SIG_BLOCK", "kill", "15",
    "0", "-1", "on", "off", "yes", "http://127.0.0.1:1/health", "https://", "127.0.0.1:0", "host:99999",
    "(?P<step>\\d+)", "(", "[", "*", "\\", "..", ".", "outputs/ckpt", "prime-rl", "auto", "glob",
    "started", "ready", "completed", "always", "never", "on-failure", "flag", "restart", "\u2028", "é",
    "(" * 600 + ")" * 600,
]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(TRICKY), st.text(max_size=20), st.sampled_from(NAMES),
)


JUNK = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.sampled_from(NAMES), scalars,
                                                                         max_size=3))


# Plausible values by field name, so that "mostly valid" documents get past validation and reach
# the semantic checks (dependencies, regexes, presets) and what the supervisor does with a config.
PLAUSIBLE: dict[str, list[str]] = {
    "http": ["http://127.0.0.1:18080/health", "https://localhost:1/"],
    "tcp": ["127.0.0.1:18081", "[::1]:9"],
    "log": ["Server started", "(?P<step>\\d+)", "ready$"],
    "pattern": ["Step (?P<step>\\d+)/(?P<total>\\d+)", "step=(?P<step>\\d+) loss=(?P<loss>[\\d.]+)"],
    "step_pattern": ["step_(\\d+)", "ckpt-(?P<step>\\d+)"],
    "preset": ["rlsup", "prime-rl", "areal", "verl", "trl", "hf"],
    "signal": ["SIGTERM", "INT", "15", "kill", "SIGUSR1"],
    "webhook": ["http://127.0.0.1:9/hook"],
    "metric": ["loss", "reward"],
    "name": ["demo", "run-1"],
    "run_dir": ["runs/x"],
}
WORDS = ["true", "x", "outputs/ckpt", "logs", "${A}", "${A:-${B:-c}}", "$${A}", "python -m http.server 0"]


def _for_annotation(ann: Any, depth: int, wild: bool, field: str = "") -> st.SearchStrategy[Any]:
    """Values for a field of this type: of the right shape, and when ``wild`` sometimes junk."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return _model(ann, wild, depth + 1) if depth < 4 else JUNK
    if origin is typing.Literal:
        right: st.SearchStrategy[Any] = st.sampled_from(args)
    elif origin is list:
        right = st.lists(_for_annotation(args[0], depth + 1, wild, field), max_size=3)
    elif origin is dict:
        keys = NAMES + ["HF_TOKEN", "A=B", "X"] if wild else (
            COMPONENT_NAMES if field == "depends_on" else ["HF_TOKEN", "X", "on", "PYTHONPATH"])
        right = st.dictionaries(st.sampled_from(keys), _for_annotation(args[1], depth + 1, wild, field), max_size=3)
    elif args:  # a union (str | list[str], Model | None, ...)
        right = st.one_of(*(_for_annotation(a, depth, wild, field) for a in args))
    elif ann is bool:
        right = st.booleans()
    elif ann is int:
        right = st.integers(-5, 100_000) if wild else st.integers(0, 8)
    elif ann is float:
        right = st.one_of(st.floats(-1, 1e6), st.integers(0, 1000)) if wild else st.floats(0.5, 100)
    elif ann is str:
        right = st.sampled_from(TRICKY + PLAUSIBLE.get(field, [])) if wild else st.sampled_from(
            COMPONENT_NAMES if field == "restart_with" else PLAUSIBLE.get(field, WORDS))
    elif ann is type(None):
        right = st.none()
    else:
        right = JUNK
    return st.one_of(right, right, right, JUNK) if wild else right


def _plausible_number(f: Any) -> st.SearchStrategy[Any] | None:
    """For a numeric field: its default or twice it (inside the field's bounds), else 1..1000."""
    numeric = [a for a in (f.annotation, *typing.get_args(f.annotation)) if a in (int, float)]
    if not numeric:
        return None
    if isinstance(f.default, int | float) and not isinstance(f.default, bool) and f.default > 0:
        return st.sampled_from([f.default, f.default * 2])
    return st.integers(1, 1000)


def _model(model: type[BaseModel], wild: bool, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for name, f in model.model_fields.items():
        if name in ("source", "file_env"):
            continue
        number = None if wild else _plausible_number(f)
        fields[name] = number if number is not None else _for_annotation(f.annotation, depth, wild, name)
    if not wild:  # required keys are there
        required = {n: fields.pop(n) for n, f in model.model_fields.items() if f.is_required() and n in fields
                    and n not in ("command", "components", "name", "run_dir")}
        if required:
            return st.builds(lambda r, o: {**o, **r}, st.fixed_dictionaries(required),
                             st.fixed_dictionaries({}, optional=fields))
    if not wild:  # a probe has exactly one kind; give it one
        for kinds in (("http", "tcp", "log", "file"), ("http", "tcp")):
            if set(kinds) <= set(fields):
                probe = st.fixed_dictionaries({}, optional={k: v for k, v in fields.items() if k not in kinds})
                return st.builds(lambda d, k, v: {**d, k: v}, probe, st.sampled_from(kinds),
                                 st.sampled_from(PLAUSIBLE["http"][:1] + PLAUSIBLE["tcp"][:1]))
    extra = st.dictionaries(st.sampled_from(["comand", "polcy", "x-extra", "on"]), scalars,
                            max_size=1 if wild else 0)
    return st.builds(lambda d, e: {**d, **e}, st.fixed_dictionaries({}, optional=fields), extra)


# Built once: strategies derived from the models are large, rebuilding them per example costs seconds.
MODELS = {wild: (_model(Config, wild), _model(Component, wild)) for wild in (True, False)}


@st.composite
def config_documents(draw: st.DrawFn) -> bytes:
    """A config derived from the schema: components that depend on each other, shared subtrees;
    half of them wild (junk anywhere), half plausible (most pass validation and go deeper)."""
    wild = draw(st.booleans())
    config_fields, component_fields = MODELS[wild]
    top = draw(config_fields)
    comps: dict[str, Any] = {}
    names = NAMES if wild else COMPONENT_NAMES
    for name in draw(st.lists(st.sampled_from(names), min_size=1, max_size=4, unique=True)):
        comp = draw(component_fields)
        comp.setdefault("command", draw(st.sampled_from(["true", ["python", "-c", "pass"], "${A} x"])))
        if comps and draw(st.booleans()):
            comp["depends_on"] = draw(st.one_of(st.lists(st.sampled_from(list(comps) + NAMES), max_size=2),
                                                st.dictionaries(st.sampled_from(list(comps)),
                                                                st.sampled_from(["started", "ready", "x"]))))
        if comps and draw(st.integers(0, 5)) == 0:
            comp = comps[draw(st.sampled_from(list(comps)))]  # the same object twice: a YAML alias
        comps[name] = comp
    top["components"] = comps
    top.pop("env_file", None)  # a random path here would read arbitrary files; env_file has its own tests
    top.setdefault("notify", draw(st.one_of(st.none(), st.just({"on": ["flag", "fatal"]}))))
    try:
        text = yaml.safe_dump(top, default_flow_style=draw(st.sampled_from([False, True, None])),
                              allow_unicode=draw(st.booleans()), sort_keys=False)
    except yaml.YAMLError:
        text = repr(top)
    data = text.encode("utf-8", "surrogatepass")
    return draw(_mutated(data)) if wild else data


TOKENS = [b"&a ", b"*a", b"<<: *a\n", b"!!binary ", b"!!python/object:os.system ", b"!foo ", b"? ", b"- ",
          b"{", b"}", b"[", b"]", b": ", b"\n", b"\t", b"#", b"'", b'"', b"\\0", b"\x00", b"\xff\xfe", b"%YAML 1.1\n",
          b"---\n", b"...\n", b"on: ", b"yes", b"${", b"${A:-${", b"}", b"[" * 300, b"1" + b"0" * 5000,
          b"&b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n", b"!!int ", b"!!str ", b"0x", b".inf", b"~",
          b"'" + b"(" * 600 + b"'"]


@st.composite
def _mutated(draw: st.DrawFn, data: bytes) -> bytes:
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(data)))
        op = draw(st.integers(0, 2))
        if op == 0:
            data = data[:i] + draw(st.sampled_from(TOKENS)) + data[i:]
        elif op == 1:
            data = data[:i] + data[i + draw(st.integers(1, 20)):]
        else:
            data = data[:i] + draw(st.binary(min_size=1, max_size=4)) + data[i:]
    return data


@st.composite
def yamlish_text(draw: st.DrawFn) -> bytes:
    """Token soup: lines of YAML syntax with anchors, aliases, tags and variable references."""
    parts = draw(st.lists(st.one_of(st.sampled_from(TOKENS), st.sampled_from([t.encode() for t in TRICKY]),
                                    st.sampled_from([b"components:", b"  a:", b"    command: ", b"env:",
                                                     b"stop: {signal: ", b"depends_on: [", b"notify:"])),
                          max_size=40))
    return b"".join(parts)


# ---------------------------------------------------------------------------------- in-process


def _load(path: Path, data: bytes, run_dir: Path) -> None:
    path.write_bytes(data)
    try:
        cfg = load_config(path, environ=ENVIRON, run_dir=str(run_dir))
    except ConfigError as e:
        assert e.problems, "a ConfigError names at least one problem"
        for p in e.problems:  # every problem renders as FILE:LINE:COL: ...
            assert p.line >= 1 and p.col >= 1 and str(p).startswith(f"{p.file}:{p.line}:{p.col}: ")
        return
    # What the supervisor does with a valid config must not raise either.
    order = cfg.topo_order()
    assert sorted(order) == sorted(cfg.components)
    for name, comp in cfg.components.items():
        assert comp.argv()
        assert set(comp.depends_on) <= set(cfg.components)  # the run looks each dependency up by name
        cfg.logs_for(name)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(FUZZ, max_examples=examples(500))
@given(data=st.binary(max_size=3000))
def test_any_bytes_are_a_config_or_a_config_error(workdir: Path, data: bytes) -> None:
    _load(workdir / "bytes.yaml", data, workdir / "run")


@settings(FUZZ, max_examples=examples(500))
@given(data=yamlish_text())
def test_yaml_token_soup(workdir: Path, data: bytes) -> None:
    _load(workdir / "soup.yaml", data, workdir / "run")


@settings(FUZZ, max_examples=examples(500))
@given(data=config_documents())
def test_schema_shaped_documents(workdir: Path, data: bytes) -> None:
    _load(workdir / "schema.yaml", data, workdir / "run")


# ---------------------------------------------------------------------------------- the real CLI


def _rlsup() -> str:
    here = Path(sys.executable).with_name("rlsup")
    found = str(here) if here.exists() else shutil.which("rlsup")
    if not found:
        pytest.skip("the rlsup console script is not installed (pip install -e .)")
    return found


@settings(FUZZ, max_examples=10)
@given(data=st.one_of(config_documents(), yamlish_text(), st.binary(max_size=500)))
def test_rlsup_check_never_prints_a_traceback(workdir: Path, data: bytes) -> None:
    p = workdir / "cli.yaml"
    p.write_bytes(data)
    # cwd and --run-dir in the scratch folder: check probes the directories a config writes to.
    r = subprocess.run([_rlsup(), "check", str(p), "--run-dir", str(workdir / "run"), "--gpu", "none",
                        "--min-free-gb", "0"], capture_output=True, text=True, cwd=workdir, timeout=120,
                       env={"PATH": "/usr/bin:/bin", **ENVIRON})
    assert r.returncode in (0, 1, 2), (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr[-3000:]
