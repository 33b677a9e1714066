"""YAML run configuration -> validated model.

Every problem is reported as ``FILE:LINE:COL: key.path: message`` (all problems at once, never a
traceback): :func:`load_config` raises nothing but :class:`ConfigError`, whatever the bytes of the
file. ``${VAR}``, ``${VAR:-default}`` and ``${VAR-default}`` expand in every string value (defaults
may nest: ``${A:-${B:-c}}``); ``$$`` is a literal ``$``; any other ``${`` is an error. Variables come
from the environment, then ``env_file`` (whose values are defaults the shell can override), plus
``RLSUP_RUN_DIR``, ``RLSUP_NAME`` and ``RLSUP_CONFIG_DIR``.

Limits that keep a hostile file an error rather than a crash: a config or env_file of at most
MAX_CONFIG_BYTES, YAML nested at most MAX_DEPTH levels, at most MAX_VALUES values once aliases are
expanded (an alias bomb is refused without being expanded), no recursive aliases. Mapping keys are
the strings written (YAML 1.1 would read ``on:`` as ``True``). What the OS would refuse at spawn time
is refused here: a NUL byte in any string, ``=`` in or an empty environment variable name.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shlex
import signal as signal_mod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
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


# Signals a component cannot be asked to stop with. SIGSTOP cannot be caught and suspends the
# process instead of ending it: every stop would wait out `timeout` and end in SIGKILL anyway.
# SIGKILL is allowed: it is a deliberate "no grace period" (supervisord and Docker accept it too).
_NOT_STOP_SIGNALS = {"SIGSTOP"}


def _signal_name(v: Any) -> str:
    """The canonical name (``SIGTERM``) of a real signal given as a name (any case, with or
    without ``SIG``) or a number; ValueError otherwise.

    Only members of :class:`signal.Signals` count: the module also holds constants that are not
    signals (``SIG_DFL`` = 0, ``SIG_IGN`` = 1, ``SIG_BLOCK`` = 0), which used to be accepted and sent
    as signal 0 or SIGHUP.
    """
    if isinstance(v, bool) or not isinstance(v, int | str):
        raise ValueError(f"a signal is a name such as SIGTERM or a number, got {v!r}")
    text = str(v).strip()
    if text.lstrip("+").isdigit():
        try:
            sig = signal_mod.Signals(int(text))
        except ValueError:
            raise ValueError(f"{text} is not a signal number on this system that rlsup can name "
                             "(use a name such as SIGTERM)") from None
    else:
        name = text.upper()
        name = name if name.startswith("SIG") else "SIG" + name
        sig = signal_mod.Signals.__members__.get(name)  # type: ignore[assignment]
        if sig is None:
            raise ValueError(f"unknown signal {v!r} (use a name such as SIGTERM or SIGINT, or a number)")
    if sig.name in _NOT_STOP_SIGNALS:
        raise ValueError(f"{sig.name} suspends a process instead of ending it, so it cannot be a stop signal "
                         "(use SIGTERM, SIGINT, SIGQUIT, or SIGKILL for no grace period)")
    return sig.name


class StopCfg(_Model):
    signal: str = "SIGTERM"
    timeout: float = Field(30.0, ge=0)

    @field_validator("signal", mode="before")
    @classmethod
    def _known_signal(cls, v: Any) -> str:
        return _signal_name(v)


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


class RayProbeCfg(_Model):
    """Ray's node and actor state over its dashboard's HTTP API (rlsup.supervisor.run.rayprobe)."""

    url: str  # the dashboard of the Ray head: http://HEAD:8265
    interval: float = Field(2.0, gt=0)
    timeout: float = Field(5.0, gt=0)
    token_file: str | None = None  # default: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token (as Ray)

    @field_validator("url")
    @classmethod
    def _http(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"probe.ray.url must be the Ray dashboard's http:// URL (http://HEAD:8265), got {v!r}")
        return v.rstrip("/")


class ProbeCfg(_Model):
    """Probes that read a framework's own view of the run (only `ray` so far)."""

    ray: RayProbeCfg | None = None

    @model_validator(mode="after")
    def _some(self) -> ProbeCfg:
        if self.ray is None:
            raise ValueError("give the probe to run: ray: {url: http://HEAD:8265}")
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
    probe: ProbeCfg | None = None  # optional: the framework's own state (Ray's nodes and actors)
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
    # Slurm (with a `slurm:` block): how many nodes of the allocation it runs on, or whose first node.
    nodes: int | None = Field(None, ge=1)
    colocate: str | None = None
    gpu_count: int | None = None  # not from YAML: `gpus: N`, a count per node that Slurm binds

    @model_validator(mode="before")
    @classmethod
    def _gpus_count(cls, v: Any) -> Any:
        # `gpus: 8` (a count, for Slurm) is kept apart from `gpus: [0, 1]` (indices on this machine), so
        # everything that reads the indices keeps reading a list.
        if isinstance(v, dict):
            if "gpu_count" in v:
                raise ValueError("unknown key 'gpu_count'")
            g = v.get("gpus")
            if isinstance(g, str) and g.strip().isdigit():  # `gpus: ${GPUS:-8}`, after interpolation
                g = int(g)
            if isinstance(g, int) and not isinstance(g, bool):
                v = {**v, "gpus": None, "gpu_count": g}
        return v

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

    def fingerprint(self, run_env: Mapping[str, str]) -> str:
        """What this component runs, as configured (its argv, cwd, and the env the config sets, the run's
        and its own), hashed: `--resume` starts again a completed component whose fingerprint changed
        (a step count raised, say), and keeps one that would run the same thing again."""
        what = {"argv": self.argv(), "cwd": self.cwd, "env": {**dict(run_env), **self.env}}
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


