"""Step and metric extraction from log text, and rate/ETA from an injectable clock.

The matcher scans whole chunks of normalised text (one ``finditer`` per extractor per chunk)
instead of testing every line: lines that carry progress are rare next to the rest of the
output, and the scan stays in C.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from .presets import dict_number, number, parse_dict
from .presets import safe_name as metric_name

# How many observations per chunk get full metric extraction; a flood of step lines in one
# chunk keeps only the newest ones (gauges are latest-wins; ~64 KiB is milliseconds of output).
MAX_OBS_PER_CHUNK = 64


def preset_names() -> tuple[str, ...]:
    from .presets import PRESETS

    return tuple(PRESETS)




@dataclass(frozen=True)
class Observation:
    step: int | None
    total: int | None
    metrics: dict[str, float]


@dataclass(frozen=True)
class _Compiled:
    regex: re.Pattern[str]
    kind: str  # "regex" | "pydict"
    keys: re.Pattern[str] | None


class ProgressMatcher:
    """Compiled extractors for one component (a preset, a custom pattern, or both)."""

    def __init__(self, pattern: str | None = None, preset: str | None = None):
        self._ex: list[_Compiled] = []
        if pattern:
            self._ex.append(_Compiled(re.compile(pattern, re.MULTILINE), "regex", None))
        if preset:
            from .presets import PRESETS

            for e in PRESETS[preset].extractors:
                keys = re.compile(e.keys) if e.keys else None
                self._ex.append(_Compiled(re.compile(e.pattern, re.MULTILINE), e.kind, keys))

    def __bool__(self) -> bool:
        return bool(self._ex)

    def scan(self, text: str) -> list[Observation]:
        """Observations in ``text`` (normalised lines joined by ``\\n``), in order of appearance."""
        found: list[tuple[int, Observation]] = []
        for ex in self._ex:
            matches = list(ex.regex.finditer(text))
            if not matches:
                continue
            for m in matches[-MAX_OBS_PER_CHUNK:]:
                obs = self._observe(ex, m, text)
                if obs is not None:
                    found.append((m.start(), obs))
        if len(found) > 1:
            found.sort(key=lambda x: x[0])
        return [o for _, o in found]

    @staticmethod
    def _observe(ex: _Compiled, m: re.Match[str], text: str) -> Observation | None:
        step = total = None
        metrics: dict[str, float] = {}
        if ex.kind == "pydict":
            d = parse_dict(m.group("dict"))
            if d is None:
                return None
            for k, v in d.items():
                if k in ("step", "global_step") and isinstance(v, int) and not isinstance(v, bool):
                    step = v
                    continue
                f = dict_number(v)
                if f is not None:
                    metrics[metric_name(str(k))] = f
        else:
            for k, v in m.groupdict().items():
                if v is None:
                    continue
                if k == "step":
                    step = int(float(v))
                elif k == "total":
                    total = int(float(v))
                elif (f := number(v)) is not None:
                    metrics[metric_name(k)] = f
        if ex.keys is not None:
            end = text.find("\n", m.end())
            rest = text[m.end(): end if end >= 0 else len(text)]
            for km in ex.keys.finditer(rest):
                f = number(km.group("value"))
                if f is not None:
                    metrics[metric_name(km.group("key"))] = f
        if step is None and total is None and not metrics:
            return None
        return Observation(step, total, metrics)


@dataclass
class ProgressTracker:
    """Latest step, total, metrics, and a rate over recent step changes.

    Pure: every method takes ``now`` from the caller's clock. A lower step than the last one
    (a resume from a checkpoint, or a fresh start) restarts the rate window.
    """

    total: int | None = None
    window: int = 30
    history_len: int = 300
    step: int | None = None
    last_change_at: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    history: dict[str, deque[tuple[int, float]]] = field(default_factory=dict)
    _points: deque[tuple[float, int]] = field(default_factory=deque)

    def observe_all(self, obs: Iterable[Observation], now: float) -> bool:
        changed = False
        for o in obs:
            changed |= self.observe(o, now)
        return changed

    def observe(self, o: Observation, now: float) -> bool:
        changed = False
        if o.total is not None and o.total != self.total:
            self.total = o.total
            changed = True
        if o.step is not None and o.step != self.step:
            if self.step is not None and o.step < self.step:
                self._points.clear()
            self.step = o.step
            self.last_change_at = now
            self._points.append((now, o.step))
            while len(self._points) > self.window:
                self._points.popleft()
            changed = True
        if o.metrics:
            self.metrics.update(o.metrics)
            at = self.step if self.step is not None else -1
            for k, v in o.metrics.items():
                h = self.history.get(k)
                if h is None:
                    h = self.history[k] = deque(maxlen=self.history_len)
                if h and h[-1][0] == at:
                    h[-1] = (at, v)
                else:
                    h.append((at, v))
            changed = True
        return changed

    def reset_to(self, step: int | None, now: float) -> None:
        """A new attempt begins (``step`` is the resumed step, or None for a fresh start)."""
        self._points.clear()
        self.step = step
        self.last_change_at = now
        if step is not None:
            self._points.append((now, step))

    @property
    def rate(self) -> float | None:
        """Steps per second over the recent window, or None with fewer than two step changes."""
        if len(self._points) < 2:
            return None
        (t0, s0), (t1, s1) = self._points[0], self._points[-1]
        if t1 <= t0 or s1 <= s0:
            return None
        return (s1 - s0) / (t1 - t0)

    def eta_s(self, now: float | None = None) -> float | None:
        rate = self.rate
        if rate is None or self.total is None or self.step is None:
            return None
        remaining = max(0, self.total - self.step) / rate
        if now is not None and self.last_change_at is not None:
            # Time already spent on the current step counts against the estimate.
            remaining = max(0.0, remaining - (now - self.last_change_at))
        return remaining

    def snapshot(self, now: float, metric: str | None = None) -> dict[str, object]:
        chosen = metric or next((m for m in ("reward", "loss") if m in self.metrics), None) or next(
            iter(self.metrics), None)
        return {
            "step": self.step,
            "total": self.total,
            "rate": self.rate,
            "eta_s": self.eta_s(now),
            "metrics": dict(self.metrics),
            "metric": chosen,
            "series": [v for _, v in self.history.get(chosen, ())][-120:] if chosen else [],
            "last_step_at": self.last_change_at,
        }

