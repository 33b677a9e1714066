"""A config file -> a validated :class:`~.model.Config`, or every problem in it.

Every problem is reported as ``FILE:LINE:COL: key.path: message`` (all problems at once, never a
traceback): :func:`load_config` raises nothing but :class:`ConfigError`, whatever the bytes of the
file. ``${VAR}`` expands in every string value (:mod:`.interpolate`). Variables come from the
environment, then ``env_file`` (whose values are defaults the shell can override), plus
``RLSUP_RUN_DIR``, ``RLSUP_NAME`` and ``RLSUP_CONFIG_DIR``.

Limits that keep a hostile file an error rather than a crash: a config or env_file of at most
MAX_CONFIG_BYTES, YAML nested at most MAX_DEPTH levels, at most MAX_VALUES values once aliases are
expanded (an alias bomb is refused without being expanded), no recursive aliases. Mapping keys are
the strings written (YAML 1.1 would read ``on:`` as ``True``). What the OS would refuse at spawn time
is refused here: a NUL byte in any string, ``=`` in or an empty environment variable name.

The same reading and error mapping serve other files the user writes (the fleet file:
:mod:`.fleetfile`): :func:`read_document` and :func:`validated`.
"""

from __future__ import annotations

import copy
import os
import re
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from ..records.presets import PRESETS
from . import placement as slurm_placement
from .interpolate import expand
from .model import NAME_RE, NOT_WRITTEN, Component, Config, MiB, Path_, did_you_mean
from .overrides import applied
from .slurm_checks import config_problems


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    col: int
    path: Path_
    message: str

    def __str__(self) -> str:
        where = _path_str(self.path)
        at = self.file if self.line == 0 else f"{self.file}:{self.line}:{self.col}"  # line 0: a --set
        return f"{at}: {where + ': ' if where else ''}{self.message}"


class ConfigError(Exception):
    """The config cannot be used; ``problems`` lists every reason found."""

    def report(self, path: str) -> str:
        """Every problem on its own line, then a count: what the CLI prints (never a traceback)."""
        n = len(self.problems)
        return "\n".join([*(str(p) for p in self.problems), f"rlsup: {n} problem{'s' if n != 1 else ''} in {path}"])

    def __init__(self, problems: list[Problem]):
        self.problems = sorted(problems, key=lambda p: (p.line, p.col))
        super().__init__("\n".join(str(p) for p in self.problems))


