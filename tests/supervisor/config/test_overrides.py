"""``--set KEY.PATH=VALUE`` (config/overrides.py, through load_config): the value lands where the path says,
read as YAML and interpolated like the file's; every problem in an override is reported at it."""

from __future__ import annotations

import pytest

from rlsup.supervisor.config.loader import ConfigError, load_config
from rlsup.supervisor.config.overrides import merged, parse
from tests.conftest import write_config

CONFIG = """
name: sets
env: {SHARED: top}
components:
  trainer: &t
    command: python train.py
    env: {LR: "1e-4"}
    restart: {policy: on-failure, max_restarts: 3}
    watch: [{path: /data/a, pattern: 'step_(?P<step>\\d+)'}]
  copy: *t
"""


def _load(tmp_path, *overrides):
    return load_config(write_config(tmp_path, CONFIG), run_dir=str(tmp_path / "run"), overrides=overrides,
                       environ={"HOME": "/root", "WHO": "me"})


def _problems(tmp_path, *overrides) -> list[str]:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, *overrides)
    return [str(p) for p in e.value.problems]


def test_values_land_at_their_path_read_as_yaml_and_interpolated(tmp_path):
    cfg = _load(tmp_path, "components.trainer.env.LR=1e-5", "components.trainer.restart.max_restarts=7",
                "components.trainer.env.OUT=${RLSUP_RUN_DIR}/${WHO}", "components.trainer.watch.0.path=/data/b",
                "components.trainer.command=[python, -u, train.py]")
    t = cfg.components["trainer"]
    assert t.env["LR"] == "1e-5" and t.restart.max_restarts == 7
    assert t.env["OUT"] == f"{tmp_path / 'run'}/me"
    assert t.watch[0].path == "/data/b"
    assert t.argv() == ["python", "-u", "train.py"]


def test_an_alias_keeps_the_files_value(tmp_path):
    cfg = _load(tmp_path, "components.trainer.env.LR=1e-5")
    assert cfg.components["copy"].env["LR"] == "1e-4"


def test_a_later_override_wins_and_missing_mappings_are_created(tmp_path):
    cfg = _load(tmp_path, "components.trainer.env.LR=1", "components.trainer.env.LR=2",
                "components.trainer.stop.timeout=30")
    assert cfg.components["trainer"].env["LR"] == "2" and cfg.components["trainer"].stop.timeout == 30


@pytest.mark.parametrize("override, says", [
    ("components.trainer.restart.max_restarts=x", "--set components.trainer.restart.max_restarts=x: "
     "components.trainer.restart.max_restarts: Input should be a valid integer"),
    ("components.trainer.restart.max_restrts=3", "--set components.trainer.restart.max_restrts=3: "
     "components.trainer.restart: unknown key 'max_restrts'; did you mean 'max_restarts'?"),
    ("components.trainer.env.X=${NOPE}", "--set components.trainer.env.X=${NOPE}: components.trainer.env.X: "),
    ("name=other", "--set name=other: name says which run dir the run is and cannot be overridden; use --run-dir"),
    ("components.trainer.env.LR", "--set components.trainer.env.LR: expected KEY.PATH=VALUE"),
    ("components..LR=1", "--set components..LR=1: 'components..LR' is not a key path"),
    ("components.trainer.env.A=[1", "--set components.trainer.env.A=[1: the value is not valid YAML at column 3"),
    ("components.trainer.command.0=x", "--set components.trainer.command.0=x: components.trainer.command is str"),
    ("components.trainer.watch.5.path=/x", "--set components.trainer.watch.5.path=/x: components.trainer.watch.5: "
     "the list has 1 item (from 0)"),
])
def test_a_problem_in_an_override_is_reported_at_it(tmp_path, override, says):
    problems = _problems(tmp_path, override)
    assert any(p.startswith(says) for p in problems), problems


def test_problems_of_the_file_stay_at_the_file(tmp_path):
    p = write_config(tmp_path, CONFIG.replace("max_restarts: 3", "max_restarts: x"))
    with pytest.raises(ConfigError) as e:
        load_config(p, run_dir=str(tmp_path / "run"), overrides=["components.trainer.env.LR=1"])
    shown = [str(x) for x in e.value.problems]  # the trainer's, and the copy's (an alias of it)
    assert shown[0].startswith(f"{p}:8:49: components.trainer.restart.max_restarts: Input should be a valid integer")
    assert all(x.startswith(f"{p}:") for x in shown), shown


def test_merged_keeps_the_stored_ones_a_new_one_does_not_replace():
    assert merged(["a.b=1", "c.d=2"], ["c.d=3", "e=4"]) == ["a.b=1", "c.d=3", "e=4"]
    assert merged([], []) == []


def test_parse_reads_the_value_as_yaml():
    assert parse("a.b=3")[0].value == 3  # type: ignore[union-attr]
    assert parse("a.b=")[0].value == ""  # type: ignore[union-attr]
    assert parse("a.0.b=null")[0].path == ("a", 0, "b")  # type: ignore[union-attr]
    assert parse("a.b=x=y")[0].value == "x=y"  # type: ignore[union-attr]