class NotifyCfg(_Model):
    webhook: str | None = None
    command: str | list[str] | None = None
    on: list[Literal["flag", "fatal", "completed", "exited", "restart_scheduled", "run_ended"]] = [
        "flag",
        "fatal",
        "completed",
    ]


SLURM_TIME_RE = re.compile(r"^(?:\d+-\d+(?::\d+){0,2}|\d+(?::\d+){0,2}|UNLIMITED|INFINITE|unlimited|infinite)$")


class SlurmCfg(_Model):
    """The allocation a multi-node run asks Slurm for (``sbatch``)."""

    nodes: int = Field(ge=1)
    gpus_per_node: int = Field(0, ge=0)
    partition: str | None = None
    time: str | None = None  # Slurm's time limit format: MM, HH:MM:SS, D-HH:MM...
    requeue: bool = False
    sbatch_args: list[str] = []

    @field_validator("time", mode="before")
    @classmethod
    def _time(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            v = str(v)  # minutes, as Slurm reads a bare number
        if isinstance(v, str) and not SLURM_TIME_RE.match(v):
            raise ValueError(f"time {v!r} is not a Slurm time limit (minutes, HH:MM:SS, or D-HH:MM:SS)")
        return v


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
    # Memory for every component's line ring together (bytes); the largest ring gives up its oldest
    # lines first. The log files on disk are always complete.
    ring_bytes: int = Field(32 * MiB, ge=1 * MiB)
    slurm: SlurmCfg | None = None
    # Not from YAML: where it came from, and the variables env_file provided.
    source: str = ""
    file_env: dict[str, str] = {}
    placement: dict[str, list[str]] = {}  # with `slurm:`: component -> its nodes (slurm.placement)

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
        # Iterative depth-first search: a 2,000-long dependency chain must not hit the recursion limit.
        done: list[str] = []
        seen: set[str] = set()
        for root in self.components:
            if root in seen:
                continue
            seen.add(root)
            stack = [(root, iter(self.components[root].depends_on))]
            while stack:
                n, deps = stack[-1]
                for d in deps:
                    if d in self.components and d not in seen:
                        seen.add(d)
                        stack.append((d, iter(self.components[d].depends_on)))
                        break
                else:
                    stack.pop()
                    done.append(n)
        return done


# ---------------------------------------------------------------------------------------------
# YAML with positions.
#
# PyYAML's composer and constructor recurse once per nesting level and expand aliases without
# limit, so a hostile file (5,000 nested brackets, `&a [*a]`, an alias bomb) ends in RecursionError
# or MemoryError instead of a config error. We drive PyYAML's (iterative) parser ourselves: the
# document is composed with an explicit stack, nesting is capped, a recursive alias is refused
# where it is written, and the size the document would have once every alias is expanded is
# computed as it is read, so a bomb is refused before anything is expanded.

MAX_CONFIG_BYTES = 16 * MiB  # a config (or env_file) larger than this is a mistake, not a config
MAX_DEPTH = 100  # nesting levels; the schema needs 6
MAX_VALUES = 1_000_000  # values once every alias is expanded (10,000 components x 100 fit)

_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
_MERGE = "tag:yaml.org,2002:merge"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_SCALAR_TAGS = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
                "tag:yaml.org,2002:null")


class _Node:
    """One composed YAML node: kind 's' (scalar), 'q' (sequence) or 'm' (mapping)."""

    __slots__ = ("kind", "tag", "value", "line", "col", "items", "size", "style")

    def __init__(self, kind: str, tag: str, line: int, col: int, value: str = "", style: str | None = None):
        self.kind = kind
        self.tag = tag
        self.value = value
        self.style = style
        self.line = line
        self.col = col
        # sequence: [_Ref]; mapping: [(_Ref key, _Ref value)]
        self.items: list[Any] = []
        self.size = 1  # values in this node once every alias below it is expanded


class _Ref:
    """A child where it is written: the node itself, or an alias to an anchored node."""

    __slots__ = ("node", "line", "col", "alias")

    def __init__(self, node: _Node, line: int, col: int, alias: bool):
        self.node, self.line, self.col, self.alias = node, line, col, alias


class _Doc:
    """The document's data (keys are always the strings written) and where each value and key is."""

    def __init__(self, data: Any = None) -> None:
        self.data = data
        self.marks: dict[Path_, tuple[int, int]] = {}  # value positions
        self.key_marks: dict[Path_, tuple[int, int]] = {}  # key positions

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


class _YamlProblem(Exception):
    def __init__(self, line: int, col: int, message: str):
        super().__init__(message)
        self.line, self.col, self.message = line, col, message


def _mark(m: Any) -> tuple[int, int]:
    return (m.line + 1, m.column + 1) if m is not None else (1, 1)


