"""Value types of the diagnosis engine: what an exit was, and what the host saw."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

CATEGORIES: tuple[str, ...] = (
    "cuda_oom",
    "host_oom",
    "killed",
    "segfault",
    "nccl_timeout",
    "nccl_error",
    "distributed_timeout",
    "connection_refused",
    "inference_engine_dead",
    "inference_memory_config",
    "ray_actor_died",
    "watchdog_timeout",
    "cuda_error",
    "fatal_python_error",
    "disk_full",
    "port_in_use",
    "python_exception",
    "unknown",
    "none",
)


def short_location(loc: str | None) -> str:
    """``train.py:12`` for ``/src/train.py:12`` (the file's name and its line); "" when unknown."""
    if not loc:
        return ""
    path, _, line = loc.rpartition(":")
    return f"{os.path.basename(path)}:{line}" if path else loc


@dataclass(frozen=True)
class Diagnosis:
    """What killed a component, as far as its exit status and log tail tell.

    ``category`` is one of :data:`CATEGORIES`; ``location`` is ``file:line`` of the innermost frame
    in the user's own code (never site-packages, the standard library or torch); where no frame of
    the traceback is the user's, the innermost frame, with ``library_location`` True; None when
    the log shows no frame. ``hint`` says what to do next, in one sentence ("" when nothing applies).
    """

    category: str
    summary: str
    exception: str | None = None
    location: str | None = None
    step: int | None = None
    evidence: tuple[str, ...] = ()
    library_location: bool = False
    hint: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    keys: tuple[str, ...] | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        known = {k: getattr(self, k) for k in KEYS} | {"evidence": list(self.evidence)}
        if self.keys is None:
            return {**known, **self.extra}
        return {k: known[k] if k in known else self.extra.get(k) for k in self.keys}

    @property
    def exception_type(self) -> str | None:
        """The exception's type as printed (``torch.OutOfMemoryError``), without its message."""
        return (self.exception.split(":", 1)[0].strip() or None) if self.exception else None

    def what(self) -> str:
        """``AttributeError at train.py:12`` / ``cuda_oom``: the failure in a few words."""
        what = self.exception_type or self.category or "unknown failure"
        loc = short_location(self.location)
        return f"{what} at {loc}" if loc else what

    def signature(self) -> tuple[str, str | None, str | None]:
        """(category, exception type, location): equal signatures on consecutive attempts mean
        the same deterministic failure."""
        return (self.category, self.exception_type, self.location)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Diagnosis:
        """From the dict of an event (a journal line may be damaged: a value of the wrong type is read
        as absent, never passed on), remembering its keys and what it had beyond the known ones."""
        exc, loc, step, evidence = (data.get(k) for k in ("exception", "location", "step", "evidence"))
        return cls(
            category=str(data.get("category") or "unknown"),
            summary=str(data.get("summary") or ""),
            exception=exc if isinstance(exc, str) else None,
            location=loc if isinstance(loc, str) else None,
            step=step if isinstance(step, int) and not isinstance(step, bool) else None,
            evidence=tuple(str(x) for x in evidence) if isinstance(evidence, list | tuple) else (),
            library_location=bool(data.get("library_location", False)),
            hint=str(data.get("hint") or ""),
            extra={k: v for k, v in data.items() if k not in KEYS},
            keys=tuple(data),
        )


KEYS: tuple[str, ...] = tuple(f.name for f in fields(Diagnosis) if f.name not in ("extra", "keys"))


@dataclass(frozen=True)
class HostEvidence:
    """What the host (kernel, cgroup) says about a process's death.

    ``oom_killed_pids``: pids the kernel OOM killer named; ``kernel_lines``: those kernel lines;
    ``cgroup_oom_kills``: the cgroup v2 ``memory.events`` oom_kill counter, None when unreadable.
    """

    kernel_lines: tuple[str, ...] = ()
    oom_killed_pids: frozenset[int] = field(default_factory=frozenset)
    cgroup_oom_kills: int | None = None

    @property
    def empty(self) -> bool:
        return not self.kernel_lines and self.cgroup_oom_kills is None