def _path_str(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# ---------------------------------------------------------------------------------------------
# YAML with positions: PyYAML's composer, with rlsup's limits enforced at the event that breaks each,
# before anything is expanded (its composer recurses once per level: 5,000 nested brackets would end
# in RecursionError). Aliases stay shared nodes; the constructor below builds the data.

MAX_CONFIG_BYTES = 16 * MiB  # a config (or env_file) larger than this is a mistake, not a config
MAX_DEPTH = 100  # nesting levels, aliases expanded; the schema needs 6
MAX_VALUES = 1_000_000  # values once every alias is expanded (10,000 components x 100 fit)

_STR, _SEQ, _MAP, _MERGE, _TIMESTAMP, *_SCALAR_TAGS = (
    f"tag:yaml.org,2002:{t}" for t in ("str", "seq", "map", "merge", "timestamp", "bool", "int", "float", "null"))


@dataclass(eq=False)
class YamlDoc:
    """A document's data (keys are always the strings written) and where each value and key is."""

    file: str
    data: Any = None
    marks: dict[Path_, tuple[int, int]] = field(default_factory=dict)  # value positions
    key_marks: dict[Path_, tuple[int, int]] = field(default_factory=dict)  # key positions

    def pos(self, path: Path_, key: bool = False) -> tuple[int, int]:
        table = self.key_marks if key else self.marks
        p = tuple(path)
        while p:
            if (pos := table.get(p) or self.marks.get(p)) is not None:
                return pos
            p = p[:-1]
        return self.marks.get((), (1, 1))

    def problem(self, path: Path_, message: str, *, key: bool = False, at: Path_ | None = None) -> Problem:
        """A :class:`Problem` at ``path``, placed where the user wrote it (or where ``at`` is; its key with ``key``)."""
        return Problem(self.file, *self.pos(path if at is None else at, key), path, message)


def _mark(m: Any) -> tuple[int, int]:
    return (m.line + 1, m.column + 1) if m is not None else (1, 1)


def _children(node: yaml.Node) -> list[Any]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return node.value if isinstance(node, yaml.SequenceNode) else []


class _Composer(yaml.SafeLoader):
    """PyYAML's safe loader whose composer counts as it goes: each node gets ``size`` (values once its
    aliases are expanded) and ``height`` (collections nested in it, itself included); an alias is a
    copy of its node marked where the alias is written (``alias = True``), sharing its children."""

    def __init__(self, text: str, file: str) -> None:
        super().__init__(text)
        self.file = file
        self.depth = 0  # collections open
        self.total = 0  # values read so far, aliases counted at their expanded size

    def _refuse(self, line: int, col: int, message: str) -> None:
        raise ConfigError([Problem(self.file, line, col, (), message)])

    def compose_node(self, parent: Any, index: Any) -> Any:
        ev = self.peek_event()
        line, col = _mark(ev.start_mark)
        if isinstance(ev, yaml.AliasEvent):
            return self._alias(self.get_event(), line, col)
        nested = int(isinstance(ev, yaml.SequenceStartEvent | yaml.MappingStartEvent))
        if self.depth + nested > MAX_DEPTH:
            self._refuse(line, col, f"nested more than {MAX_DEPTH} levels deep")
        self.total += 1
        if self.total > MAX_VALUES:
            self._refuse(line, col, f"the document holds more than {MAX_VALUES:,} values")
        self.anchors.pop(ev.anchor, None)  # an anchor given again: aliases below name the new node
        self.depth += nested
        node: Any = super().compose_node(parent, index)
        self.depth -= nested
        kids = _children(node)
        node.size = 1 + sum(k.size for k in kids)
        node.height = nested + max((k.height for k in kids), default=0)
        return node

    def _alias(self, ev: yaml.AliasEvent, line: int, col: int) -> Any:
        target: Any = self.anchors.get(ev.anchor) if ev.anchor is not None else None
        if target is None:
            self._refuse(line, col, f"YAML alias *{ev.anchor} refers to no anchor &{ev.anchor} above it")
        if not hasattr(target, "size"):  # still open: the alias is inside it
            self._refuse(line, col, f"YAML alias *{ev.anchor} is inside the node it refers to (a recursive alias)")
        self.total += target.size
        if self.total > MAX_VALUES:
            self._refuse(line, col, f"the document expands to more than {MAX_VALUES:,} values through "
                                    f"its aliases (at *{ev.anchor}): an alias bomb?")
        if self.depth + target.height > MAX_DEPTH:
            self._refuse(line, col, f"nested more than {MAX_DEPTH} levels deep once its aliases are "
                                    f"expanded (at *{ev.anchor})")
        used = copy.copy(target)
        used.start_mark, used.alias = ev.start_mark, True
        return used


class _Constructor:
    """Plain Python data from the node graph, one method per node kind; every mapping key is the string
    the user wrote (YAML 1.1 would turn notify's ``on:`` into ``True``), values keep YAML's types
    (``exit_on_end: yes`` is true). Recursion and work are bounded while composing. ``record``: whether
    positions are recorded in ``doc`` (not below an alias or a merge, whose positions are where it is used)."""

    def __init__(self, doc: YamlDoc, loader: yaml.SafeLoader, problems: list[Problem]) -> None:
        self.doc, self.loader, self.problems = doc, loader, problems

    def problem(self, node: yaml.Node, path: Path_, msg: str) -> None:
        self.problems.append(Problem(self.doc.file, *_mark(node.start_mark), path, msg))

    def build(self, node: yaml.Node, path: Path_, record: bool) -> Any:
        if record:
            self.doc.marks[path] = _mark(node.start_mark)
        # Below an alias, positions fall back to the alias (pos() walks up): where it was used.
        record = record and not getattr(node, "alias", False)
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, path)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _SEQ:
                self.problem(node, path, f"unsupported YAML tag {node.tag!r} on a list")
            return [self.build(n, path + (i,), record) for i, n in enumerate(node.value)]
        assert isinstance(node, yaml.MappingNode)  # the composer makes nothing else
        return self.mapping(node, path, record)

    def scalar(self, node: yaml.ScalarNode, path: Path_) -> Any:
        tag = node.tag
        if tag == _STR or tag == _TIMESTAMP:  # no rlsup field is a date: keep what was written
            return node.value
        if tag in _SCALAR_TAGS:
            try:
                return self.loader.yaml_constructors[tag](self.loader, node)
            except Exception as e:  # PyYAML's scalar constructors raise what they meet: IndexError on
                # `!!int ""`, ValueError on an int of 5,000 digits. Any of them means: not that type.
                why = str(e).split(";")[0][:120] or type(e).__name__
                self.problem(node, path, f"cannot read {_clip(node.value)} as {tag.rsplit(':', 1)[-1]}: {why}")
                return None
        self.problem(node, path, f"unsupported YAML tag {tag!r}")
        return None

    def mapping(self, node: yaml.MappingNode, path: Path_, record: bool) -> dict[str, Any]:
        if node.tag != _MAP:
            self.problem(node, path, f"unsupported YAML tag {node.tag!r} on a mapping")
        out: dict[str, Any] = {}
        seen: dict[str, int] = {}
        merges: list[yaml.Node] = []
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                self.problem(k, path, "a key must be a plain string, not a "
                                      f"{'list' if isinstance(k, yaml.SequenceNode) else 'mapping'}")
                continue
            if k.tag == _MERGE and not getattr(k, "alias", False) and k.style is None:
                merges.append(v)
                continue
            if k.value in seen:
                self.problem(k, path, f"duplicate key {k.value!r} (first at line {seen[k.value]})")
            seen[k.value] = _mark(k.start_mark)[0]
            if record:
                self.doc.key_marks[path + (k.value,)] = _mark(k.start_mark)
            out[k.value] = self.build(v, path + (k.value,), record)
        for v in merges:
            self.merge(out, v, path, record)
        return out

    def merge(self, out: dict[str, Any], node: yaml.Node, path: Path_, record: bool) -> None:
        """`<<: *defaults` (or a list of them): keys written here win, then earlier merges."""
        for src in node.value if isinstance(node, yaml.SequenceNode) else [node]:
            if not isinstance(src, yaml.MappingNode):
                self.problem(src, path, "`<<` merges a mapping (or a list of mappings) into this one")
                continue
            for key, value in self.build(src, path + ("<<",), False).items():
                if key not in out:
                    out[key] = value
                    if record:
                        self.doc.marks.setdefault(path + (key,), _mark(src.start_mark))
                        self.doc.key_marks.setdefault(path + (key,), _mark(src.start_mark))