def _compose(loader: yaml.SafeLoader) -> _Node | None:
    """The single document of the stream as a node graph (aliases shared, never copied)."""
    loader.get_event()  # StreamStart
    if loader.check_event(yaml.StreamEndEvent):
        return None
    loader.get_event()  # DocumentStart
    composer = _Composer(loader)
    while not isinstance(ev := loader.get_event(), yaml.DocumentEndEvent):
        composer.feed(ev)
    if not loader.check_event(yaml.StreamEndEvent):
        ev = loader.get_event()
        line, col = _mark(ev.start_mark)
        raise _YamlProblem(line, col, "YAML syntax error: expected a single document in the stream, "
                                      "but found another document")
    return composer.root


class _Composer:
    """The node graph of one document, built one parser event at a time; every limit (depth, values
    counted at their expanded size through aliases) is enforced as the event that breaks it is read."""

    def __init__(self, loader: yaml.SafeLoader) -> None:
        self.loader = loader
        self.anchors: dict[str, _Node] = {}
        self.open_nodes: list[_Node] = []  # the collections being read, outermost first
        self.open_ids: set[int] = set()
        self.pending_key: list[_Ref | None] = []  # per open mapping: the key read, waiting for its value
        self.total = 0  # values read so far, aliases counted at their expanded size
        self.root: _Node | None = None

    def feed(self, ev: yaml.Event) -> None:
        line, col = _mark(ev.start_mark)
        if isinstance(ev, yaml.AliasEvent):
            self._alias(ev, line, col)
        elif isinstance(ev, yaml.ScalarEvent):
            self._scalar(ev, line, col)
        elif isinstance(ev, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            self._open(ev, line, col)
        elif isinstance(ev, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            self._close()
        if self.total > MAX_VALUES:
            raise _YamlProblem(line, col, f"the document holds more than {MAX_VALUES:,} values")

    def _attach(self, ref: _Ref) -> None:
        if not self.open_nodes:
            self.root = ref.node
            return
        parent = self.open_nodes[-1]
        if parent.kind == "q":
            parent.items.append(ref)
        elif self.pending_key[-1] is None:
            self.pending_key[-1] = ref
        else:
            parent.items.append((self.pending_key[-1], ref))
            self.pending_key[-1] = None

    def _add(self, node: _Node, anchor: str | None, line: int, col: int) -> None:
        """A new scalar or collection: counted, named by its anchor, attached to its parent."""
        self.total += 1
        if anchor is not None:
            self.anchors[anchor] = node
        self._attach(_Ref(node, line, col, False))

    def _alias(self, ev: yaml.AliasEvent, line: int, col: int) -> None:
        target = self.anchors.get(ev.anchor) if ev.anchor is not None else None
        if target is None:
            raise _YamlProblem(line, col, f"YAML alias *{ev.anchor} refers to no anchor &{ev.anchor} above it")
        if id(target) in self.open_ids:
            raise _YamlProblem(line, col, f"YAML alias *{ev.anchor} is inside the node it refers to "
                                          "(a recursive alias)")
        self.total += target.size
        if self.total > MAX_VALUES:
            raise _YamlProblem(line, col, f"the document expands to more than {MAX_VALUES:,} values through "
                                          f"its aliases (at *{ev.anchor}): an alias bomb?")
        self._attach(_Ref(target, line, col, True))

    def _scalar(self, ev: yaml.ScalarEvent, line: int, col: int) -> None:
        tag = ev.tag
        if tag is None or tag == "!":
            tag = self.loader.resolve(yaml.ScalarNode, ev.value, ev.implicit)
        self._add(_Node("s", tag, line, col, ev.value, ev.style), ev.anchor, line, col)

    def _open(self, ev: yaml.SequenceStartEvent | yaml.MappingStartEvent, line: int, col: int) -> None:
        if len(self.open_nodes) >= MAX_DEPTH:
            raise _YamlProblem(line, col, f"nested more than {MAX_DEPTH} levels deep")
        is_seq = isinstance(ev, yaml.SequenceStartEvent)
        tag = ev.tag
        if tag is None or tag == "!":
            tag = self.loader.resolve(yaml.SequenceNode if is_seq else yaml.MappingNode, None, ev.implicit)
        node = _Node("q" if is_seq else "m", tag, line, col)
        self._add(node, ev.anchor, line, col)
        self.open_nodes.append(node)
        self.open_ids.add(id(node))
        self.pending_key.append(None)

    def _close(self) -> None:
        node = self.open_nodes.pop()
        self.open_ids.discard(id(node))
        self.pending_key.pop()
        if node.kind == "q":
            node.size = 1 + sum(r.node.size for r in node.items)
        else:
            node.size = 1 + sum(k.node.size + v.node.size for k, v in node.items)


def _construct(root: _Node, doc: _Doc, loader: yaml.SafeLoader, problems: list[Problem], file: str) -> Any:
    """Plain Python data from the node graph; every mapping key is the string the user wrote.

    Keys stay as written because YAML 1.1 reads ``on``, ``off``, ``yes`` and ``no`` as booleans,
    which would turn notify's ``on:`` into ``True``; rlsup's keys are names, never booleans.
    Values keep YAML's types (``exit_on_end: yes`` is true). Recursion here is bounded by
    MAX_DEPTH and the work by MAX_VALUES, both enforced while composing.
    """
    return _Constructor(doc, loader, problems, file).build(_Ref(root, root.line, root.col, False), (), True)


class _Constructor:
    """Builds the data of :func:`_construct`: one method per node kind. ``record``: whether positions
    are recorded in ``doc`` (not below an alias or a merge, whose positions are where it is used)."""

    def __init__(self, doc: _Doc, loader: yaml.SafeLoader, problems: list[Problem], file: str) -> None:
        self.doc, self.loader, self.problems, self.file = doc, loader, problems, file

    def problem(self, line: int, col: int, path: Path_, msg: str) -> None:
        self.problems.append(Problem(self.file, line, col, path, msg))

    def build(self, ref: _Ref, path: Path_, record: bool) -> Any:
        node = ref.node
        if record:
            self.doc.marks[path] = (ref.line, ref.col)
        # Below an alias, positions fall back to the alias (pos() walks up): where it was used.
        record = record and not ref.alias
        if node.kind == "s":
            return self.scalar(node, path)
        if node.kind == "q":
            return self.sequence(node, path, record)
        return self.mapping(node, path, record)

    def scalar(self, node: _Node, path: Path_) -> Any:
        tag = node.tag
        if tag == _STR or tag == _TIMESTAMP:  # no rlsup field is a date: keep what was written
            return node.value
        if tag in _SCALAR_TAGS:
            try:
                return self.loader.yaml_constructors[tag](
                    self.loader, yaml.ScalarNode(tag, node.value, style=node.style))
            except Exception as e:  # PyYAML's scalar constructors raise what they meet: IndexError on
                # `!!int ""`, ValueError on an int of 5,000 digits. Any of them means: not that type.
                why = str(e).split(";")[0][:120] or type(e).__name__
                self.problem(node.line, node.col, path,
                             f"cannot read {_clip(node.value)} as {tag.rsplit(':', 1)[-1]}: {why}")
                return None
        self.problem(node.line, node.col, path, f"unsupported YAML tag {tag!r}")
        return None

    def sequence(self, node: _Node, path: Path_, record: bool) -> list[Any]:
        if node.tag != _SEQ:
            self.problem(node.line, node.col, path, f"unsupported YAML tag {node.tag!r} on a list")
        return [self.build(r, path + (i,), record) for i, r in enumerate(node.items)]

    def mapping(self, node: _Node, path: Path_, record: bool) -> dict[str, Any]:
        if node.tag != _MAP:
            self.problem(node.line, node.col, path, f"unsupported YAML tag {node.tag!r} on a mapping")
        out: dict[str, Any] = {}
        seen: dict[str, int] = {}
        merges: list[_Ref] = []
        for kref, vref in node.items:
            k = kref.node
            if k.kind != "s":
                self.problem(kref.line, kref.col, path, "a key must be a plain string, not a "
                                                        f"{'list' if k.kind == 'q' else 'mapping'}")
                continue
            if k.tag == _MERGE and not kref.alias and k.style is None:
                merges.append(vref)
                continue
            key = k.value
            if key in seen:
                self.problem(kref.line, kref.col, path, f"duplicate key {key!r} (first at line {seen[key]})")
            seen[key] = kref.line
            if record:
                self.doc.key_marks[path + (key,)] = (kref.line, kref.col)
            out[key] = self.build(vref, path + (key,), record)
        for vref in merges:
            self.merge(out, vref, path, record)
        return out

    def merge(self, out: dict[str, Any], vref: _Ref, path: Path_, record: bool) -> None:
        """`<<: *defaults` (or a list of them): keys written here win, then earlier merges."""
        sources = vref.node.items if vref.node.kind == "q" else [vref]
        for src in sources:
            if src.node.kind != "m":
                self.problem(src.line, src.col, path, "`<<` merges a mapping (or a list of mappings) into this one")
                continue
            merged = self.build(src, path + ("<<",), False)
            for key, value in (merged.items() if isinstance(merged, dict) else ()):
                if key not in out:
                    out[key] = value
                    if record:
                        self.doc.marks.setdefault(path + (key,), (src.line, src.col))
                        self.doc.key_marks.setdefault(path + (key,), (src.line, src.col))


def _load_yaml(text: str, file: str) -> _Doc:
    """Parse ``text`` into a :class:`_Doc`; any YAML problem is a :class:`ConfigError` with a position."""
    problems: list[Problem] = []
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)  # checks every character at once: may raise ReaderError
        root = _compose(loader)
        if root is None:
            raise ConfigError([Problem(file, 1, 1, (), "the file is empty")])
        doc = _Doc()
        doc.data = _construct(root, doc, loader, problems, file)
    except _YamlProblem as e:
        raise ConfigError([Problem(file, e.line, e.col, (), e.message)]) from None
    except yaml.MarkedYAMLError as e:
        line, col = _mark(e.problem_mark or e.context_mark)
        msg = " ".join(x for x in (e.context, e.problem) if x) or str(e)
        raise ConfigError([Problem(file, line, col, (), f"YAML syntax error: {msg}")]) from None
    except yaml.reader.ReaderError as e:  # a character YAML does not allow (NUL, most control codes)
        line, col = _text_pos(text, e.position)
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


def _clip(s: str, n: int = 40) -> str:
    return repr(s) if len(s) <= n else repr(s[:n]) + f"... ({len(s):,} characters)"


def _clip_repr(v: Any, n: int = 80) -> str:
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def _text_pos(text: str, index: int) -> tuple[int, int]:
    """1-based line and column of ``text[index]``."""
    index = max(0, min(index, len(text)))
    line_start = text.rfind("\n", 0, index) + 1
    return text.count("\n", 0, index) + 1, index - line_start + 1


def _read_capped(path: Path, what: str) -> bytes:
    """The file's bytes; OSError as open/read raise it, ValueError when it is over MAX_CONFIG_BYTES."""
    with open(path, "rb") as fh:  # also /dev/zero or a pipe: never read more than the cap
        data = fh.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"{what} is larger than {MAX_CONFIG_BYTES // MiB} MiB: not a config")
    return data


