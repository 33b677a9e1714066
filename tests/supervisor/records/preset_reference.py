"""The per-line reference parser of the progress presets (supervisor/records/presets.py): the semantics its
docstring states, one line at a time, written for clarity. The supervisor reads progress with the
chunk-level matcher (rlsup.supervisor.records.progress); the tests check that the presets read what they should
from real logs with this parser, and that the matcher agrees with it."""

from __future__ import annotations

import re

from rlsup.supervisor.records.presets import Preset, dict_number, number, parse_dict, safe_name


def parse_line(preset: Preset, line: str) -> tuple[int | None, int | None, dict[str, float]]:
    """(step, total, metrics) that ``preset`` reads from one normalised log line; (None, None, {}) if none.
    The first extractor that gives a step (or a total) wins it; metrics of later ones overwrite."""
    step: int | None = None
    total: int | None = None
    metrics: dict[str, float] = {}
    for ex in preset.extractors:
        m = re.search(ex.pattern, line)
        if m is None:
            continue
        if ex.kind == "pydict":
            data = parse_dict(m.group("dict"))
            if data is None:
                continue
            found_step: int | str | None = _read_dict(data, metrics)
            found_total: str | None = None
        else:
            found_step, found_total = _read_groups(m, metrics)
        step = _first(step, found_step)
        total = _first(total, found_total)
        if ex.keys:
            _read_keys(ex.keys, line[m.end() :], metrics)
    return step, total, metrics


def _first(have: int | None, found: int | str | None) -> int | None:
    """The step (or total) already read, else the one just found (as an int)."""
    if have is not None or found is None:
        return have
    return int(found)


def _read_dict(data: dict, metrics: dict[str, float]) -> int | None:
    """A printed dict: its first integer ``step``/``global_step``; every other number into ``metrics``."""
    step: int | None = None
    for k, v in data.items():
        if k in ("step", "global_step") and isinstance(v, int) and not isinstance(v, bool):
            step = v if step is None else step
            continue
        f = dict_number(v)
        if f is not None:
            metrics[safe_name(str(k))] = f
    return step


def _read_groups(m: re.Match[str], metrics: dict[str, float]) -> tuple[str | None, str | None]:
    """A pattern's named groups: (step, total) as written; every other group that is a number into
    ``metrics``."""
    groups = m.groupdict()
    for k, v in groups.items():
        if k in ("step", "total"):
            continue
        f = number(v)
        if f is not None:
            metrics[safe_name(k)] = f
    return groups.get("step"), groups.get("total")


def _read_keys(keys: str, rest: str, metrics: dict[str, float]) -> None:
    """``key value`` pairs after the match (``keys``: a pattern with groups ``key`` and ``value``)."""
    for km in re.finditer(keys, rest):
        f = number(km.group("value"))
        if f is not None:
            metrics[safe_name(km.group("key"))] = f