def load_yaml(text: str, file: str) -> YamlDoc:
    """Parse ``text`` into a :class:`YamlDoc`; any YAML problem is a :class:`ConfigError` with a position."""
    problems: list[Problem] = []
    loader: _Composer | None = None
    try:
        loader = _Composer(text, file)  # checks every character at once: may raise ReaderError
        root = loader.get_single_node()
        if root is None:
            raise ConfigError([Problem(file, 1, 1, (), "the file is empty")])
        doc = YamlDoc(file)
        doc.data = _Constructor(doc, loader, problems).build(root, (), True)
    except yaml.MarkedYAMLError as e:
        line, col = _mark(e.problem_mark or e.context_mark)
        msg = " ".join(x for x in (e.context, e.problem) if x) or str(e)
        raise ConfigError([Problem(file, line, col, (), f"YAML syntax error: {msg}")]) from None
    except yaml.reader.ReaderError as e:  # a character YAML does not allow (NUL, most control codes)
        index = max(0, min(e.position, len(text)))
        line, col = text.count("\n", 0, index) + 1, index - text.rfind("\n", 0, index)
        what = f"#x{e.character:04x}" if isinstance(e.character, int) else repr(e.character)
        raise ConfigError([Problem(file, line, col, (), f"YAML does not allow the character {what} "
                                                        "(a binary file?)")]) from None
    except yaml.YAMLError as e:
        raise ConfigError([Problem(file, 1, 1, (), f"YAML error: {e}")]) from None
    finally:
        if loader is not None:
            loader.dispose()
    if problems:
        raise ConfigError(problems)
    return doc


