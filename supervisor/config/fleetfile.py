"""The fleet file (``rlsup fleet FLEET.yaml``): the pods to watch, as pydantic models, read and checked as a
run's config is (:mod:`.loader`: capped, YAML with positions, every problem as ``FILE:LINE:COL: key.path:
message``). ``${VAR}`` expands in string values."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationInfo, field_validator, model_validator

from .interpolate import expand
from .loader import ConfigError, Problem, YamlDoc, read_document, validated
from .model import Path_, _Model


class Pod(_Model):
    """One pod. ``host`` may be an ``~/.ssh/config`` alias; ``label`` defaults to the host (empty here)."""

    host: str
    user: str | None = None
    port: int | None = None
    run_dir: str | None = None
    label: str = ""

    @model_validator(mode="before")
    @classmethod
    def _shape(cls, v: Any) -> Any:
        if isinstance(v, str):  # a bare host name is a pod with defaults
            v = {"host": v}
        if not isinstance(v, dict):
            raise ValueError("each pod must be a mapping with at least `host:` (or a host name)")
        return {k: x for k, x in v.items() if x is not None or k == "host"}  # null: the default

    @field_validator("host", "user", "run_dir", "label", mode="before")
    @classmethod
    def _text(cls, v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, int | float) and not isinstance(v, bool) and info.field_name != "run_dir":
            v = str(v)
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"{info.field_name} must be a non-empty string (got {v!r})")
        return v

    @field_validator("host")
    @classmethod
    def _alone(cls, v: str) -> str:
        if "@" in v or (v.count(":") == 1 and not v.startswith("[")):
            raise ValueError(f"write the host alone ({v!r}); give `user:` and `port:` as their own keys")
        return v

    @field_validator("port", mode="before")
    @classmethod
    def _port(cls, v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 65536:
            raise ValueError(f"port must be a number from 1 to 65535 (got {v!r})")
        return v


class FleetFile(_Model):
    pods: list[Pod]

    @field_validator("pods", mode="before")
    @classmethod
    def _some(cls, v: Any) -> Any:
        if not isinstance(v, list) or not v:
            raise ValueError("`pods` must be a non-empty list of {host, user, port, run_dir, label}")
        return v


def read_pods(path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None) -> list[Pod]:
    """The pods of a fleet file; raises :class:`~.loader.ConfigError` listing every problem."""
    doc = read_document(Path(path), str(path), "fleet file", "a `pods:` list")
    env = dict(os.environ if environ is None else environ)
    problems: list[Problem] = []
    data = dict(doc.data)
    if isinstance(data.get("pods"), list):
        data["pods"] = [_expanded(raw, ("pods", i) if isinstance(raw, dict) else ("pods", i, "host"), env, doc,
                                  problems) for i, raw in enumerate(data["pods"])]
        problems.extend(_duplicate_labels(data["pods"], doc))
    fleet = validated(FleetFile, data, doc, problems, key_in_path=True)
    if problems or fleet is None:
        raise ConfigError(problems)
    return fleet.pods


def _expanded(raw: Any, here: Path_, env: Mapping[str, str], doc: YamlDoc, problems: list[Problem]) -> Any:
    """One pod with ``${VAR}`` expanded in its strings; a string naming an unset variable stays as written."""
    if isinstance(raw, dict):
        return {k: _expanded(v, (*here, str(k)), env, doc, problems) for k, v in raw.items()}
    if not isinstance(raw, str):
        return raw
    text, missing, _ = expand(raw, env)
    if not missing:
        return text
    problems.append(doc.problem(here, f"undefined variable{'s' if len(missing) > 1 else ''} "
                                                        f"{', '.join(missing)} (set it, or write ${{VAR:-default}})"))
    return raw


def _duplicate_labels(pods: list[Any], doc: YamlDoc) -> Iterator[Problem]:
    """Two pods of one label (a pod's label defaults to its host): the fleet could not tell them apart."""
    first: dict[str, int] = {}
    for i, raw in enumerate(pods):
        pod = {"host": raw} if isinstance(raw, str) else raw if isinstance(raw, dict) else {}
        named = pod.get("label") is not None
        label = pod.get("label") if named else pod.get("host")
        if not isinstance(label, str | int | float) or isinstance(label, bool) or not str(label).strip():
            continue
        if str(label) in first:
            where: Path_ = ("pods", i, "label" if named else "host")
            yield doc.problem(where, f"two pods named {str(label)!r} (first is pods[{first[str(label)]}]); give each "
                                     "a distinct `label:`")
        first.setdefault(str(label), i)
