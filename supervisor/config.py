"""YAML run configuration -> validated model.

Every problem is reported as ``FILE:LINE:COL: key.path: message`` (all problems at once, never a
traceback). ``${VAR}`` and ``${VAR:-default}`` expand in every string value; ``$$`` is a literal ``$``.
Variables come from the environment, then ``env_file`` (whose values are defaults the shell
can override), plus ``RLSUP_RUN_DIR``, ``RLSUP_NAME`` and ``RLSUP_CONFIG_DIR``.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import signal as signal_mod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

Path_ = tuple[str | int, ...]
Condition = Literal["started", "ready", "completed"]
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
MiB = 1024 * 1024


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    col: int
    path: Path_
    message: str

    def __str__(self) -> str:
        where = _path_str(self.path)
        return f"{self.file}:{self.line}:{self.col}: {where + ': ' if where else ''}{self.message}"


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
# The model. extra="forbid" everywhere: a typo must be an error, not a silently ignored key.


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Backoff(_Model):
    initial: float = Field(2.0, gt=0)
    factor: float = Field(2.0, ge=1)
    max: float = Field(300.0, gt=0)
    jitter: float = Field(0.1, ge=0, le=1)


class RestartCfg(_Model):
    policy: Literal["always", "on-failure", "never"] = "on-failure"
    backoff: Backoff = Backoff()
    reset_after: float = Field(600.0, ge=0)
    max_restarts: int = Field(10, ge=0)
    window: float = Field(3600.0, gt=0)
    success_exit_codes: list[int] = [0]


class StopCfg(_Model):
    signal: str = "SIGTERM"
    timeout: float = Field(30.0, ge=0)

    @field_validator("signal")
    @classmethod
    def _known_signal(cls, v: str) -> str:
        name = v.upper() if v.upper().startswith("SIG") else "SIG" + v.upper()
        if not hasattr(signal_mod, name) or name in ("SIG_DFL", "SIG_IGN"):
            raise ValueError(f"unknown signal {v!r} (use a name such as SIGTERM or SIGINT)")
        return name


class _ProbeTarget(_Model):
    http: str | None = None
    tcp: str | None = None

    def kind(self) -> str:
        for k in ("http", "tcp", "log", "file"):
            if getattr(self, k, None) is not None:
                return k
        raise AssertionError("validated probe without a kind")

    def target(self) -> str:
        return str(getattr(self, self.kind()))


def _one_kind(model: _ProbeTarget, kinds: tuple[str, ...]) -> _ProbeTarget:
    given = [k for k in kinds if getattr(model, k, None) is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of {', '.join(kinds)} (got {', '.join(given) or 'none'})")
    if model.tcp is not None and not _parse_hostport(model.tcp):
        raise ValueError(f"tcp probe must be host:port, got {model.tcp!r}")
    if model.http is not None and not model.http.startswith(("http://", "https://")):
        raise ValueError(f"http probe must be an http:// URL, got {model.http!r}")
    return model


class ReadyProbe(_ProbeTarget):
    log: str | None = None
    file: str | None = None
    timeout: float = Field(900.0, gt=0)
    interval: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _check(self) -> ReadyProbe:
        _one_kind(self, ("http", "tcp", "log", "file"))
        return self


class AliveProbe(_ProbeTarget):
    interval: float = Field(10.0, gt=0)
    failures: int = Field(3, ge=1)
    timeout: float = Field(5.0, gt=0)

    @model_validator(mode="after")
    def _check(self) -> AliveProbe:
        _one_kind(self, ("http", "tcp"))
        return self


class ProgressCfg(_Model):
    preset: str | None = None
    pattern: str | None = None
    total: int | None = Field(None, ge=1)
    stall_after: float | None = Field(None, gt=0)
    on_stall: Literal["flag", "restart"] = "flag"  # restart: a stalled component is restarted (resumed)
    metric: str | None = None  # the metric the UI plots (default: reward, else loss, else the first)


class ResumeCfg(_Model):
    checkpoints: str
    layout: Literal["auto", "areal", "prime-rl", "verl", "hf", "glob"] = "auto"
    step_pattern: str | None = None
    args: list[str] = []
    clean: list[str] = []


class WatchCfg(_Model):
    path: str
    pattern: str = r"(?P<step>\d+)"


class LogsCfg(_Model):
    max_bytes: int = Field(100 * MiB, ge=4096)
    backups: int = Field(5, ge=0)
    ring_lines: int = Field(10_000, ge=100)
    line_cap: int = Field(8192, ge=80)


def _scalar_to_str(v: Any) -> Any:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int | float):
        return str(v)
    return v


class Component(_Model):
    shell: bool = False  # before `command`: its validator reads it
    command: str | list[str]
    cwd: str | None = None
    env: dict[str, str] = {}
    gpus: list[int] | None = None
    ready: ReadyProbe | None = None
    alive: AliveProbe | None = None
    restart: RestartCfg = RestartCfg()
    stop: StopCfg = StopCfg()
    depends_on: dict[str, Condition] = {}
    restart_with: list[str] = []
    progress: ProgressCfg | None = None
    resume: ResumeCfg | None = None
    exit_on_end: bool = False
    smoke: str | list[str] | None = None
    watch: list[WatchCfg] = []
    logs: LogsCfg | None = None

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, v: Any) -> Any:
        return {k: _scalar_to_str(x) for k, x in v.items()} if isinstance(v, dict) else v

    @field_validator("depends_on", mode="before")
    @classmethod
    def _deps_list(cls, v: Any) -> Any:
        # `depends_on: [a, b]` means "started" for each.
        if isinstance(v, list):
            return {str(name): "started" for name in v}
        if isinstance(v, str):
            return {v: "started"}
        return v

    @field_validator("command")
    @classmethod
    def _non_empty(cls, v: str | list[str], info: ValidationInfo) -> str | list[str]:
        if (isinstance(v, str) and not v.strip()) or (isinstance(v, list) and not v):
            raise ValueError("command is empty")
        if isinstance(v, str) and not info.data.get("shell"):
            try:
                shlex.split(v)
            except ValueError as e:
                raise ValueError(f"cannot split command like a shell would: {e}") from None
        return v

    def argv(self) -> list[str]:
        """The argv to exec: shlex-split (no shell) unless ``shell: true``."""
        if self.shell:
            cmd = self.command if isinstance(self.command, str) else shlex.join(self.command)
            return ["/bin/sh", "-c", cmd]
        return shlex.split(self.command) if isinstance(self.command, str) else list(self.command)


class NotifyCfg(_Model):
    webhook: str | None = None
    command: str | list[str] | None = None
    on: list[Literal["flag", "fatal", "completed", "exited", "restart_scheduled", "run_ended"]] = [
        "flag",
        "fatal",
        "completed",
    ]


class Config(_Model):
    name: str
    run_dir: str
    env: dict[str, str] = {}
    env_file: str | None = None
    components: dict[str, Component]
    notify: NotifyCfg | None = None
    logs: LogsCfg = LogsCfg()
    # A dependency down this long while its consumers fail: stop the consumers (seconds).
    dependency_budget: float = Field(600.0, gt=0)
    # Not from YAML: where it came from, and the variables env_file provided.
    source: str = ""
    file_env: dict[str, str] = {}

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, v: Any) -> Any:
        return {k: _scalar_to_str(x) for k, x in v.items()} if isinstance(v, dict) else v

    @field_validator("components")
    @classmethod
    def _some(cls, v: dict[str, Component]) -> dict[str, Component]:
        if not v:
            raise ValueError("no components: add at least one under `components:`")
        return v

    def logs_for(self, name: str) -> LogsCfg:
        return self.components[name].logs or self.logs

    def topo_order(self) -> list[str]:
        """Components in dependency order (dependencies first; ties in file order)."""
        done: list[str] = []
        seen: set[str] = set()

        def visit(n: str) -> None:
            if n in seen:
                return
            seen.add(n)
            for d in self.components[n].depends_on:
                visit(d)
            done.append(n)

        for n in self.components:
            visit(n)
        return done

    def dependents(self, name: str) -> list[str]:
        return [n for n, c in self.components.items() if name in c.depends_on]


# ---------------------------------------------------------------------------------------------
# YAML with positions.


@dataclass
class _Doc:
    data: Any
    marks: dict[Path_, tuple[int, int]] = field(default_factory=dict)  # value positions
    key_marks: dict[Path_, tuple[int, int]] = field(default_factory=dict)  # key positions

    def pos(self, path: Path_, key: bool = False) -> tuple[int, int]:
        table = self.key_marks if key else self.marks
        p = tuple(path)
        while p:
            if p in table:
                return table[p]
            if p in self.marks:
                return self.marks[p]
            p = p[:-1]
        return self.marks.get((), (1, 1))


def _load_yaml(text: str, file: str) -> _Doc:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise ConfigError([Problem(file, 1, 1, (), "the file is empty")])
        doc = _Doc(None)
        problems: list[Problem] = []
        _walk(node, (), doc, problems, file)
        doc.data = loader.construct_document(node)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        msg = " ".join(x for x in (e.context, e.problem) if x) or str(e)
        raise ConfigError([Problem(file, line, col, (), f"YAML syntax error: {msg}")]) from None
    finally:
        loader.dispose()
    if problems:
        raise ConfigError(problems)
    return doc


def _walk(node: yaml.Node, path: Path_, doc: _Doc, problems: list[Problem], file: str) -> None:
    doc.marks[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for k, v in node.value:
            key = str(k.value)
            if key in seen:
                problems.append(
                    Problem(file, k.start_mark.line + 1, k.start_mark.column + 1, path,
                            f"duplicate key {key!r} (first at line {seen[key]})")
                )
            seen[key] = k.start_mark.line + 1
            doc.key_marks[path + (key,)] = (k.start_mark.line + 1, k.start_mark.column + 1)
            _walk(v, path + (key,), doc, problems, file)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _walk(v, path + (i,), doc, problems, file)


# ---------------------------------------------------------------------------------------------
# Interpolation.

_VAR_RE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def interpolate(value: str, variables: Mapping[str, str]) -> tuple[str, list[str]]:
    """Expand ``${VAR}``/``${VAR:-default}``/``$$``; return (text, names that were missing)."""
    missing: list[str] = []

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name, default = m.group(1), m.group(2)
        v = variables.get(name)
        if v is None or (v == "" and ":-" in m.group(0)):
            if default is not None:
                return default
            missing.append(name)
            return ""
        return v

    return _VAR_RE.sub(sub, value), missing


def _interpolate_tree(data: Any, path: Path_, variables: Mapping[str, str], doc: _Doc,
                      problems: list[Problem], file: str) -> Any:
    if isinstance(data, str):
        out, missing = interpolate(data, variables)
        for name in missing:
            line, col = doc.pos(path)
            problems.append(Problem(file, line, col, path,
                                    f"environment variable {name} is not set and has no default "
                                    f"(set it, add it to env_file, or write ${{{name}:-default}})"))
        return out
    if isinstance(data, dict):
        return {k: _interpolate_tree(v, path + (str(k),), variables, doc, problems, file)
                for k, v in data.items()}
    if isinstance(data, list):
        return [_interpolate_tree(v, path + (i,), variables, doc, problems, file) for i, v in enumerate(data)]
    return data


_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


def parse_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (``export`` prefix, quotes and ``#`` comments allowed)."""
    out: dict[str, str] = {}
    problems: list[Problem] = []
    for i, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        m = _ENV_LINE.match(raw)
        if not m:
            problems.append(Problem(str(path), i, 1, (), f"not a KEY=VALUE line: {raw.strip()!r}"))
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