def _clip(v: Any, n: int = 40) -> str:
    """A string's repr, its first ``n`` characters where longer; anything else's repr, its first 80 characters."""
    if not isinstance(v, str):
        return r if len(r := repr(v)) <= 80 else r[:80] + "..."
    return repr(v) if len(v) <= n else repr(v[:n]) + f"... ({len(v):,} characters)"


def _read_text(path: Path, file: str, where: Path_ = ()) -> str:
    """The file's text; OSError as open/read raise it, ConfigError when it is over MAX_CONFIG_BYTES or not
    UTF-8 (at the first byte that is not)."""
    with open(path, "rb") as fh:  # also /dev/zero or a pipe: never read more than the cap
        data = fh.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError([Problem(file, 1, 1, where, f"the file is larger than {MAX_CONFIG_BYTES // MiB} MiB: "
                                                      "not a config")])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line, col = data.count(b"\n", 0, e.start) + 1, e.start - data.rfind(b"\n", 0, e.start)
        raise ConfigError([Problem(file, line, col, where, f"not UTF-8 text (byte 0x{data[e.start]:02x}: {e.reason}): "
                                                           "is it a binary file?")]) from None


def _interpolate_tree(data: Any, path: Path_, variables: Mapping[str, str], doc: YamlDoc,
                      problems: list[Problem]) -> Any:
    # Recursion is bounded by MAX_DEPTH, enforced when the YAML was read.
    if isinstance(data, str):
        out, missing, errors = expand(data, variables)
        problems.extend(doc.problem(path, err) for err in errors)
        problems.extend(doc.problem(path, f"environment variable {name} is not set and has no default "
                                          f"(set it, add it to env_file, or write ${{{name}:-default}})")
                        for name in missing)
        return out
    if isinstance(data, dict):
        return {k: _interpolate_tree(v, path + (str(k),), variables, doc, problems)
                for k, v in data.items()}
    if isinstance(data, list):
        return [_interpolate_tree(v, path + (i,), variables, doc, problems) for i, v in enumerate(data)]
    return data


_NUL_MSG = "contains a NUL byte, which no command, path or environment value can hold"


def _os_problems(data: Any, path: Path_, doc: YamlDoc) -> Iterator[Problem]:
    """What the OS would refuse at spawn time, found now: NUL anywhere, bad environment names.

    Without this a NUL in a command, cwd or env value passes ``check`` and fails only when
    ``up`` spawns the component (``ValueError: embedded null byte``).
    """
    if isinstance(data, str):
        if "\x00" in data:
            yield doc.problem(path, _NUL_MSG)
        return
    if isinstance(data, list):
        for i, v in enumerate(data):
            yield from _os_problems(v, path + (i,), doc)
        return
    if not isinstance(data, dict):
        return
    is_env = bool(path) and path[-1] == "env" and (len(path) == 1 or path[:1] == ("components",) and len(path) == 3)
    for k, v in data.items():
        kp = path + (str(k),)
        if isinstance(k, str) and "\x00" in k:
            yield doc.problem(path, f"key {k!r} {_NUL_MSG}", key=True, at=kp)
        elif is_env and isinstance(k, str) and ("=" in k or not k):
            yield doc.problem(path, f"environment variable name {k!r} " + (
                "contains '=', which ends a name in the environment" if k else "is empty"), key=True, at=kp)
        yield from _os_problems(v, kp, doc)