def _decode(data: bytes, file: str, path: Path_ = ()) -> str:
    """``data`` as UTF-8, or a ConfigError at the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConfigError([Problem(file, line, col, path, f"not UTF-8 text (byte 0x{data[e.start]:02x}: {e.reason}): "
                                                          "is it a binary file?")]) from None


# ---------------------------------------------------------------------------------------------
# Interpolation: ${VAR}, ${VAR:-default} (unset or empty), ${VAR-default} (unset), $$ -> $.
# Defaults may hold references themselves (${A:-${B:-c}}), expanded only when used, as a shell
# does. A `${` that is not one of these forms is an error, never passed through as text.

MAX_EXPANSION_DEPTH = 20
_NAME_AT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class _Var:
    name: str
    op: str  # "" | ":-" | "-"
    default: list[str | _Var]
    raw: str  # the reference as written


def _parse_refs(s: str, errors: list[str]) -> list[str | _Var]:
    """``s`` split into literal text and variable references; bad references stay as text."""
    return _RefParser(s, errors).parse()


class _RefParser:
    """The reader of :func:`_parse_refs`: literal text until the next ``$`` (or, inside a default, ``}``),
    then one method per thing that can start there."""

    def __init__(self, s: str, errors: list[str]) -> None:
        self.s, self.errors = s, errors
        self.parts: list[str | _Var] = []
        # (start of the reference, name, op, parts collected so far) for each open ${NAME:-...
        self.stack: list[tuple[int, str, str, list[str | _Var]]] = []
        self.cur = self.parts
        self.buf: list[str] = []
        self.i = 0

    def parse(self) -> list[str | _Var]:
        s = self.s
        while self.i < len(s):
            j = s.find("$", self.i) if not self.stack else _next_special(s, self.i)
            if j < 0:
                self.buf.append(s[self.i:])
                break
            self.buf.append(s[self.i:j])
            self.i = j
            if s[j] == "}":
                self._close_default()
            elif not s.startswith("${", j):
                self._dollar()
            elif not self._reference():
                return self._as_written()
        if self.stack:  # the string ended inside ${NAME:-...: keep that text as written
            start = self.stack[0][0]
            self.errors.append(f"unterminated variable reference {s[start:start + 40]!r}: no closing '}}' "
                               "(write $$ for a literal $)")
            return self._as_written()
        self._flush()
        return self.parts

    def _flush(self) -> None:
        if self.buf:
            self.cur.append("".join(self.buf))
            self.buf.clear()

    def _as_written(self) -> list[str | _Var]:
        """What was read before the outermost open default, then the rest of ``s`` as it is written."""
        start, _, _, outer = self.stack[0]
        return [*outer, self.s[start:]]

    def _close_default(self) -> None:
        """A ``}`` closes the innermost open default."""
        start, name, op, outer = self.stack.pop()
        self._flush()
        var = _Var(name, op, self.cur, self.s[start:self.i + 1])
        self.cur = outer
        self.cur.append(var)
        self.i += 1

    def _dollar(self) -> None:
        """``$$`` is a literal ``$``; so is a ``$`` that starts no reference."""
        self.buf.append("$")
        self.i += 2 if self.s.startswith("$$", self.i) else 1

    def _reference(self) -> bool:
        """At ``${``: a reference, the start of one with a default, or a bad one (reported, kept as
        text). False where defaults nest too deep: the caller keeps the rest as written."""
        s, i = self.s, self.i
        m = _NAME_AT.match(s, i + 2)
        end = m.end() if m else i + 2
        if m and s.startswith("}", end):
            self._flush()
            self.cur.append(_Var(m.group(0), "", [], s[i:end + 1]))
            self.i = end + 1
            return True
        op = ":-" if s.startswith(":-", end) else "-" if s.startswith("-", end) else ""
        if not (m and op):
            self._bad_reference()
            return True
        if len(self.stack) >= MAX_EXPANSION_DEPTH:
            self.errors.append(f"variable defaults nested more than {MAX_EXPANSION_DEPTH} deep")
            return False
        self._flush()
        self.stack.append((i, m.group(0), op, self.cur))
        self.cur = []
        self.i = end + len(op)
        return True

    def _bad_reference(self) -> None:
        s, i = self.s, self.i
        close = s.find("}", i)
        shown = s[i:close + 1] if close >= 0 else s[i:i + 40]
        if close < 0:
            self.errors.append(f"unterminated variable reference {shown!r}: no closing '}}' "
                               "(write $$ for a literal $)")
        else:
            self.errors.append(f"bad variable reference {shown!r}: use ${{VAR}}, ${{VAR:-default}} or "
                               "${VAR-default} (write $$ for a literal $)")
        self.buf.append(s[i:i + 2])
        self.i += 2


def _next_special(s: str, i: int) -> int:
    """Index of the next ``$`` or ``}`` at or after ``i`` (-1 if none): inside a default, ``}`` ends it."""
    a, b = s.find("$", i), s.find("}", i)
    if a < 0:
        return b
    return a if b < 0 or a < b else b


def _evaluate(parts: list[str | _Var], variables: Mapping[str, str], missing: list[str]) -> str:
    out: list[str] = []
    for p in parts:
        if isinstance(p, str):
            out.append(p)
            continue
        v = variables.get(p.name)
        if v is None or (v == "" and p.op == ":-"):
            if p.op:
                out.append(_evaluate(p.default, variables, missing))
                continue
            missing.append(p.name)
            v = ""
        out.append(v)
    return "".join(out)


def expand(value: str, variables: Mapping[str, str]) -> tuple[str, list[str], list[str]]:
    """Expand references in ``value``: (text, names missing without a default, syntax errors)."""
    if "$" not in value:
        return value, [], []
    errors: list[str] = []
    parts = _parse_refs(value, errors)
    missing: list[str] = []
    return _evaluate(parts, variables, missing), missing, errors


def interpolate(value: str, variables: Mapping[str, str]) -> tuple[str, list[str]]:
    """Expand ``${VAR}``/``${VAR:-default}``/``$$``; return (text, names that were missing).

    A malformed reference is left as written; :func:`expand` also reports it.
    """
    text, missing, _ = expand(value, variables)
    return text, missing


def _interpolate_tree(data: Any, path: Path_, variables: Mapping[str, str], doc: _Doc,
                      problems: list[Problem], file: str) -> Any:
    # Recursion is bounded by MAX_DEPTH, enforced when the YAML was read.
    if isinstance(data, str):
        out, missing, errors = expand(data, variables)
        if missing or errors:
            line, col = doc.pos(path)
            for err in errors:
                problems.append(Problem(file, line, col, path, err))
            for name in missing:
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


_NUL_MSG = "contains a NUL byte, which no command, path or environment value can hold"


def _os_problems(data: Any, path: Path_, doc: _Doc, file: str) -> Iterator[Problem]:
    """What the OS would refuse at spawn time, found now: NUL anywhere, bad environment names.

    Without this a NUL in a command, cwd or env value passes ``check`` and fails only when
    ``up`` spawns the component (``ValueError: embedded null byte``).
    """
    if isinstance(data, str):
        if "\x00" in data:
            line, col = doc.pos(path)
            yield Problem(file, line, col, path, _NUL_MSG)
        return
    if isinstance(data, list):
        for i, v in enumerate(data):
            yield from _os_problems(v, path + (i,), doc, file)
        return
    if not isinstance(data, dict):
        return
    is_env = bool(path) and path[-1] == "env" and (len(path) == 1 or path[:1] == ("components",) and len(path) == 3)
    for k, v in data.items():
        kp = path + (str(k),)
        if isinstance(k, str) and "\x00" in k:
            line, col = doc.pos(kp, key=True)
            yield Problem(file, line, col, path, f"key {k!r} {_NUL_MSG}")
        elif is_env and isinstance(k, str) and ("=" in k or not k):
            line, col = doc.pos(kp, key=True)
            yield Problem(file, line, col, path,
                          f"environment variable name {k!r} " + ("contains '=', which ends a name in the "
                                                                 "environment" if k else "is empty"))
        yield from _os_problems(v, kp, doc, file)


_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


def parse_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (``export`` prefix, quotes and ``#`` comments allowed).

    Raises OSError when the file cannot be read, ConfigError for anything in it that is not
    such a line (binary content, non-UTF-8 bytes, a NUL byte), with the file's line and column.
    """
    file = str(path)
    where: Path_ = ("env_file",)
    try:
        data = _read_capped(path, "the file")
    except ValueError as e:
        raise ConfigError([Problem(file, 1, 1, where, str(e))]) from None
    text = _decode(data, file, where)
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
_INTERNAL_KEYS = ("source", "file_env", "placement")