def load_config(path: str | os.PathLike[str], *, run_dir: str | None = None,
                environ: Mapping[str, str] | None = None) -> Config:
    """Read, interpolate and validate a config file. Raises ConfigError with every problem found."""
    p = Path(path)
    file = str(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError([Problem(file, 1, 1, (), f"cannot read config: {e.strerror or e}")]) from None
    except UnicodeDecodeError as e:
        raise ConfigError([Problem(file, 1, 1, (), f"config is not UTF-8 text: {e}")]) from None
    doc = _load_yaml(text, file)
    if not isinstance(doc.data, dict):
        raise ConfigError([Problem(file, 1, 1, (), "the top level must be a mapping with a `components:` key")])
    env = dict(os.environ if environ is None else environ)
    problems: list[Problem] = []
    data: dict[str, Any] = dict(doc.data)

    # 1. name, run_dir, env_file first: other keys may refer to RLSUP_RUN_DIR and env_file's variables.
    for key in ("name", "run_dir", "env_file"):
        if isinstance(data.get(key), str):
            data[key] = _interpolate_tree(data[key], (key,), env, doc, problems, file)
    name = data.get("name") if isinstance(data.get("name"), str) else p.stem
    data["name"] = name
    if not isinstance(name, str) or not NAME_RE.match(name):
        line, col = doc.pos(("name",))
        problems.append(Problem(file, line, col, ("name",),
                                f"run name {name!r} must be letters, digits, '-', '_' or '.'"))
    rd = run_dir or (data.get("run_dir") if isinstance(data.get("run_dir"), str) else None) or f"runs/{name}"
    data["run_dir"] = os.path.abspath(rd)
    file_env: dict[str, str] = {}
    if isinstance(data.get("env_file"), str):
        ef = Path(data["env_file"])
        if not ef.is_absolute():
            ef = (p.parent / ef) if (p.parent / ef).exists() else ef
        try:
            file_env = parse_env_file(ef)
        except ConfigError as e:
            problems.extend(e.problems)
        except OSError as e:
            line, col = doc.pos(("env_file",))
            problems.append(Problem(file, line, col, ("env_file",),
                                    f"cannot read env_file {str(ef)!r}: {e.strerror or e}"))
    variables = {**file_env, **env, "RLSUP_RUN_DIR": data["run_dir"], "RLSUP_NAME": str(name),
                 "RLSUP_CONFIG_DIR": str(p.parent.resolve())}

    # 2. everything else.
    for key in list(data):
        if key not in ("name", "run_dir", "env_file"):
            data[key] = _interpolate_tree(data[key], (key,), variables, doc, problems, file)
    data["source"] = str(p.resolve())
    data["file_env"] = file_env
    if "source" in doc.data or "file_env" in doc.data:
        bad = "source" if "source" in doc.data else "file_env"
        line, col = doc.pos((bad,), key=True)
        problems.append(Problem(file, line, col, (bad,), f"unknown key {bad!r}"))

    cfg: Config | None = None
    try:
        cfg = Config.model_validate(data)
    except ValidationError as e:
        problems.extend(_pydantic_problems(e, doc, file))
    if cfg is not None:
        problems.extend(_semantic_problems(cfg, doc, file))
    if problems:
        raise ConfigError(problems)
    assert cfg is not None
    return cfg


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that holds the last element of ``loc`` (for did-you-mean suggestions)."""
    model: Any = Config
    i = 0
    parts = list(loc[:-1])
    while i < len(parts):
        part = parts[i]
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        f = model.model_fields.get(str(part))
        if f is None:
            return None
        ann = f.annotation
        inner = _unwrap(ann)
        if isinstance(inner, tuple):  # dict/list container: skip its key/index
            i += 1
            inner = inner[0]
        model = inner
        i += 1
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap(ann: Any) -> Any:
    import typing

    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin in (dict, list):
        return (_unwrap(args[-1]),)
    if args:  # Optional / Union: first model member
        for a in args:
            u = _unwrap(a)
            if isinstance(u, tuple) or (isinstance(u, type) and issubclass(u, BaseModel)):
                return u
    return ann


_INTERNAL = {"source", "file_env"}


def _pydantic_problems(e: ValidationError, doc: _Doc, file: str) -> list[Problem]:
    out: list[Problem] = []
    for err in e.errors():
        loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and ("[" in x or x.startswith("function-"))))
        etype = err["type"]
        if etype == "extra_forbidden":
            key = str(loc[-1])
            model = _model_at(loc)
            known = [k for k in (model.model_fields if model else {}) if k not in _INTERNAL]
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else (f"; known keys: {', '.join(known)}" if known else "")
            line, col = doc.pos(loc, key=True)
            out.append(Problem(file, line, col, loc[:-1], f"unknown key {key!r}{hint}"))
            continue
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        if etype == "missing":
            line, col = doc.pos(loc[:-1])
            out.append(Problem(file, line, col, loc[:-1], f"missing required key {loc[-1]!r}"))
            continue
        if "input" in err and etype not in ("model_type", "value_error") and not isinstance(err["input"], dict | list):
            msg += f" (got {err['input']!r})"
        line, col = doc.pos(loc)
        out.append(Problem(file, line, col, loc, msg))
    # One problem per position and message.
    uniq: dict[tuple[int, int, str], Problem] = {}
    for p in out:
        uniq.setdefault((p.line, p.col, p.message), p)
    return list(uniq.values())


def _semantic_problems(cfg: Config, doc: _Doc, file: str) -> Iterator[Problem]:
    from .progress import preset_names

    names = list(cfg.components)

    def at(path: Path_, msg: str, key: bool = False) -> Problem:
        line, col = doc.pos(path, key=key)
        return Problem(file, line, col, path, msg)

    for n, c in cfg.components.items():
        base: Path_ = ("components", n)
        if not NAME_RE.match(n):
            yield at(base, f"component name {n!r} must be letters, digits, '-', '_' or '.'", key=True)
        for dep in c.depends_on:
            if dep not in cfg.components:
                close = difflib.get_close_matches(dep, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; components are: {', '.join(names)}"
                yield at(base + ("depends_on", dep), f"unknown dependency {dep!r}{hint}", key=True)
            elif dep == n:
                yield at(base + ("depends_on", dep), "a component cannot depend on itself", key=True)
        for i, dep in enumerate(c.restart_with):
            if dep not in cfg.components:
                close = difflib.get_close_matches(dep, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                yield at(base + ("restart_with", i), f"unknown component {dep!r}{hint}")
        regexes: list[tuple[Path_, str]] = []
        if c.ready and c.ready.log is not None:
            regexes.append((base + ("ready", "log"), c.ready.log))
        if c.progress:
            if c.progress.pattern is not None:
                regexes.append((base + ("progress", "pattern"), c.progress.pattern))
            if c.progress.preset is None and c.progress.pattern is None:
                yield at(base + ("progress",), "progress needs `pattern` or `preset`")
            if c.progress.preset is not None and c.progress.preset not in preset_names():
                close = difflib.get_close_matches(c.progress.preset, preset_names(), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; presets: {', '.join(preset_names())}"
                yield at(base + ("progress", "preset"), f"unknown progress preset {c.progress.preset!r}{hint}")
        if c.resume and c.resume.step_pattern is not None:
            regexes.append((base + ("resume", "step_pattern"), c.resume.step_pattern))
        for i, w in enumerate(c.watch):
            regexes.append((base + ("watch", i, "pattern"), w.pattern))
        for path, rx in regexes:
            try:
                compiled = re.compile(rx)
            except re.error as e:
                yield at(path, f"invalid regular expression: {e.msg} at position {e.pos} in {rx!r}")
                continue
            if path[-1] == "pattern" and path[-2] == "progress" and "step" not in compiled.groupindex:
                yield at(path, "progress pattern needs a named group `step`, e.g. 'Step (?P<step>\\d+)'")
        if c.gpus is not None and len(set(c.gpus)) != len(c.gpus):
            yield at(base + ("gpus",), "a GPU index is listed twice")
        if c.gpus is not None and any(g < 0 for g in c.gpus):
            yield at(base + ("gpus",), "GPU indices are 0 or more")
    yield from _cycles(cfg, doc, file)


def _cycles(cfg: Config, doc: _Doc, file: str) -> Iterator[Problem]:
    color: dict[str, int] = {}
    stack: list[str] = []
    reported: set[frozenset[str]] = set()

    def visit(n: str) -> Iterator[Problem]:
        color[n] = 1
        stack.append(n)
        for d in cfg.components[n].depends_on:
            if d not in cfg.components or d == n:
                continue
            if color.get(d) == 1:
                cycle = stack[stack.index(d):] + [d]
                if frozenset(cycle) not in reported:
                    reported.add(frozenset(cycle))
                    line, col = doc.pos(("components", n, "depends_on", d), key=True)
                    yield Problem(file, line, col, ("components", n, "depends_on"),
                                  f"dependency cycle: {' -> '.join(cycle)}")
            elif color.get(d) is None:
                yield from visit(d)
        stack.pop()
        color[n] = 2

    for n in cfg.components:
        if n not in color:
            yield from visit(n)


def _parse_hostport(s: str) -> tuple[str, int] | None:
    host, sep, port = s.rpartition(":")
    if not sep or not port.isdigit() or not (0 < int(port) < 65536):
        return None
    return (host.strip("[]") or "127.0.0.1", int(port))


def parse_hostport(s: str) -> tuple[str, int]:
    hp = _parse_hostport(s)
    if hp is None:
        raise ValueError(f"not host:port: {s!r}")
    return hp
