"""The run's configuration as pydantic models: what each key of the YAML file means, its type, its
default and its bounds. ``extra="forbid"`` everywhere, so a typo is an error, never a silently ignored
key. Reading the file (YAML with positions, interpolation, limits) and turning every problem into
``FILE:LINE:COL: key.path: message`` is :mod:`.loader`'s business.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import shlex
import signal as signal_mod
from collections.abc import Iterator, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

Path_ = tuple[str | int, ...]
Condition = Literal["started", "ready", "completed"]
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
MiB = 1024 * 1024
# Fields rlsup sets itself (Config.source, file_env, placement; Component.gpu_count): refused in a file, left
# out of the schema and of did-you-mean hints.
NOT_WRITTEN = ("source", "file_env", "placement", "gpu_count")


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


def _signal_name(v: Any, preempt: bool = False) -> str:
    """The canonical name (``SIGTERM``) of a member of :class:`signal.Signals` (not ``SIG_DFL``/``SIG_IGN``) given as
    a name (any case, with or without ``SIG``) or a number; ValueError otherwise (``preempt``: SIGKILL too)."""
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
    if preempt and sig.name == "SIGKILL":
        raise ValueError("SIGKILL ends a process before it can write anything: name the signal it checkpoints "
                         "on (SIGUSR1, say)")
    return sig.name


class StopCfg(_Model):
    signal: Annotated[str, BeforeValidator(_signal_name)] = "SIGTERM"
    timeout: float = Field(30.0, ge=0)


class PreemptCfg(_Model):
    """How a component is asked to keep its work when the platform takes the machine (a SIGTERM to the
    supervisor, Slurm's preemption or time-limit notice): ``signal`` asks it to write a checkpoint, and
    rlsup waits up to ``wait`` seconds for a new complete one (or its exit) before it stops it in order."""

    signal: Annotated[str, BeforeValidator(lambda v: _signal_name(v, preempt=True))] = "SIGUSR1"
    wait: float = Field(120.0, gt=0)


class _ProbeTarget(_Model):
    """A probe of exactly one kind of those its class names (``_KINDS``)."""

    _KINDS: ClassVar[tuple[str, ...]] = ("http", "tcp")
    http: str | None = None
    tcp: str | None = None

    def kind(self) -> str:
        return next(k for k in self._KINDS if getattr(self, k) is not None)

    def target(self) -> str:
        return str(getattr(self, self.kind()))

    @model_validator(mode="after")
    def _one_kind(self) -> Any:
        given = [k for k in self._KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(self._KINDS)} (got {', '.join(given) or 'none'})")
        if self.tcp is not None and not _parse_hostport(self.tcp):
            raise ValueError(f"tcp probe must be host:port, got {self.tcp!r}")
        if self.http is not None and not self.http.startswith(("http://", "https://")):
            raise ValueError(f"http probe must be an http:// URL, got {self.http!r}")
        return self


class ReadyProbe(_ProbeTarget):
    _KINDS = ("http", "tcp", "log", "file")
    log: str | None = None
    file: str | None = None
    timeout: float = Field(900.0, gt=0)
    interval: float = Field(1.0, gt=0)


class AliveProbe(_ProbeTarget):
    interval: float = Field(10.0, gt=0)
    failures: int = Field(3, ge=1)
    timeout: float = Field(5.0, gt=0)


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


# An `env:` mapping (the run's, a component's): numbers and booleans written in it are the strings the
# environment will hold.
Env = Annotated[dict[str, str], BeforeValidator(lambda v: {
    k: str(int(x)) if isinstance(x, bool) else str(x) if isinstance(x, int | float) else x for k, x in v.items()}
    if isinstance(v, dict) else v)]


class Component(_Model):
    shell: bool = False  # before `command`: its validator reads it
    command: str | list[str]
    cwd: str | None = None
    env: Env = {}
    gpus: list[int] | None = None
    ready: ReadyProbe | None = None
    alive: AliveProbe | None = None
    probe: ProbeCfg | None = None  # optional: the framework's own state (Ray's nodes and actors)
    restart: RestartCfg = RestartCfg()
    stop: StopCfg = StopCfg()
    preempt: PreemptCfg | None = None  # without it, preemption stops it with its stop signal and timeout
    depends_on: dict[str, Condition] = {}
    restart_with: list[str] = []
    progress: ProgressCfg | None = None
    resume: ResumeCfg | None = None
    exit_on_end: bool = False
    smoke: str | list[str] | None = None
    watch: list[WatchCfg] = []
    logs: LogsCfg | None = None
    # Slurm (with a `slurm:` block): how many nodes of the allocation it runs on ("rest": every node no other
    # component's `nodes:` takes, e.g. Ray workers beside a head), or whose first node.
    nodes: Annotated[int, Field(ge=1)] | Literal["rest"] | None = None
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

    @field_validator("restart", mode="before")
    @classmethod
    def _restart_policy(cls, v: Any) -> Any:
        # `restart: never` is short for `restart: {policy: never}` (as docker compose writes it).
        return {"policy": v} if isinstance(v, str) else v

    @field_validator("depends_on", mode="before")
    @classmethod
    def _deps_list(cls, v: Any) -> Any:
        # `depends_on: [a, b]` (or one name) means "started" for each.
        return {str(name): "started" for name in ([v] if isinstance(v, str) else v)} if isinstance(v, list | str) else v

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


class MetricsCfg(_Model):
    """An opt-in Prometheus endpoint served by the supervisor (docs/metrics.md)."""
    port: int = Field(ge=1, le=65535)
    host: str = "127.0.0.1"


class NotifyCfg(_Model):
    webhook: str | None = None
    command: str | list[str] | None = None
    on: list[Literal["flag", "fatal", "completed", "exited", "restart_scheduled", "run_ended"]] = [
        "flag", "fatal", "completed"]


WARN_BEFORE_S = 120


SLURM_TIME_RE = re.compile(r"^(?:\d+-\d+(?::\d+){0,2}|\d+(?::\d+){0,2}|UNLIMITED|INFINITE|unlimited|infinite)$")


class SlurmCfg(_Model):
    """The allocation a multi-node run asks Slurm for (``sbatch``)."""

    nodes: int = Field(ge=1)
    gpus_per_node: int = Field(0, ge=0)
    partition: str | None = None
    time: str | None = None  # Slurm's time limit format: MM, HH:MM:SS, D-HH:MM...
    requeue: bool = False
    sbatch_args: list[str] = []
    # Seconds before the time limit at which Slurm warns the job (--signal=B:USR1@N): rlsup then checkpoints,
    # stops in order and requeues the job. Default: 120, or half the time limit when that is shorter.
    warn_before: int | None = Field(None, gt=0)

    def time_limit_s(self) -> int | None:
        """``time`` (a Slurm time limit: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``, as
        sbatch(1) reads them) in seconds; None when it is unset or unlimited."""
        text = self.time
        if text is None or text.lower() in ("unlimited", "infinite"):
            return None
        days, sep, rest = text.partition("-") if "-" in text else ("0", "", text)
        parts = [int(x) for x in rest.split(":")]
        mult = (3600, 60, 1)[:len(parts)] if sep else {1: (60,), 2: (60, 1), 3: (3600, 60, 1)}[len(parts)]
        return int(days) * 86400 + sum(p * m for p, m in zip(parts, mult, strict=True))

    def warn_s(self) -> int:
        """The warning's lead, in seconds (``warn_before``, else its default)."""
        if self.warn_before is not None:
            return self.warn_before
        limit = self.time_limit_s()
        return WARN_BEFORE_S if limit is None else max(1, min(WARN_BEFORE_S, limit // 2))

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
    env: Env = {}
    env_file: str | None = None
    components: dict[str, Component]
    notify: NotifyCfg | None = None
    metrics: MetricsCfg | None = None  # off unless given
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
        return [path[-1] for path, back in self.walk_dependencies() if back is None]

    def walk_dependencies(self) -> Iterator[tuple[list[str], int | None]]:
        """Depth-first over ``depends_on`` in file order, without recursion (a 2,000-long dependency chain must
        not hit the recursion limit): ``(path, None)`` once the component ``path[-1]`` is done (after its
        dependencies), ``(path, i)`` where ``path[-1]`` depends on ``path[i]``, further up it (a cycle)."""
        done: set[str] = set()
        for root in self.components:
            if root in done:
                continue
            path, at, deps = [root], {root: 0}, [iter(self.components[root].depends_on)]
            while deps:
                for d in deps[-1]:
                    if d in at and d != path[-1]:
                        yield path, at[d]
                    elif d in self.components and d not in at and d not in done:
                        at[d] = len(path)
                        path.append(d)
                        deps.append(iter(self.components[d].depends_on))
                        break
                else:
                    yield path, None
                    done.add(path[-1])
                    del at[path.pop()]
                    deps.pop()


def did_you_mean(word: str, names: Sequence[str], listed: str = "") -> str:
    """``"; did you mean 'x'?"`` for the name of ``names`` closest to ``word``; else ``"; LISTED: a, b"`` (nothing
    without ``listed`` or ``names``): the end of an unknown name's message."""
    close = difflib.get_close_matches(word, names, n=1)
    return f"; did you mean {close[0]!r}?" if close else (f"; {listed}: {', '.join(names)}" if listed and names else "")


def _parse_hostport(s: str) -> tuple[str, int] | None:
    host, sep, port = s.rpartition(":")
    if not sep or not port.isdigit() or not (0 < int(port) < 65536):
        return None
    return (host.strip("[]") or "127.0.0.1", int(port))


def parse_hostport(s: str) -> tuple[str, int]:
    if (hp := _parse_hostport(s)) is None:
        raise ValueError(f"not host:port: {s!r}")
    return hp