_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


def parse_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (``export`` prefix, quotes and ``#`` comments allowed).

    Raises OSError when the file cannot be read, ConfigError for anything in it that is not
    such a line (binary content, non-UTF-8 bytes, a NUL byte), with the file's line and column.
    """
    file, where = str(path), ("env_file",)
    text = _read_text(path, file, where)
    out: dict[str, str] = {}
    problems: list[Problem] = []
    for i, raw in enumerate(text.split("\n"), 1):
        raw = raw.removesuffix("\r")
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if "\x00" in raw:
            problems.append(Problem(file, i, raw.index("\x00") + 1, where, f"line {_NUL_MSG} (is it a binary file?)"))
            continue
        m = _ENV_LINE.match(raw)
        if not m:
            problems.append(Problem(file, i, 1, where, f"not a KEY=VALUE line: {_clip(raw.strip(), 80)}"))
            continue
        key, val = m.group(1), m.group(2)
        if len(val) >= 2 and val[0] == val[-1] and val[0] in "'\"":
            val = val[1:-1]
        elif " #" in val:
            val = val.split(" #", 1)[0].rstrip()
        out[key] = val
    if problems:
        raise ConfigError(problems)
    return out


# ---------------------------------------------------------------------------------------------
# Loading.


_EARLY_KEYS = ("name", "run_dir", "env_file")
_INTERNAL_KEYS = tuple(k for k in NOT_WRITTEN if k in Config.model_fields)  # those of the top level


def load_config(path: str | os.PathLike[str], *, run_dir: str | None = None,
                environ: Mapping[str, str] | None = None, overrides: Sequence[str] = ()) -> Config:
    """Read, interpolate and validate a config file, with ``overrides`` (``--set KEY.PATH=VALUE``,
    :mod:`.overrides`) applied. Raises ConfigError with every problem found."""
    p, file = Path(path), str(path)
    doc = read_document(p, file)
    env = dict(os.environ if environ is None else environ)
    data, bad, done = applied(doc.data, overrides)
    for i, o in enumerate(done, 1):  # a problem at or below an override is placed at line 0, column i
        doc.marks[o.path] = doc.key_marks[o.path] = (0, i)
    problems = [Problem(f"--set {text}", 0, 0, (), why) for text, why in bad]
    try:
        return _load(p, doc, data, run_dir, env, problems)
    except ConfigError as e:
        if not done:
            raise
        raise ConfigError([Problem(f"--set {done[x.col - 1].text}", 0, 0, x.path, x.message)
                           if x.line == 0 and x.file == file else x for x in e.problems]) from None


def _load(p: Path, doc: YamlDoc, data: dict[str, Any], run_dir: str | None, env: dict[str, str],
          problems: list[Problem]) -> Config:
    # 1. name, run_dir, env_file first: other keys may refer to RLSUP_RUN_DIR and env_file's variables.
    name = _interpolate_early(data, p, run_dir, env, doc, problems)
    file_env = _env_file_variables(data, p, doc, problems)
    variables = {**file_env, **env, "RLSUP_RUN_DIR": data["run_dir"], "RLSUP_NAME": name,
                 "RLSUP_CONFIG_DIR": str(p.parent.resolve())}
    placement, node_variables = _slurm_placement(data, env, name)
    variables.update(node_variables)

    # 2. everything else.
    for key in list(data):
        if key not in _EARLY_KEYS:
            data[key] = _interpolate_tree(data[key], (key,), variables, doc, problems)
    problems.extend(_os_problems(data, (), doc))
    data["source"] = str(p.resolve())
    data["file_env"] = file_env
    data["placement"] = placement
    # A key the user may not write: rlsup sets it itself (the first one found is reported).
    if (bad := next((k for k in _INTERNAL_KEYS if k in doc.data), None)) is not None:
        problems.append(doc.problem((bad,), f"unknown key {bad!r}", key=True))
    cfg = validated(Config, data, doc, problems)
    if cfg is not None:  # then what pydantic cannot see
        problems.extend(_semantic_problems(cfg, doc))
    if problems or cfg is None:
        raise ConfigError(problems)
    return cfg


def read_document(p: Path, file: str, what: str = "config", holds: str = "a `components:` key") -> YamlDoc:
    """A file the user writes (``what``), parsed (capped in size, UTF-8, YAML), its top level a mapping
    (with ``holds``)."""
    try:
        text = _read_text(p, file)
    except OSError as e:
        raise ConfigError([Problem(file, 1, 1, (), f"cannot read {what}: {e.strerror or e}")]) from None
    doc = load_yaml(text, file)
    if not isinstance(doc.data, dict):
        raise ConfigError([Problem(file, 1, 1, (), f"the top level must be a mapping with {holds}")])
    return doc


def _interpolate_early(data: dict[str, Any], p: Path, run_dir: str | None, env: dict[str, str], doc: YamlDoc,
                       problems: list[Problem]) -> str:
    """name, run_dir and env_file interpolated from the environment alone; the run's name (the file's
    stem by default) checked, and its run dir made absolute (``run_dir``: the caller's, which wins)."""
    for key in _EARLY_KEYS:
        if isinstance(data.get(key), str):
            data[key] = _interpolate_tree(data[key], (key,), env, doc, problems)
    name = data["name"] = data["name"] if isinstance(data.get("name"), str) else p.stem
    if not NAME_RE.match(name):
        problems.append(doc.problem(("name",), f"run name {name!r} must be letters, digits, '-', '_' or '.'"))
    rd = run_dir or (data.get("run_dir") if isinstance(data.get("run_dir"), str) else None) or f"runs/{name}"
    data["run_dir"] = os.path.abspath(rd)
    return name


def _env_file_variables(data: dict[str, Any], p: Path, doc: YamlDoc, problems: list[Problem]) -> dict[str, str]:
    """The variables of env_file (relative to the config's directory when it is there), else none."""
    if not isinstance(data.get("env_file"), str) or "\x00" in data["env_file"]:  # NUL: reported later
        return {}
    ef = Path(data["env_file"])
    try:
        ef = env_file_path(data["env_file"], p)
        return parse_env_file(ef)
    except ConfigError as e:
        problems.extend(e.problems)
    except OSError as e:  # also from exists(): a parent without search permission, a name too long
        problems.append(doc.problem(("env_file",), f"cannot read env_file {str(ef)!r}: {e.strerror or e}"))
    return {}


def env_file_path(env_file: str, config: Path) -> Path:
    """Where ``env_file`` is read from: next to the config where it is there, else as written (the current
    directory). OSError where that cannot be told."""
    p = Path(env_file)
    return config.parent / p if not p.is_absolute() and (config.parent / p).exists() else p


def _slurm_placement(data: dict[str, Any], env: dict[str, str],
                     name: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """A Slurm run: each component's nodes, and the variables that name them (${RLSUP_HEAD_C}...),
    known inside the job (placeholders on a login node). Nothing for a run without Slurm."""
    if not (isinstance(data.get("slurm"), dict) and isinstance(data.get("components"), dict)):
        return {}, {}

    alloc, _ = slurm_placement.allocation_nodes(data["slurm"], env, name)
    placement = slurm_placement.place(data["components"], alloc)
    return placement, slurm_placement.variables(placement, slurm_placement.node_addresses(env))


M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], data: Any, doc: YamlDoc, problems: list[Problem], *,
              key_in_path: bool = False) -> M | None:
    """``data`` as a ``model`` built by pydantic, or None with every reason added to ``problems`` at the
    position the user wrote it. ``key_in_path``: an unknown key's path ends with the key itself."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        problems.extend(_pydantic_problems(e, doc, data, model, key_in_path))
        return None


def _is_model(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that holds the last element of ``loc`` (for did-you-mean suggestions)."""
    model: Any = root
    parts = iter(loc[:-1])
    for part in parts:
        f = model.model_fields.get(str(part)) if _is_model(model) else None
        if f is None:
            return None
        model = _unwrap(f.annotation)
        if isinstance(model, tuple):  # dict/list container: skip its key/index
            model = model[0]
            next(parts, None)
    return model if _is_model(model) else None


