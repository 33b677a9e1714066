"""Diagnosis: what killed a component, and which crash patterns repeat across its attempts.

Headless and pure (no textual/rich, no clock); :func:`read_host_evidence` is the only function
that touches the host, best effort.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..records.diagnosis import CATEGORIES, Diagnosis, HostEvidence
    from .dependency import DependencyTracker, dependency_down
    from .engine import diagnose, normalize_signal
    from .host import parse_kernel_log, parse_memory_events, read_host_evidence
    from .memory import MemoryGrowthDetector
    from .offline import diagnose_command, diagnose_file
    from .patterns import AttemptRecord, Flag, detect_attempt_patterns
    from .run import diagnose_run, format_run

# Imported at once: the function `normalize` shares its name with its module, which would otherwise
# take its place here as soon as another module imported it (the start-up needs it anyway).
from .normalize import clean_line, normalize, strip_prefixes

# Each other name is imported from its module when first asked for (PEP 562): `rlsup up` needs a few of them to
# start its components, and the rest (the exit diagnosis, its patterns and regexes) only once one exits.
_WHERE = {name: mod for mod, names in (
    ("..records.diagnosis", "CATEGORIES Diagnosis HostEvidence"),
    (".dependency", "DependencyTracker dependency_down"),
    (".engine", "diagnose normalize_signal"),
    (".host", "parse_kernel_log parse_memory_events read_host_evidence"),
    (".memory", "MemoryGrowthDetector"),
    (".offline", "diagnose_command diagnose_file"),
    (".patterns", "AttemptRecord Flag detect_attempt_patterns"),
    (".run", "diagnose_run format_run"),
) for name in names.split()}


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(mod, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "CATEGORIES",
    "DependencyTracker",
    "MemoryGrowthDetector",
    "dependency_down",
    "AttemptRecord",
    "Diagnosis",
    "Flag",
    "HostEvidence",
    "clean_line",
    "detect_attempt_patterns",
    "diagnose",
    "diagnose_command",
    "diagnose_file",
    "diagnose_run",
    "format_run",
    "normalize",
    "normalize_signal",
    "parse_kernel_log",
    "parse_memory_events",
    "read_host_evidence",
    "strip_prefixes",
]
