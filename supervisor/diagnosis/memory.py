"""memory_growth: a component's host RSS or GPU memory climbing steadily with its steps.

Pure: the caller feeds samples (time, step, megabytes) and gets a :class:`~.patterns.Flag` once
per episode. A leak shows as memory that grows *linearly with steps*: the detector fits a
least-squares line of memory against step over a sliding time window and flags a steady, large climb
that goes on to the end (:meth:`MemoryGrowthDetector._steady_growth`). A one-off jump (a cache
warming up, a bigger batch) fits a line badly and is not flagged.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

from .patterns import Flag

_KINDS = {"rss": "host RSS", "gpu": "GPU memory"}


@dataclass(frozen=True)
class _Sample:
    ts: float
    step: int
    mb: float


@dataclass(frozen=True)
class Fit:
    slope: float  # MB per step
    r2: float
    growth_mb: float  # fitted growth from the first to the last step of the window
    rising_fraction: float  # share of consecutive samples that did not go down


def fit_growth(points: list[tuple[float, float]]) -> Fit | None:
    """Least-squares fit of ``y`` (MB) against ``x`` (step); None when x does not vary."""
    if len(points) < 2:
        return None
    xs, ys = zip(*points, strict=True)
    try:
        slope = statistics.linear_regression(xs, ys).slope
    except statistics.StatisticsError:  # x does not vary
        return None
    r2 = statistics.correlation(xs, ys) ** 2 if len(set(ys)) > 1 else 0.0
    growth = slope * (max(xs) - min(xs))
    # Small dips (allocator noise) are tolerated: "not down" means within 1 % of the previous.
    rising = sum(1 for a, b in zip(points, points[1:], strict=False) if b[1] >= a[1] * 0.99) / (len(points) - 1)
    return Fit(slope, r2, growth, rising)


class MemoryGrowthDetector:
    """Watches one component's memory over steps; flags a steady climb once per episode.

    ``observe`` is called with each new sample (typically once per step or per GPU sample);
    samples older than ``window_s`` (by their own ``ts``) are dropped. An episode ends when the
    memory falls back below the level at which it was flagged minus half the growth (the
    process restarted or freed it); a new attempt gets a new detector (run/resources.py).
    ``rss_limit_mb``/``gpu_limit_mb`` (host RAM, GPU total) let the message say when the
    limit will be hit at the current rate.
    """

    min_fraction = 0.2  # growth relative to the first level
    min_r2 = 0.8
    min_rising = 0.7

    def __init__(self, *, min_samples: int = 8, min_growth_mb: float = 512.0, window_s: float = 3600.0,
                 rss_limit_mb: float | None = None, gpu_limit_mb: float | None = None):
        self.min_samples = min_samples
        self.min_growth_mb = min_growth_mb
        self.window_s = window_s
        self.limits = {"rss": rss_limit_mb, "gpu": gpu_limit_mb}
        self._series: dict[str, deque[_Sample]] = {k: deque(maxlen=512) for k in _KINDS}
        # kind -> memory level when flagged (the episode is open while this is set)
        self._flagged: dict[str, float] = {}

    def observe(self, ts: float, step: int | None, rss_mb: float | None, gpu_mb: float | None = None) -> Flag | None:
        """Add one sample; a ``memory_growth`` flag the first time growth qualifies, else None."""
        if step is None:
            return None
        flags = [self._observe_one(kind, ts, int(step), float(mb))  # (each kind is observed)
                 for kind, mb in (("rss", rss_mb), ("gpu", gpu_mb)) if mb is not None]
        return next((f for f in flags if f is not None), None)

    def _observe_one(self, kind: str, ts: float, step: int, mb: float) -> Flag | None:
        series = self._series[kind]
        self._record(kind, series, _Sample(ts, step, mb))
        if kind in self._flagged:  # a flagged growth: once memory came back down, the episode is over
            peak = self._flagged[kind]
            base = series[0].mb if series else peak
            if mb < peak - max(self.min_growth_mb, (peak - base)) / 2:
                del self._flagged[kind]
                while len(series) > 1:  # and this is the new baseline
                    series.popleft()
            return None
        found = self._steady_growth(series, mb)
        if found is None:
            return None
        fit, first = found
        self._flagged[kind] = mb
        return self._flag(kind, list(series), fit, first)

    def _record(self, kind: str, series: deque[_Sample], sample: _Sample) -> None:
        """Add a sample to the window (one per step, its peak), dropping samples older than it."""
        if series and sample.step < series[-1].step:
            # Resumed from an earlier checkpoint: a new process, a new baseline.
            series.clear()
            self._flagged.pop(kind, None)
        if series and sample.step == series[-1].step:
            series[-1] = _Sample(sample.ts, sample.step, max(sample.mb, series[-1].mb))
        else:
            series.append(sample)
        while series and series[0].ts < sample.ts - self.window_s:
            series.popleft()

    def _steady_growth(self, series: deque[_Sample], mb: float) -> tuple[Fit, float] | None:
        """(the fit, the first level) where the window grew steadily enough to be a leak, still growing at the end."""
        if len(series) < self.min_samples:
            return None
        fit = fit_growth([(float(s.step), s.mb) for s in series])
        if fit is None or fit.slope <= 0:
            return None
        first = min(s.mb for s in list(series)[: max(1, len(series) // 4)])
        growth = min(fit.growth_mb, mb - first)  # steady (r², rising steps), large absolutely and relative to the start
        if (fit.r2 < self.min_r2 or fit.rising_fraction < self.min_rising or growth < self.min_growth_mb
                or first <= 0 or growth / first < self.min_fraction):
            return None
        # Still growing at the end: a cache that filled and then plateaued is not a leak.
        recent = fit_growth([(float(s.step), s.mb) for s in list(series)[-max(3, len(series) // 3):]])
        if recent is None or recent.slope < 0.5 * fit.slope:
            return None
        return fit, first

    def _flag(self, kind: str, series: list[_Sample], fit: Fit, first: float) -> Flag:
        a, b = series[0], series[-1]
        what = _KINDS[kind]
        msg = (f"{what} grew steadily from {_mb(first)} to {_mb(b.mb)} over steps {a.step}-{b.step} "
               f"(+{fit.slope:.1f} MB/step, r²={fit.r2:.2f}, {b.ts - a.ts:.0f} s)")
        limit = self.limits.get(kind)
        if limit and fit.slope > 0 and b.mb < limit:
            steps_left = (limit - b.mb) / fit.slope
            msg += f"; at this rate it reaches the {_mb(limit)} limit in ~{steps_left:.0f} steps"
        msg += "; likely a leak (tensors kept across steps, growing caches or lists)"
        n = len(series)
        picks = sorted({round(i * (n - 1) / 5) for i in range(6)})
        evidence = tuple(f"step {series[i].step}: {what} {_mb(series[i].mb)}" for i in picks)
        return Flag("memory_growth", msg, evidence, False)


def _mb(mb: float) -> str:
    return f"{mb / 1024:.1f} GiB" if abs(mb) >= 1024 else f"{mb:.0f} MB"
