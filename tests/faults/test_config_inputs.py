"""Hostile and mistaken config inputs (issue 16, item 5): each is a config error at FILE:LINE:COL with
its key path and exit 2 from `rlsup check`, never a traceback, and never accepted with a wrong meaning.

Fixtures are in tests/fixtures/config (one file per behaviour); the large ones are generated here.
"""

from __future__ import annotations

import re
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rlsup.supervisor.config.interpolate import expand
from rlsup.supervisor.config.loader import MAX_DEPTH, ConfigError, load_config
from tests.conftest import interpolate

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "config"


def rlsup_script() -> str:
    """The installed console script (the CLI module may move; the script's name does not)."""
    here = Path(sys.executable).with_name("rlsup")
    found = str(here) if here.exists() else shutil.which("rlsup")
    if not found:
        pytest.skip("the rlsup console script is not installed (pip install -e .)")
    return found


def problems_of(path: Path, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as ei:
        load_config(path, environ={} if environ is None else environ)
    return [str(p) for p in ei.value.problems]


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ------------------------------------------------------------------------- YAML structure


def test_a_huge_slurm_allocation_places_without_listing_its_nodes(tmp_path: Path) -> None:
    """The config fuzzer's find (CI, twice: a timeout, then 23 GiB and the OOM killer): `slurm.nodes` of
    321,893,302,317,415 made the login node's placeholders a list that long. In a process capped at 1 GiB."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    f = write(tmp_path, "slurm: {nodes: 321893302317415}\ncomponents:\n  head: {nodes: 1, command: 'true'}\n"
                        "  workers: {nodes: rest, command: 'true'}\n")
    r = subprocess.run([rlsup_script(), "check", str(f), "--run-dir", str(tmp_path / "run"), "--gpu", "none",
                        "--min-free-gb", "0"], capture_output=True, text=True, preexec_fn=cap, timeout=120)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "MemoryError" not in r.stderr, r.stderr[-2000:]
    cfg = load_config(f, environ={}, run_dir=str(tmp_path / "run"))
    assert len(cfg.placement["workers"]) == 4095 and cfg.placement["head"] == ["c-node-0"]


def test_alias_bomb_is_refused_without_expanding(tmp_path: Path) -> None:
    # Run it in a process whose address space is capped at 1 GiB: expanding the bomb (as PyYAML and
    # the old loader did) dies of MemoryError there instead of eating the shared machine's memory.
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    f = FIXTURES / "alias_bomb.yaml"
    r = subprocess.run([rlsup_script(), "check", str(f), "--run-dir", str(tmp_path / "run")],
                       capture_output=True, text=True, preexec_fn=cap, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert f"{f}:8:36: the document expands to more than 1,000,000 values through its aliases" in r.stderr
    out = problems_of(f)
    assert len(out) == 1 and "an alias bomb?" in out[0]


def test_aliases_that_stay_small_still_work(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, """\
components:
  a: &base {command: ["python", "-c", "pass"], env: &env {A: "1"}, stop: {signal: INT}}
  b:
    <<: *base
    command: "true"
    env: *env
"""), environ={})
    assert cfg.components["b"].argv() == ["true"] and cfg.components["b"].env == {"A": "1"}
    assert cfg.components["b"].stop.signal == "SIGINT"


@pytest.mark.parametrize("name, where", [("recursive_alias_list.yaml", ":3:28:"),
                                         ("recursive_alias_map.yaml", ":4:10:")])
def test_recursive_alias(name: str, where: str) -> None:
    out = problems_of(FIXTURES / name)
    assert len(out) == 1
    assert where in out[0] and "is inside the node it refers to (a recursive alias)" in out[0]


@pytest.mark.parametrize("shape", ["flow_list", "flow_map", "block_list"])
def test_5000_deep_nesting(tmp_path: Path, shape: str) -> None:
    depth = 5000
    if shape == "flow_list":
        body = "x: " + "[" * depth + "]" * depth + "\n"
    elif shape == "flow_map":
        body = "x: " + "{a: " * depth + "1" + "}" * depth + "\n"
    else:  # `- - - 1` is a list in a list in a list, on one line
        body = "x:\n  " + "- " * depth + "1\n"
    out = problems_of(write(tmp_path, "components: {a: {command: 'true'}}\n" + body))
    assert len(out) == 1 and out[0].endswith(f"nested more than {MAX_DEPTH} levels deep")
    assert re.match(rf"{re.escape(str(tmp_path))}/c.yaml:\d+:\d+: ", out[0])


def test_nesting_within_the_limit_is_fine(tmp_path: Path) -> None:
    # A deep but legal value is reported by the schema, not refused by the depth limit.
    body = "[" * (MAX_DEPTH - 4) + "]" * (MAX_DEPTH - 4)
    out = problems_of(write(tmp_path, f"components: {{a: {{command: 'true', gpus: {body}}}}}\n"))
    assert all("nested more than" not in o for o in out) and any("components.a.gpus" in o for o in out)


def test_aliases_that_nest_deeper_than_the_limit_once_expanded(tmp_path: Path) -> None:
    # Each anchor is 60 levels deep and holds the one before it: 30 of them expand to 1,800 levels. Within
    # the limit where written, they reached the constructor, which recursed through them (RecursionError).
    lines = ["components: {a: {command: 'true'}}"]
    for i in range(30):
        lines.append(f"x{i}: &x{i} " + "[" * 60 + (f"*x{i - 1}" if i else "1") + "]" * 60)
    out = problems_of(write(tmp_path, "\n".join(lines) + "\n"))
    assert out == [f"{tmp_path}/c.yaml:3:69: nested more than {MAX_DEPTH} levels deep once its aliases are "
                   "expanded (at *x0)"]


def test_raw_nul_and_control_characters_in_the_file(tmp_path: Path) -> None:
    out = problems_of(FIXTURES / "raw_nul.yaml")
    assert out == [f"{FIXTURES}/raw_nul.yaml:2:21: YAML does not allow the character #x0000 (a binary file?)"]
    p = tmp_path / "c.yaml"
    p.write_bytes(b"components:\n  a: {command: \"tr\x07ue\"}\n")
    assert problems_of(p)[0].startswith(f"{p}:2:")


def test_non_utf8_config_has_a_position(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_bytes(b"components:\n  a: {command: \"caf\xe9\"}\n")
    assert problems_of(p) == [f"{p}:2:20: not UTF-8 text (byte 0xe9: invalid continuation byte): "
                              "is it a binary file?"]


def test_endless_config_and_env_file(tmp_path: Path) -> None:
    # /dev/zero never ends: reading it whole was a MemoryError.
    out = problems_of(Path("/dev/zero"))
    assert out == ["/dev/zero:1:1: the file is larger than 16 MiB: not a config"]
    out = problems_of(write(tmp_path, "env_file: /dev/zero\ncomponents: {a: {command: 'true'}}\n"))
    assert out == ["/dev/zero:1:1: env_file: the file is larger than 16 MiB: not a config"]


def test_integer_too_long_to_convert(tmp_path: Path) -> None:
    out = problems_of(write(tmp_path, "components: {a: {command: 'true', stop: {timeout: 1" + "0" * 5000 + "}}}\n"))
    assert len(out) == 1 and ":1:51: components.a.stop.timeout: cannot read '1000" in out[0]


def test_regex_nested_too_deeply(tmp_path: Path) -> None:
    rx = "(" * 600 + "x" + ")" * 600
    out = problems_of(write(tmp_path, f"components: {{a: {{command: 'true', ready: {{log: '{rx}'}}}}}}\n"))
    assert len(out) == 1 and ":1:48: components.a.ready.log: regular expression nested too deeply" in out[0]


def test_keys_with_brackets_keep_their_position(tmp_path: Path) -> None:
    # pydantic puts 'list[str]' and 'function-after[...]' into error locations; a user's key with a
    # bracket in it must not be mistaken for one of those (it was dropped, then indexed: IndexError).
    out = problems_of(write(tmp_path, "components: {a: {command: 'true'}}\n'x[0]': 1\n"))
    assert out == [f"{tmp_path}/c.yaml:2:1: unknown key 'x[0]'; known keys: name, run_dir, env, env_file, "
                   "components, notify, metrics, logs, dependency_budget, ring_bytes, slurm"]
    out = problems_of(write(tmp_path, "components: {'a[1]': {command: 'true', 'str': 1}}\n"))
    assert any(":1:40: components.a[1]: unknown key 'str'" in o for o in out), out


def test_explicit_tag_on_an_empty_value(tmp_path: Path) -> None:
    out = problems_of(write(tmp_path, "components: {a: {command: 'true', stop: {timeout: !!int }}}\n"))
    assert len(out) == 1 and "components.a.stop.timeout: cannot read '' as int" in out[0]


def test_unsupported_tags(tmp_path: Path) -> None:
    out = problems_of(write(tmp_path, "components: {a: {command: !!binary aGVsbG8=}}\n"
                                      "x: !!python/object:os.system {}\n"))
    assert any(":1:27: components.a.command: unsupported YAML tag 'tag:yaml.org,2002:binary'" in o for o in out)
    assert any(":2:4: x: unsupported YAML tag 'tag:yaml.org,2002:python/object:os.system'" in o for o in out)


def test_non_string_keys(tmp_path: Path) -> None:
    out = problems_of(write(tmp_path, "components: {a: {command: 'true', env: {[A, B]: 1}}}\n"))
    assert any(":1:41: components.a.env: a key must be a plain string, not a list" in o for o in out)


# ------------------------------------------------------------------------- YAML 1.1 keys


def test_yaml11_boolean_words_as_keys_are_the_strings_written() -> None:
    cfg = load_config(FIXTURES / "yaml11_keys.yaml", environ={})
    assert cfg.notify is not None and cfg.notify.on == ["flag", "fatal"]
    a = cfg.components["a"]
    assert a.env == {"on": "1", "off": "0", "yes": "y", "no": "n", "null": "z", "1": "one", "0x10": "hex"}
    assert a.exit_on_end is True  # values keep YAML's types: `yes` is still true


# ------------------------------------------------------------------------- dependency chains


@pytest.mark.parametrize("order", ["dependencies_first", "dependents_first"])
def test_2000_long_dependency_chain(tmp_path: Path, order: str) -> None:
    n = 2000
    if order == "dependencies_first":
        lines = [f"  c{i}: {{command: 'true'" + (f", depends_on: [c{i - 1}]" if i else "") + "}" for i in range(n)]
    else:  # each component needs the next one: a depth-first walk goes 2,000 deep at once
        lines = [f"  c{i}: {{command: 'true'" + (f", depends_on: [c{i + 1}]" if i < n - 1 else "") + "}"
                 for i in range(n)]
    cfg = load_config(write(tmp_path, "components:\n" + "\n".join(lines) + "\n"), environ={})
    order_ = cfg.topo_order()
    want = [f"c{i}" for i in range(n)]
    assert order_ == (want if order == "dependencies_first" else want[::-1])


def test_2000_long_dependency_cycle(tmp_path: Path) -> None:
    n = 2000
    lines = [f"  c{i}: {{command: 'true', depends_on: [c{(i + 1) % n}]}}" for i in range(n)]
    out = problems_of(write(tmp_path, "components:\n" + "\n".join(lines) + "\n"))
    assert out == [f"{tmp_path}/c.yaml:2001:28: components.c1999.depends_on: dependency cycle: "
                   "c0 -> c1 -> c2 -> c3 -> c4 -> ... (1991 more) -> c1996 -> c1997 -> c1998 -> c1999 -> c0"]


# ------------------------------------------------------------------------- env_file


def test_binary_env_file() -> None:
    out = problems_of(FIXTURES / "binary_env_file.yaml")
    assert out == [f"{FIXTURES}/binary.env:2:6: env_file: not UTF-8 text (byte 0xff: invalid start byte): "
                   "is it a binary file?"]


def test_env_file_with_nul() -> None:
    out = problems_of(FIXTURES / "nul_env_file.yaml")
    assert out == [f"{FIXTURES}/nul.env:2:6: env_file: line contains a NUL byte, which no command, path or "
                   "environment value can hold (is it a binary file?)"]


def test_env_file_problems_name_the_env_file(tmp_path: Path) -> None:
    (tmp_path / "x.env").write_text("OK=1\nnot a line\n")
    out = problems_of(write(tmp_path, "env_file: x.env\ncomponents: {a: {command: 'true'}}\n"))
    assert out == [f"{tmp_path}/x.env:2:1: env_file: not a KEY=VALUE line: 'not a line'"]


# ------------------------------------------------------------------------- what the OS would refuse


@pytest.mark.parametrize("name, want", [
    ("nul_in_command.yaml", ":3:14: components.a.command: contains a NUL byte"),
    ("nul_in_argv.yaml", ":3:23: components.a.command[1]: contains a NUL byte"),
    ("nul_in_env_value.yaml", ":5:23: components.a.env.TOKEN_PATH: contains a NUL byte"),
    ("nul_in_cwd.yaml", ":4:10: components.a.cwd: contains a NUL byte"),
    ("nul_in_env_key.yaml", ":4:11: components.a.env: key 'BAD\\x00KEY' contains a NUL byte"),
])
def test_nul_bytes(name: str, want: str) -> None:
    out = problems_of(FIXTURES / name)
    assert len(out) == 1 and out[0].startswith(f"{FIXTURES}/{name}{want}"), out


def test_bad_environment_names() -> None:
    out = problems_of(FIXTURES / "equals_in_env_key.yaml")
    f = f"{FIXTURES}/equals_in_env_key.yaml"
    assert out == [
        f"{f}:1:7: env: environment variable name 'A=B' contains '=', which ends a name in the environment",
        f"{f}:5:11: components.a.env: environment variable name '' is empty",
        f"{f}:5:29: components.a.env: environment variable name 'C=D' contains '=', which ends a name in the "
        "environment",
    ]


def test_accepted_env_names_reach_a_real_spawn(tmp_path: Path) -> None:
    # What the check lets through, the OS takes: dots and dashes are legal in names.
    cfg = load_config(write(tmp_path, "components: {a: {command: 'true', env: {a.b-c: '1', _X: 'é'}}}\n"),
                      environ={})
    env = cfg.components["a"].env
    r = subprocess.run(["env"], env=env, capture_output=True, text=True, check=True)
    assert "a.b-c=1" in r.stdout.splitlines()


# ------------------------------------------------------------------------- stop signals


def test_stop_signal_constants_that_are_not_signals() -> None:
    out = problems_of(FIXTURES / "stop_signals.yaml")
    by_component = {re.search(r"components\.(\w+)\.stop\.signal", o).group(1): o for o in out}  # type: ignore[union-attr]
    assert set(by_component) == {"block", "ign", "dfl", "setmask", "sigstop", "zero", "huge", "boolean"}
    for name in ("block", "ign", "dfl", "setmask"):
        assert "unknown signal 'SIG_" in by_component[name]
    assert "SIGSTOP suspends a process instead of ending it" in by_component["sigstop"]
    assert "0 is not a signal number" in by_component["zero"]
    assert "4096 is not a signal number" in by_component["huge"]
    assert "got True" in by_component["boolean"]


@pytest.mark.parametrize("given, want", [
    ("SIGTERM", "SIGTERM"), ("term", "SIGTERM"), ("sigint", "SIGINT"), ("15", "SIGTERM"), (2, "SIGINT"),
    ("KILL", "SIGKILL"), (9, "SIGKILL"), ("usr1", "SIGUSR1"), ("SIGHUP", "SIGHUP"), ("QUIT", "SIGQUIT"),
])
def test_stop_signal_names_and_numbers(tmp_path: Path, given: object, want: str) -> None:
    cfg = load_config(write(tmp_path, f"components: {{a: {{command: 'true', stop: {{signal: {given}}}}}}}\n"),
                      environ={})
    name = cfg.components["a"].stop.signal
    assert name == want
    # component.py sends getattr(signal, name): it must be that very signal.
    assert getattr(signal, name) == signal.Signals[want]


# ------------------------------------------------------------------------- interpolation


def test_nested_defaults_expand() -> None:
    cfg = load_config(FIXTURES / "nested_defaults.yaml", environ={"HOME": "/home/u"})
    a = cfg.components["a"]
    assert a.argv() == ["echo", "c", "xy", "${RLSUP_TEST_A}"]
    assert a.env == {"DEEP": "deepest", "UNUSED_DEFAULT": "/home/u"}
    cfg = load_config(FIXTURES / "nested_defaults.yaml", environ={"RLSUP_TEST_B": "b", "HOME": "/h"})
    assert cfg.components["a"].argv() == ["echo", "b", "xby", "${RLSUP_TEST_A}"]
    cfg = load_config(FIXTURES / "nested_defaults.yaml", environ={"RLSUP_TEST_A": "a", "HOME": "/h"})
    assert cfg.components["a"].argv()[:3] == ["echo", "a", "a"]


def test_unterminated_and_unsupported_references() -> None:
    out = problems_of(FIXTURES / "unterminated_reference.yaml", environ={"HOME": "/h"})
    f = f"{FIXTURES}/unterminated_reference.yaml"
    assert out == [
        f"{f}:3:14: components.a.command: unterminated variable reference '${{HOME': no closing '}}' "
        "(write $$ for a literal $)",
        f"{f}:5:14: components.b.command: unterminated variable reference '${{A:-${{B:-c}}': no closing '}}' "
        "(write $$ for a literal $)",
        f"{f}:7:14: components.c.command: bad variable reference '${{1abc}}': use ${{VAR}}, ${{VAR:-default}} or "
        "${VAR-default} (write $$ for a literal $)",
        f"{f}:9:14: components.d.command: bad variable reference '${{A:?needed}}': use ${{VAR}}, "
        "${VAR:-default} or ${VAR-default} (write $$ for a literal $)",
    ]


def test_expand_function() -> None:
    env = {"A": "", "B": "bee"}
    assert expand("${A:-${B:-c}}", env) == ("bee", [], [])
    assert expand("${A-${B}}", env) == ("", [], [])  # A is set (empty): `-` keeps it
    assert expand("${X:-${Y:-${Z}}}", {}) == ("", ["Z"], [])
    assert expand("${X:-a$$b}", {}) == ("a$b", [], [])
    assert expand("${X:-{x}y}", {}) == ("{xy}", [], [])  # as bash: a plain brace does not nest
    assert expand("cost $5 and $HOME", {}) == ("cost $5 and $HOME", [], [])  # a lone $ is text
    assert expand("${B}${", env)[2] and expand("${", env)[2]
    deep = "${A:-" * 30 + "x" + "}" * 30
    assert "nested more than 20 deep" in expand(deep, env)[2][0]
    # interpolate() keeps its old shape: malformed references stay as written, no exception.
    assert interpolate("echo ${A", {}) == ("echo ${A", [])
    assert interpolate("a ${X:-${Y:-c}} b", {}) == ("a c b", [])


# ------------------------------------------------------------------------- through the CLI


BAD_FIXTURES = sorted(p.name for p in FIXTURES.glob("*.yaml")
                      if p.name not in ("nested_defaults.yaml", "yaml11_keys.yaml", "alias_bomb.yaml"))


def test_every_bad_fixture_is_exit_2_with_positions_through_the_cli(tmp_path: Path) -> None:
    exe = rlsup_script()
    assert len(BAD_FIXTURES) >= 12
    for name in BAD_FIXTURES:
        r = subprocess.run([exe, "check", str(FIXTURES / name), "--run-dir", str(tmp_path / "run")],
                           capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
        assert r.returncode == 2, (name, r.stderr[-2000:])
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr, name
        lines = r.stderr.strip().splitlines()
        assert lines[-1].startswith("rlsup: ") and " in " in lines[-1], name
        for line in lines[:-1]:
            assert re.match(r"^\S+:\d+:\d+: ", line), (name, line)
    for name in ("nested_defaults.yaml", "yaml11_keys.yaml"):
        r = subprocess.run([exe, "check", str(FIXTURES / name), "--run-dir", str(tmp_path / "run")],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr, (name, r.stderr[-2000:])
