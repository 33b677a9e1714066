"""`rlsup schema`: the config's JSON Schema, read by a real JSON Schema validator (what an editor's YAML
language server does with it)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.conftest import rlsup

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = sorted((ROOT / "configs").rglob("*.yaml"))


@pytest.fixture(scope="module")
def validator():
    r = rlsup("schema", check=True)
    schema = json.loads(r.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"].endswith("2020-12/schema") and schema["title"] == "rlsup config"
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_shipped_config_is_valid_under_the_schema(validator, path):
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
    assert not errors, errors


def test_the_schema_flags_what_rlsup_check_would_refuse(validator):
    def errors(doc):
        return [e.message for e in validator.iter_errors(doc)]

    assert errors({"components": {"t": {"command": "x", "restart": {"policy": "sometimes"}}}}) == [
        "'sometimes' is not one of ['always', 'on-failure', 'never']"]
    assert any("comand" in m for m in errors({"components": {"t": {"comand": "x"}}}))  # a typo'd key
    assert not errors({"components": {"t": {"command": "x", "stop": {"timeout": "${STOP_S:-30}"}}}})
    assert errors({"components": {"t": {"command": "x"}}, "placement": {"t": ["n1"]}})  # rlsup's own field
    # the short forms the loader takes: the restart policy alone, dependencies as a list or one name
    assert not errors({"components": {"t": {"command": "x", "restart": "never", "depends_on": ["a", "b"]},
                                      "u": {"command": "y", "depends_on": "t"}}})
    assert errors({"components": {"t": {"command": "x", "restart": "sometimes"}}})
    assert errors({"components": {"t": {"command": "x", "depends_on": {"a": "alive"}}}})


def test_schema_output_file(tmp_path):
    out = tmp_path / "rlsup.schema.json"
    r = rlsup("schema", "-o", str(out), check=True)
    assert "wrote the config schema" in r.stderr and json.loads(out.read_text())["title"] == "rlsup config"
