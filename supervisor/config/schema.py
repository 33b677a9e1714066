"""The config's JSON Schema (``rlsup schema``), generated from the pydantic models, for editors.

The YAML a user writes is not quite what the models validate: ``name`` and ``run_dir`` have defaults the
loader fills in, ``gpus: 8`` is a count (with ``slurm:``), any value may be a ``${VAR}`` the loader
interpolates, and some fields are rlsup's own. The schema says what the file may hold; ``rlsup check`` stays
the judge (it sees the interpolated values, the machine and the cluster).
"""

from __future__ import annotations

from typing import Any

from .model import NOT_WRITTEN, Config

DIALECT = "https://json-schema.org/draft/2020-12/schema"
_SCALARS = {"integer", "number", "boolean"}
_INTERPOLATED = {"type": "string", "pattern": r"\$\{"}


def config_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of an rlsup config file."""
    s = Config.model_json_schema()
    s["required"] = [r for r in s.get("required", []) if r not in ("name", "run_dir")]
    s = _interpolable(s)
    for model in [s, *s.get("$defs", {}).values()]:
        for key in NOT_WRITTEN:
            model.get("properties", {}).pop(key, None)
    props = s["$defs"]["Component"]["properties"]
    gpus = props.get("gpus")
    if gpus is not None:  # a list of indices on one machine, or a count per node with `slurm:`
        gpus["anyOf"] = [{"type": "integer", "minimum": 0}, _INTERPOLATED, *gpus.get("anyOf", [])]
    # The short forms: `restart: never` (the policy alone), `depends_on: [a, b]` or `depends_on: a` ("started"),
    # as if/then/else so that an editor names what is wrong in the form written, not "none of the given schemas".
    policy = s["$defs"]["RestartCfg"]["properties"]["policy"]
    props["restart"] = {"if": {"type": "string"}, "then": {"enum": policy["enum"]},
                        "else": {"$ref": props["restart"].pop("$ref")}, **props["restart"]}
    deps = {k: props["depends_on"].pop(k) for k in ("type", "additionalProperties")}
    props["depends_on"].update({"if": {"type": ["array", "string"]}, "then": {"items": {"type": "string"}},
                                "else": deps})
    return {"$schema": DIALECT, "title": "rlsup config", **{k: v for k, v in s.items() if k != "title"},
            "description": "An rlsup run: its components and how to supervise them (docs/config.md)."}


def _interpolable(node: Any) -> Any:
    """Every number or boolean may also be written as a ``${VAR}`` the loader interpolates."""
    if isinstance(node, list):
        return [_interpolable(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _interpolable(v) for k, v in node.items()}
    if out.get("type") in _SCALARS:
        rest = {k: out.pop(k) for k in list(out) if k in ("default", "title", "description")}
        return {"anyOf": [out, _INTERPOLATED], **rest}
    return out
