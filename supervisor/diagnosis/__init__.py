"""Diagnosis: what killed a component, and which crash patterns repeat across its attempts.

Headless and pure (no textual/rich, no clock); :func:`read_host_evidence` is the only function
that touches the host, best effort.
"""

from __future__ import annotations

from ..records.diagnosis import CATEGORIES, Diagnosis, HostEvidence
from .dependency import (
    CONNECTION_CATEGORIES,
    DependencyFlag,
    DependencyTracker,
    connection_errors,
    dependency_down,
)
from .engine import diagnose, find_step, normalize_signal
from .host import parse_kernel_log, parse_memory_events, read_host_evidence
from .memory import MemoryGrowthDetector, fit_growth
from .normalize import clean_line, normalize, strip_prefixes
from .offline import diagnose_command, diagnose_file, format_human, read_tail
from .patterns import AttemptRecord, Flag, detect_attempt_patterns
from .run import RunDiagnosis, RunFailure, RunSymptom, diagnose_run, format_run, is_run_dir

__all__ = [
    "CATEGORIES",
    "CONNECTION_CATEGORIES",
    "DependencyFlag",
    "DependencyTracker",
    "MemoryGrowthDetector",
    "RunDiagnosis",
    "RunFailure",
    "RunSymptom",
    "connection_errors",
    "dependency_down",
    "fit_growth",
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
    "is_run_dir",
    "find_step",
    "format_human",
    "normalize",
    "normalize_signal",
    "parse_kernel_log",
    "parse_memory_events",
    "read_host_evidence",
    "read_tail",
    "strip_prefixes",
]
