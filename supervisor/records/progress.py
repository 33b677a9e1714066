"""Step and metric extraction from log text, and rate/ETA from an injectable clock.

The matcher scans whole chunks of normalised text (one ``finditer`` per extractor per chunk)
instead of testing every line: lines that carry progress are rare next to the rest of the
output, and the scan stays in C.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .presets import PRESETS, Extractor, dict_number, number, parse_dict
from .presets import safe_name as metric_name

# How many observations per chunk get full metric extraction; a flood of step lines in one
# chunk keeps only the newest ones (gauges are latest-wins; ~64 KiB is milliseconds of output).
MAX_OBS_PER_CHUNK = 64

# Full-run metric history (the TUI's charts). Each metric keeps at most HISTORY_POINTS buckets of
# `every` consecutive steps; when a new bucket would exceed that, neighbours merge and `every`
# doubles, so a run of any length costs the same. A point is ``[step, mean, count]`` (~22 bytes of
# JSON): at most HISTORY_METRICS x HISTORY_POINTS points, about 45 KB per component in the state
# and in a snapshot. A progress event (4 Hz) carries only the points that changed in the last
# HISTORY_WINDOW_S seconds (usually one: the current bucket), so it stays small however long the
# run; :func:`merge_history` folds them into the whole history on every side of the protocol.
HISTORY_POINTS = 256
HISTORY_METRICS = 8
HISTORY_WINDOW_S = 1.0


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
        wanted = ([Extractor(pattern)] if pattern else []) + list(PRESETS[preset].extractors if preset else ())
        self._ex = [_Compiled(re.compile(e.pattern, re.MULTILINE), e.kind, re.compile(e.keys) if e.keys else None)
                    for e in wanted]

    def __bool__(self) -> bool:
        return bool(self._ex)

    def scan(self, text: str) -> list[Observation]:
        """Observations in ``text`` (normalised lines joined by ``\\n``), in order of appearance."""
        found = [(m.start(), obs) for ex in self._ex for m in list(ex.regex.finditer(text))[-MAX_OBS_PER_CHUNK:]
                 if (obs := self._observe(ex, m, text)) is not None]
        found.sort(key=lambda x: x[0])
        return [o for _, o in found]

    @staticmethod
    def _observe(ex: _Compiled, m: re.Match[str], text: str) -> Observation | None:
        found = _from_dict(m.group("dict")) if ex.kind == "pydict" else _from_groups(m)
        if found is None:
            return None
        step, total, metrics = found
        if ex.keys is not None:  # the metrics (groups key and value) in the rest of the matched line
            end = text.find("\n", m.end())
            metrics.update({metric_name(km.group("key")): f
                            for km in ex.keys.finditer(text[m.end(): end if end >= 0 else len(text)])
                            if (f := number(km.group("value"))) is not None})
        if step is None and total is None and not metrics:
            return None
        return Observation(step, total, metrics)


def _from_dict(text: str) -> tuple[int | None, None, dict[str, float]] | None:
    """(step, no total, metrics) from a printed Python dict (``{'loss': 0.5, 'step': 3}``); None if it is not one."""
    d = parse_dict(text)
    if d is None:
        return None
    step = None
    metrics: dict[str, float] = {}
    for k, v in d.items():
        if k in ("step", "global_step") and isinstance(v, int) and not isinstance(v, bool):
            step = v
            continue
        f = dict_number(v)
        if f is not None:
            metrics[metric_name(str(k))] = f
    return step, None, metrics


def _from_groups(m: re.Match[str]) -> tuple[int | None, int | None, dict[str, float]]:
    """(step, total, metrics) from a pattern's named groups: ``step``, ``total``, any other a metric."""
    step = total = None
    metrics: dict[str, float] = {}
    for k, v in m.groupdict().items():
        if v is None:
            continue
        if k == "step":
            step = int(float(v))
        elif k == "total":
            total = int(float(v))
        elif (f := number(v)) is not None:
            metrics[metric_name(k)] = f
    return step, total, metrics


def _round(v: float) -> float:
    return float(f"{v:.6g}")