def load_config(path: str | os.PathLike[str], *, run_dir: str | None = None,
                environ: Mapping[str, str] | None = None) -> Config:
    """Read, interpolate and validate a config file. Raises ConfigError with every problem found."""
    p = Path(path)
    file = str(path)
    doc = _read_document(p, file)
    env = dict(os.environ if environ is None else environ)
    problems: list[Problem] = []
    data: dict[str, Any] = dict(doc.data)

    # 1. name, run_dir, env_file first: other keys may refer to RLSUP_RUN_DIR and env_file's variables.
    name = _interpolate_early(data, p, run_dir, env, doc, problems, file)
    file_env = _env_file_variables(data, p, doc, problems, file)
    variables = {**file_env, **env, "RLSUP_RUN_DIR": data["run_dir"], "RLSUP_NAME": str(name),
                 "RLSUP_CONFIG_DIR": str(p.parent.resolve())}
    placement, node_variables = _slurm_placement(data, env, str(name))
    variables.update(node_variables)

    # 2. everything else.
    for key in list(data):
        if key not in _EARLY_KEYS:
            data[key] = _interpolate_tree(data[key], (key,), variables, doc, problems, file)
    problems.extend(_os_problems(data, (), doc, file))
    data["source"] = str(p.resolve())
    data["file_env"] = file_env
    data["placement"] = placement
    problems.extend(_internal_key_problems(doc, file))
    cfg = _validated(data, doc, file, problems)
    if problems:
        raise ConfigError(problems)
    assert cfg is not None
    return cfg