def _unwrap(ann: Any) -> Any:
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin in (dict, list):
        return (_unwrap(args[-1]),)
    # Optional / Union: first model member
    return next((u for u in map(_unwrap, args) if isinstance(u, tuple) or _is_model(u)), ann)


def _data_loc(loc: tuple[Any, ...], data: Any, missing: bool) -> Path_:
    """The part of a pydantic ``loc`` that is a path in the user's data.

    pydantic puts union members and validators into ``loc`` (``'list[str]'``,
    ``'function-after[...]'``); telling them apart by their text would also drop a user's key that
    holds a bracket, so walk the data instead and keep what exists there.
    """
    out: list[str | int] = []
    for i, part in enumerate(loc):
        if isinstance(data, dict) and isinstance(part, str) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        elif missing and i == len(loc) - 1 and isinstance(part, str):
            pass  # the required key that is not there
        else:
            continue
        out.append(part)
    return tuple(out)


def _pydantic_problems(e: ValidationError, doc: YamlDoc, data: Any, root: type[BaseModel],
                       key_in_path: bool) -> list[Problem]:
    out: list[Problem] = []
    for err in e.errors():
        etype = err["type"]
        loc = _data_loc(tuple(err["loc"]), data, etype == "missing")
        if etype == "extra_forbidden" and loc:
            key = str(loc[-1])
            model = _model_at(root, loc)
            known = [k for k in (model.model_fields if model else {}) if k not in NOT_WRITTEN]
            hint = did_you_mean(key, known, "known keys")
            out.append(doc.problem(loc if key_in_path else loc[:-1], f"unknown key {key!r}{hint}", key=True, at=loc))
            continue
        msg = err["msg"].removeprefix("Value error, ")
        if etype == "missing" and loc:
            out.append(doc.problem(loc[:-1], f"missing required key {loc[-1]!r}"))
            continue
        if "input" in err and etype not in ("model_type", "value_error") and not isinstance(err["input"], dict | list):
            msg += f" (got {_clip(err['input'])})"
        out.append(doc.problem(loc, msg))
    # One problem per position and message.
    uniq: dict[tuple[int, int, str], Problem] = {}
    for p in out:
        uniq.setdefault((p.line, p.col, p.message), p)
    return list(uniq.values())