class MetricHistory:
    """One metric against step for the whole run, downsampled into at most :data:`HISTORY_POINTS`
    buckets of ``every`` steps (a power of two). Each bucket keeps its last step, the sum and the
    count of the values seen in it. A step lower than the last bucket's (a resume from a
    checkpoint, a restart from scratch) drops the buckets from there on: the run's history is
    the one that led to the current step."""

    __slots__ = ("every", "steps", "sums", "counts", "touched", "lo", "hi")

    def __init__(self) -> None:
        self.every = 1
        self.steps: list[int] = []
        self.sums: list[float] = []
        self.counts: list[int] = []
        self.touched: list[float] = []  # when each bucket last changed: never decreasing along the list
        self.lo: float | None = None
        self.hi: float | None = None

    def add(self, step: int, value: float, now: float = 0.0) -> None:
        if value != value or value in (float("inf"), float("-inf")):
            return  # NaN/inf: nothing a chart can place
        every, steps = self.every, self.steps
        key = step // every
        if steps and steps[-1] > step:  # a rewind: the buckets from this step on are redone
            cut = bisect_left(steps, key * every)
            del steps[cut:], self.sums[cut:], self.counts[cut:], self.touched[cut:]
        if steps and steps[-1] // every == key:
            steps[-1] = max(steps[-1], step)
            self.sums[-1] += value
            self.counts[-1] += 1
            self.touched[-1] = now
        else:
            steps.append(step)
            self.sums.append(value)
            self.counts.append(1)
            self.touched.append(now)
            if len(steps) > HISTORY_POINTS:
                self._halve(now)
        self.lo = value if self.lo is None else min(self.lo, value)
        self.hi = value if self.hi is None else max(self.hi, value)

    def _halve(self, now: float) -> None:
        self.every *= 2
        self._load(compact_points(self.points(), self.every), now)  # every bucket changed: the next event has all

    def _load(self, pts: Sequence[Sequence[float]], now: float) -> None:
        self.steps = [int(p[0]) for p in pts]  # steps and counts are ints in the float lists
        self.sums = [float(p[1]) * int(p[2]) for p in pts]
        self.counts = [int(p[2]) for p in pts]
        self.touched = [now] * len(pts)

    def points(self, since: float | None = None) -> list[list[float]]:
        """``[[step, mean, count], ...]``: all of them, or those that changed at ``since`` or later
        (a suffix of the list, never empty when there are points)."""
        start = 0
        if since is not None and self.steps:
            start = min(bisect_left(self.touched, since), len(self.steps) - 1)
        return [[self.steps[i], _round(self.sums[i] / self.counts[i]), self.counts[i]]
                for i in range(start, len(self.steps))]

    def wire(self, since: float | None = None) -> dict[str, object]:
        return {"every": self.every, "lo": self.lo, "hi": self.hi, "points": self.points(since)}

    @classmethod
    def from_wire(cls, d: dict[str, object]) -> MetricHistory:
        """The history a previous supervisor recorded (``state.json``), to go on from."""
        h = cls()
        every, points = d.get("every"), d.get("points")
        h.every = max(1, int(every)) if isinstance(every, int | float | str) and every else 1
        h._load([p for p in (points if isinstance(points, list) else [])[-HISTORY_POINTS:]
                 if isinstance(p, list | tuple) and len(p) >= 3], 0.0)
        lo, hi = d.get("lo"), d.get("hi")
        h.lo = lo if isinstance(lo, int | float) else None
        h.hi = hi if isinstance(hi, int | float) else None
        return h


def compact_points(points: list[list[float]], every: int) -> list[list[float]]:
    """Merge ``[step, mean, count]`` points whose steps fall in the same bucket of ``every``
    steps (the last step, the count-weighted mean, the summed count)."""
    out: list[list[float]] = []
    for step, mean, count in points:
        if out and out[-1][0] // every == step // every:
            last = out[-1]
            n = last[2] + count
            last[1] = (last[1] * last[2] + mean * count) / n
            last[0] = max(last[0], step)
            last[2] = n
        else:
            out.append([step, mean, count])
    for p in out:
        p[1] = _round(p[1])
    return out