def _read_document(p: Path, file: str) -> _Doc:
    """The config file parsed (capped in size, UTF-8, YAML), its top level a mapping."""
    try:
        raw = _read_capped(p, "the file")
    except OSError as e:
        raise ConfigError([Problem(file, 1, 1, (), f"cannot read config: {e.strerror or e}")]) from None
    except ValueError as e:
        raise ConfigError([Problem(file, 1, 1, (), str(e))]) from None
    doc = _load_yaml(_decode(raw, file), file)
    if not isinstance(doc.data, dict):
        raise ConfigError([Problem(file, 1, 1, (), "the top level must be a mapping with a `components:` key")])
    return doc


def _interpolate_early(data: dict[str, Any], p: Path, run_dir: str | None, env: dict[str, str], doc: _Doc,
                       problems: list[Problem], file: str) -> Any:
    """name, run_dir and env_file interpolated from the environment alone; the run's name (the file's
    stem by default) checked, and its run dir made absolute (``run_dir``: the caller's, which wins)."""
    for key in _EARLY_KEYS:
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
    return name


def _env_file_variables(data: dict[str, Any], p: Path, doc: _Doc, problems: list[Problem],
                        file: str) -> dict[str, str]:
    """The variables of env_file (relative to the config's directory when it is there), else none."""
    if not isinstance(data.get("env_file"), str) or "\x00" in data["env_file"]:  # NUL: reported later
        return {}
    ef = Path(data["env_file"])
    try:
        if not ef.is_absolute() and (p.parent / ef).exists():
            ef = p.parent / ef
        return parse_env_file(ef)
    except ConfigError as e:
        problems.extend(e.problems)
    except OSError as e:  # also from exists(): a parent without search permission, a name too long
        line, col = doc.pos(("env_file",))
        problems.append(Problem(file, line, col, ("env_file",),
                                f"cannot read env_file {str(ef)!r}: {e.strerror or e}"))
    return {}