def _semantic_problems(cfg: Config, doc: YamlDoc) -> Iterator[Problem]:
    """What pydantic cannot see in one field: names, references between components, regular
    expressions, presets, GPU lists, the Slurm section, dependency cycles; each check in turn."""
    at = doc.problem
    for n, c in cfg.components.items():
        yield from _component_problems(cfg, n, c, at)

    for path, msg, key in config_problems(cfg):
        yield at(path, msg, key=key)
    yield from _cycles(cfg, doc)


def _component_problems(cfg: Config, n: str, c: Component, at: Callable[..., Problem]) -> Iterator[Problem]:
    """The checks of one component, in the order their problems are reported (``at``: the doc's ``problem``)."""
    if not NAME_RE.match(n):
        yield at(("components", n), f"component name {n!r} must be letters, digits, '-', '_' or '.'", key=True)
    for dep in c.depends_on:
        if dep not in cfg.components:
            # list(...) only for the message: a list per component made the check quadratic
            hint = did_you_mean(dep, list(cfg.components), "components are")
            yield at(("components", n, "depends_on", dep), f"unknown dependency {dep!r}{hint}", key=True)
        elif dep == n:
            yield at(("components", n, "depends_on", dep), "a component cannot depend on itself", key=True)
    for i, dep in enumerate(c.restart_with):
        if dep == n:  # it would follow its own restarts
            yield at(("components", n, "restart_with", i), "a component cannot restart with itself")
        elif dep not in cfg.components:
            hint = did_you_mean(dep, list(cfg.components))
            yield at(("components", n, "restart_with", i), f"unknown component {dep!r}{hint}")
    yield from _value_problems(n, c, at)