def merge_history(stored: dict[str, dict[str, object]] | None,
                  delta: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    """Fold a progress event's ``history`` (each metric's newest points, or all of them) into the
    history accumulated so far, as the reducer does on every side of the protocol.

    The points replace every stored point from the first of them on (by bucket), so a repeated
    tail is idempotent, an event lost within the producer's window costs nothing (a longer gap
    leaves a hole until the next snapshot), and a rewind (resume) drops what came after it. A coarser ``every`` than stored merges the stored points the way the
    producer did, so both sides keep the same buckets."""
    out = stored if stored is not None else {}
    for metric, d in delta.items():
        every = int(d.get("every") or 1)  # type: ignore[call-overload]
        h = out.setdefault(metric, {"every": every, "points": []})
        pts: list[list[float]] = h["points"]  # type: ignore[assignment]
        if every > int(h.get("every") or 1):  # type: ignore[call-overload]
            pts = h["points"] = compact_points(pts, every)
        new = d.get("points")
        tail = [list(p) for p in new if isinstance(p, list | tuple)] if isinstance(new, list) else []
        if tail:
            del pts[bisect_left(pts, tail[0][0] // every * every, key=lambda p: p[0]):]
            pts.extend(tail)
            if len(pts) > 2 * HISTORY_POINTS:  # a producer that never compacts cannot grow this
                pts = h["points"] = compact_points(pts, every * 2)
                every *= 2
        h["every"] = every
        h["lo"], h["hi"] = d.get("lo"), d.get("hi")
    return out


# A rate older than this many step intervals (and DECAY_MIN_S) is no longer the component's speed:
# with no new step it decays as 1/idle, and after FORGET_S it is not shown at all (the stall
# flag, where configured, says the rest).
DECAY_INTERVALS = 3.0
DECAY_MIN_S = 5.0
FORGET_S = 60.0


def current_rate(rate: float | None, eta_s: float | None, last_step_at: float | None, step: int | None,
                 total: int | None, now: float) -> tuple[float | None, float | None]:
    """(rate, ETA) as they stand at ``now`` when no step came since ``last_step_at`` (wall time):
    unchanged within a few step intervals; then at most one step per idle time, the ETA growing
    to match; none at all after :data:`FORGET_S` without a step. Pure: clients run it on every
    repaint, so a hung trainer's "3.27/s ETA 49s" does not stand for minutes."""
    if rate is None or rate <= 0 or last_step_at is None:
        return rate, eta_s
    idle = max(0.0, now - last_step_at)
    if idle <= max(DECAY_INTERVALS / rate, DECAY_MIN_S):
        return rate, eta_s
    if idle >= max(FORGET_S, 10.0 / rate):
        return None, None
    slow = min(rate, 1.0 / idle)
    eta = max(0, total - step) / slow if total is not None and step is not None else None
    return slow, eta


@dataclass
class ProgressTracker:
    """Latest step, total, metrics, and a rate over recent step changes.

    Pure: every method takes ``now`` from the caller's clock. A lower step than the last one
    (a resume from a checkpoint, or a fresh start) restarts the rate window. The window holds one
    point per read (``now``, the latest step), never a step whose time is not known: the steps a
    read brings come out over the time since the read before it, and a backlog's over a time
    nobody saw (see :meth:`observe_all`).
    """

    total: int | None = None
    window: int = 30
    history_len: int = 300
    step: int | None = None
    last_change_at: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    history: dict[str, deque[tuple[int, float]]] = field(default_factory=dict)
    full_history: dict[str, MetricHistory] = field(default_factory=dict)
    _points: deque[tuple[float, int]] = field(default_factory=deque)

    def observe_all(self, obs: Iterable[Observation], now: float) -> bool:
        """Observations read together at ``now``, in order; True if anything changed. Their steps count but
        make no point of the rate window: the read saw them at once, so ``now`` is the time of none but the
        last, and of none at all for a backlog written at times unknown (what a supervisor taking over catches
        up on, a read that left more waiting). The reader gives a read its one point (:meth:`stamp`)."""
        return any([self._apply(o, now) for o in obs])  # (a list: every observation is applied)

    def stamp(self, now: float) -> None:
        """The current step joins the rate window at ``now``: the time it was read, the end of the read that
        brought it, when that read found the output written since the read before."""
        if self.step is not None:
            self._points.append((now, self.step))
            while len(self._points) > self.window:
                self._points.popleft()

    def observe(self, o: Observation, now: float) -> bool:
        """One observation read as it came: it counts and, a new step, makes a point at ``now``."""
        step = self.step
        changed = self.observe_all((o,), now)
        if self.step != step:
            self.stamp(now)
        return changed

    def _apply(self, o: Observation, now: float) -> bool:
        changed = False
        if o.total is not None and o.total != self.total:
            self.total = o.total
            changed = True
        if o.step is not None and o.step != self.step:
            self._new_step(o.step, now)
            changed = True
        if o.metrics:
            self._new_metrics(o.metrics, now)
            changed = True
        return changed

    def _new_step(self, step: int, now: float) -> None:
        """A step other than the last: a lower one (a resume, a fresh start) restarts the rate window."""
        if self.step is not None and step < self.step:
            self._points.clear()
        self.step = step
        self.last_change_at = now

    def _new_metrics(self, metrics: dict[str, float], now: float) -> None:
        """Metric values at the current step: the latest, the recent series, and (once there is a step)
        the whole run's history of the first :data:`HISTORY_METRICS` metrics."""
        self.metrics.update(metrics)
        at = self.step if self.step is not None else -1
        for k, v in metrics.items():
            h = self.history.setdefault(k, deque(maxlen=self.history_len))
            if h and h[-1][0] == at:
                h.pop()
            h.append((at, v))
            if self.step is not None:
                fh = self.full_history.get(k)
                if fh is None and len(self.full_history) < HISTORY_METRICS:
                    fh = self.full_history[k] = MetricHistory()
                if fh is not None:
                    fh.add(self.step, v, now)

    def seed_history(self, wire: dict[str, dict[str, object]]) -> None:
        """Go on with the metric history of the run so far (a resumed, continued or adopted run):
        the charts then show the whole run, not only what this supervisor saw."""
        for k, d in list(wire.items())[:HISTORY_METRICS]:
            if k not in self.full_history and isinstance(d, dict):
                try:
                    self.full_history[k] = MetricHistory.from_wire(d)
                except (TypeError, ValueError):
                    continue

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
            # Only the points that changed in the last HISTORY_WINDOW_S (a lost event or two is
            # covered by the next); the reducer (state.apply -> merge_history) accumulates the
            # whole run, so a 4 Hz event stays small whatever the run's length.
            "history": {k: h.wire(now - HISTORY_WINDOW_S) for k, h in self.full_history.items()},
        }