def _slurm_placement(data: dict[str, Any], env: dict[str, str],
                     name: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """A Slurm run: each component's nodes, and the variables that name them (${RLSUP_HEAD_C}...),
    known inside the job (placeholders on a login node). Nothing for a run without Slurm."""
    if not (isinstance(data.get("slurm"), dict) and isinstance(data.get("components"), dict)):
        return {}, {}
    from . import placement as slurm_placement

    alloc, _ = slurm_placement.allocation_nodes(data["slurm"], env, name)
    placement = slurm_placement.place(data["components"], alloc)
    return placement, slurm_placement.variables(placement)


def _internal_key_problems(doc: _Doc, file: str) -> list[Problem]:
    """A key the user may not write: rlsup sets it itself (the first one found is reported)."""
    bad = next((k for k in _INTERNAL_KEYS if k in doc.data), None)
    if bad is None:
        return []
    line, col = doc.pos((bad,), key=True)
    return [Problem(file, line, col, (bad,), f"unknown key {bad!r}")]


def _validated(data: dict[str, Any], doc: _Doc, file: str, problems: list[Problem]) -> Config | None:
    """The config built by pydantic, then checked for what pydantic cannot see; problems added to
    ``problems`` (None where pydantic could not build it)."""
    try:
        cfg = Config.model_validate(data)
    except ValidationError as e:
        problems.extend(_pydantic_problems(e, doc, file, data))
        return None
    problems.extend(_semantic_problems(cfg, doc, file))
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


_INTERNAL = {"source", "file_env", "placement", "gpu_count"}


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


def _pydantic_problems(e: ValidationError, doc: _Doc, file: str, data: Any) -> list[Problem]:
    out: list[Problem] = []
    for err in e.errors():
        etype = err["type"]
        loc = _data_loc(tuple(err["loc"]), data, etype == "missing")
        if etype == "extra_forbidden" and loc:
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
        if etype == "missing" and loc:
            line, col = doc.pos(loc[:-1])
            out.append(Problem(file, line, col, loc[:-1], f"missing required key {loc[-1]!r}"))
            continue
        if "input" in err and etype not in ("model_type", "value_error") and not isinstance(err["input"], dict | list):
            msg += f" (got {_clip(err['input']) if isinstance(err['input'], str) else _clip_repr(err['input'])})"
        line, col = doc.pos(loc)
        out.append(Problem(file, line, col, loc, msg))
    # One problem per position and message.
    uniq: dict[tuple[int, int, str], Problem] = {}
    for p in out:
        uniq.setdefault((p.line, p.col, p.message), p)
    return list(uniq.values())


class _At:
    """A :class:`Problem` at a path of the config, placed where the user wrote it."""

    def __init__(self, doc: _Doc, file: str) -> None:
        self.doc, self.file = doc, file

    def __call__(self, path: Path_, msg: str, key: bool = False) -> Problem:
        line, col = self.doc.pos(path, key=key)
        return Problem(self.file, line, col, path, msg)


def _semantic_problems(cfg: Config, doc: _Doc, file: str) -> Iterator[Problem]:
    """What pydantic cannot see in one field: names, references between components, regular
    expressions, presets, GPU lists, the Slurm section, dependency cycles; each check in turn."""
    at = _At(doc, file)
    for n, c in cfg.components.items():
        for check in _COMPONENT_CHECKS:
            yield from check(cfg, n, c, at)
    from .slurm_checks import config_problems

    for path, msg, key in config_problems(cfg):
        yield at(path, msg, key=key)
    yield from _cycles(cfg, doc, file)


def _name_problems(cfg: Config, n: str, c: Component, at: _At) -> Iterator[Problem]:
    if not NAME_RE.match(n):
        yield at(("components", n), f"component name {n!r} must be letters, digits, '-', '_' or '.'", key=True)


def _depends_on_problems(cfg: Config, n: str, c: Component, at: _At) -> Iterator[Problem]:
    names = list(cfg.components)
    for dep in c.depends_on:
        if dep not in cfg.components:
            close = difflib.get_close_matches(dep, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; components are: {', '.join(names)}"
            yield at(("components", n, "depends_on", dep), f"unknown dependency {dep!r}{hint}", key=True)
        elif dep == n:
            yield at(("components", n, "depends_on", dep), "a component cannot depend on itself", key=True)


def _restart_with_problems(cfg: Config, n: str, c: Component, at: _At) -> Iterator[Problem]:
    for i, dep in enumerate(c.restart_with):
        if dep == n:  # it would follow its own restarts
            yield at(("components", n, "restart_with", i), "a component cannot restart with itself")
        elif dep not in cfg.components:
            close = difflib.get_close_matches(dep, list(cfg.components), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            yield at(("components", n, "restart_with", i), f"unknown component {dep!r}{hint}")


def _progress_problems(cfg: Config, n: str, c: Component, at: _At) -> Iterator[Problem]:
    from ..records.progress import preset_names

    if not c.progress:
        return
    base: Path_ = ("components", n, "progress")
    if c.progress.preset is None and c.progress.pattern is None:
        yield at(base, "progress needs `pattern` or `preset`")
    if c.progress.preset is not None and c.progress.preset not in preset_names():
        close = difflib.get_close_matches(c.progress.preset, preset_names(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; presets: {', '.join(preset_names())}"
        yield at(base + ("preset",), f"unknown progress preset {c.progress.preset!r}{hint}")


def _clean_problems(cfg: Config, n: str, c: Component, at: _At) -> Iterator[Problem]:
    for i, g in enumerate(c.resume.clean if c.resume else []):
        yield from (at(("components", n, "resume", "clean", i), m) for m in _clean_glob_problems(g))


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


def _regex_problems(cfg: Config, n: str, c: Component, at: _At) -> Iterator[Problem]:
    for path, rx in _regexes(n, c):
        try:
            compiled = re.compile(rx)
        except re.error as e:
            yield at(path, f"invalid regular expression: {e.msg} at position {e.pos} in {_clip(rx, 80)}")
            continue
        except RecursionError:  # Python's regex parser recurses once per nested group
            yield at(path, f"regular expression nested too deeply to compile: {_clip(rx, 80)}")
            continue
        if path[-1] == "pattern" and path[-2] == "progress" and "step" not in compiled.groupindex:
            yield at(path, "progress pattern needs a named group `step`, e.g. 'Step (?P<step>\\d+)'")


def _gpus_problems(cfg: Config, n: str, c: Component, at: _At) -> Iterator[Problem]:
    if c.gpus is not None and len(set(c.gpus)) != len(c.gpus):
        yield at(("components", n, "gpus"), "a GPU index is listed twice")
    if c.gpus is not None and any(g < 0 for g in c.gpus):
        yield at(("components", n, "gpus"), "GPU indices are 0 or more")


#: The checks of one component, in the order their problems are reported.
_COMPONENT_CHECKS: tuple[Callable[[Config, str, Component, _At], Iterator[Problem]], ...] = (
    _name_problems, _depends_on_problems, _restart_with_problems, _progress_problems, _clean_problems,
    _regex_problems, _gpus_problems)


def _cycles(cfg: Config, doc: _Doc, file: str) -> Iterator[Problem]:
    # Iterative depth-first search (white/grey/black), so a long chain cannot exhaust the stack.
    color: dict[str, int] = {}
    reported: set[frozenset[str]] = set()
    for root in cfg.components:
        if root in color:
            continue
        color[root] = 1
        path = [root]
        index = {root: 0}  # position of each grey node in `path`
        iters = [iter(cfg.components[root].depends_on)]
        while iters:
            n = path[-1]
            for d in iters[-1]:
                if d not in cfg.components or d == n:
                    continue
                if color.get(d) == 1:
                    cycle = path[index[d]:] + [d]
                    if frozenset(cycle) not in reported:
                        reported.add(frozenset(cycle))
                        line, col = doc.pos(("components", n, "depends_on", d), key=True)
                        yield Problem(file, line, col, ("components", n, "depends_on"),
                                      f"dependency cycle: {_chain_str(cycle)}")
                elif color.get(d) is None:
                    color[d] = 1
                    index[d] = len(path)
                    path.append(d)
                    iters.append(iter(cfg.components[d].depends_on))
                    break
            else:
                color[n] = 2
                del index[n]
                path.pop()
                iters.pop()


def _chain_str(names: list[str]) -> str:
    if len(names) <= 12:
        return " -> ".join(names)
    return f"{' -> '.join(names[:5])} -> ... ({len(names) - 10} more) -> {' -> '.join(names[-5:])}"


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