def _value_problems(n: str, c: Component, at: Callable[..., Problem]) -> Iterator[Problem]:
    base: Path_ = ("components", n, "progress")
    if c.progress and c.progress.preset is None and c.progress.pattern is None:
        yield at(base, "progress needs `pattern` or `preset`")
    if c.progress and c.progress.preset is not None and c.progress.preset not in PRESETS:
        hint = did_you_mean(c.progress.preset, list(PRESETS), "presets")
        yield at(base + ("preset",), f"unknown progress preset {c.progress.preset!r}{hint}")
    for i, g in enumerate(c.resume.clean if c.resume else []):
        yield from (at(("components", n, "resume", "clean", i), m) for m in _clean_glob_problems(g))
    yield from (at(path, why) for path, rx in _regexes(n, c) if (why := _regex_problem(path, rx)))
    if c.gpus is not None and len(set(c.gpus)) != len(c.gpus):
        yield at(("components", n, "gpus"), "a GPU index is listed twice")
    if c.gpus is not None and any(g < 0 for g in c.gpus):
        yield at(("components", n, "gpus"), "GPU indices are 0 or more")


def _regexes(n: str, c: Component) -> Iterator[tuple[Path_, str]]:
    """Every regular expression of component ``n``, with where it is written."""
    base: Path_ = ("components", n)
    if c.ready and c.ready.log is not None:
        yield base + ("ready", "log"), c.ready.log
    if c.progress and c.progress.pattern is not None:
        yield base + ("progress", "pattern"), c.progress.pattern
    if c.resume and c.resume.step_pattern is not None:
        yield base + ("resume", "step_pattern"), c.resume.step_pattern
    for i, w in enumerate(c.watch):
        yield base + ("watch", i, "pattern"), w.pattern


def _regex_problem(path: Path_, rx: str) -> str | None:
    try:
        compiled = re.compile(rx)
    except re.error as e:
        return f"invalid regular expression: {e.msg} at position {e.pos} in {_clip(rx, 80)}"
    except RecursionError:  # Python's regex parser recurses once per nested group
        return f"regular expression nested too deeply to compile: {_clip(rx, 80)}"
    if path[-1] == "pattern" and path[-2] == "progress" and "step" not in compiled.groupindex:
        return "progress pattern needs a named group `step`, e.g. 'Step (?P<step>\\d+)'"
    return None


def _cycles(cfg: Config, doc: YamlDoc) -> Iterator[Problem]:
    reported: set[frozenset[str]] = set()
    for path, start in cfg.walk_dependencies():
        if start is None or frozenset(cycle := path[start:] + [path[start]]) in reported:
            continue
        reported.add(frozenset(cycle))
        n = path[-1]
        yield doc.problem(("components", n, "depends_on"), f"dependency cycle: {_chain_str(cycle)}", key=True,
                          at=("components", n, "depends_on", path[start]))


def _chain_str(names: list[str]) -> str:
    if len(names) <= 12:
        return " -> ".join(names)
    return f"{' -> '.join(names[:5])} -> ... ({len(names) - 10} more) -> {' -> '.join(names[-5:])}"


def _clean_glob_problems(pattern: str) -> list[str]:
    """Why a ``resume.clean`` entry could never delete anything: the step is read from the name of what
    it matches, so its last part must be able to carry one (a wildcard or a number)."""
    last = os.path.basename(pattern.rstrip("/"))
    if not pattern.strip():
        return ["an empty glob matches nothing; give one such as 'outputs/rollouts/step_*'"]
    if not any(ch in last for ch in "*?[") and not re.search(r"\d", last):
        return [f"{pattern!r} names no step (a step is read from each matched name): match the step "
                f"entries inside it, e.g. '{pattern.rstrip('/')}/step_*'"]
    return []
