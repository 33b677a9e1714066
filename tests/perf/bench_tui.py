"""TUI under a log flood (issue 4): three components each writing 10,000 lines/s.

    python tests/perf/bench_tui.py [--seconds 60] [--rate 10000] [--components 3]

The real app runs headless (Textual's test driver renders every frame, nothing is drawn) over the
fake session from tests/tui, and lines are fed through the session listener at the real rate, in
the batches the supervisor pushes (one ``logs`` message per component per 50 ms). Measured:

- key latency: once a second a key event for ``f`` is posted as the terminal driver posts it;
  time until the follow flag has flipped (polled every millisecond);
- display lag: four times a second, how long the oldest line not yet in its pane has waited
  (0 when every fed line is displayed);
- RSS of the process (peak and at the end) and its CPU time over the run in % of one core.
  The feeder runs in the same process, so CPU is an upper bound for the TUI itself.

Prints one JSON object. Targets from the issue: key p99 < 100 ms, lag < ~1 s, bounded memory,
CPU well under 100%.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import statistics
import sys
import time
from pathlib import Path

import psutil
from textual import events

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tui"))

import fake  # noqa: E402  (tests/tui/fake.py: the session the Pilot tests use)

from rlsup.tui.app import RlsupApp  # noqa: E402

BATCH_S = 0.05


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def bench(seconds: float, rate: int, n_components: int, size: tuple[int, int]) -> dict:
    snapshot = fake.normal_run(gpus=8, backend="fake")
    names = list(snapshot["state"]["components"])[:n_components]
    app = RlsupApp(lambda listener: fake.FakeSession(listener, snapshot), clock=lambda: fake.NOW,
                   timefmt=fake.utc_hms)
    proc = psutil.Process()
    pad = "x" * 70
    line_pool = [f"{i:06d} INFO worker step progress {pad}" for i in range(rate)]  # ~100 bytes
    fed: dict[str, collections.deque[tuple[int, float]]] = {n: collections.deque() for n in names}
    sent = dict.fromkeys(names, 0)
    lags: list[float] = []
    keys: list[float] = []
    rss_peak = 0

    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.3)
        screen = app.main
        base = {n: screen.panes[n].view.dropped + len(screen.panes[n].view.lines) for n in names}
        cpu0 = sum(proc.cpu_times()[:2])
        t0 = time.monotonic()
        stop = t0 + seconds

        async def feeder() -> None:
            while (now := time.monotonic()) < stop:
                due = int((now - t0) * rate)
                for n in names:
                    k = due - sent[n]
                    if k > 0:
                        start = sent[n] % rate
                        lines = (line_pool[start:start + k] if start + k <= rate
                                 else line_pool[start:] + line_pool[: start + k - rate])
                        app.listener.on_logs(n, base[n] + sent[n], lines)
                        sent[n] += k
                        fed[n].append((sent[n], now))
                await asyncio.sleep(BATCH_S)

        async def sampler() -> None:
            nonlocal rss_peak
            while time.monotonic() < stop:
                await asyncio.sleep(0.25)
                now = time.monotonic()
                worst = 0.0
                for n in names:
                    v = screen.panes[n].view
                    shown = v.dropped + len(v.lines) - base[n]
                    q = fed[n]
                    while q and q[0][0] <= shown:
                        q.popleft()
                    if q:  # the oldest batch not fully displayed has waited this long
                        worst = max(worst, now - q[0][1])
                lags.append(worst)
                rss_peak = max(rss_peak, proc.memory_info().rss)

        async def presser() -> None:
            while time.monotonic() + 1.0 < stop:
                await asyncio.sleep(1.0)
                view = screen.selected_pane().view
                before = view.follow
                key = events.Key("f", "f")  # what the terminal driver posts for a key press
                key.set_sender(app)
                t = time.perf_counter()
                app._driver.send_message(key)
                while view.follow == before and time.perf_counter() - t < 5:
                    await asyncio.sleep(0.001)
                keys.append(time.perf_counter() - t)

        await asyncio.gather(feeder(), sampler(), presser())
        wall = time.monotonic() - t0
        cpu = sum(proc.cpu_times()[:2]) - cpu0
        await pilot.pause(0.2)
        shown = {n: screen.panes[n].view.dropped + len(screen.panes[n].view.lines) - base[n] for n in names}
        max_lines = max(len(screen.panes[n].view.lines) for n in names)
        writes = {n: screen.panes[n].view.writes for n in names}
        flushes = screen.flushes

    return {
        "seconds": round(wall, 2), "components": len(names), "rate_per_component": rate,
        "lines_fed": sum(sent.values()), "lines_displayed": sum(shown.values()),
        "key_latency_ms": {"n": len(keys), "p50": round(1000 * statistics.median(keys), 1) if keys else None,
                           "p99": round(1000 * pct(keys, 0.99), 1), "max": round(1000 * max(keys, default=0), 1)},
        "display_lag_s": {"p50": round(statistics.median(lags), 3) if lags else None,
                          "p99": round(pct(lags, 0.99), 3), "max": round(max(lags, default=0), 3)},
        "rss_mb": {"peak": round(rss_peak / 2**20, 1), "end": round(proc.memory_info().rss / 2**20, 1)},
        "cpu_pct_of_one_core": round(100 * cpu / wall, 1),
        "pane_lines_max": max_lines, "pane_writes": writes, "flush_ticks": flushes,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--rate", type=int, default=10_000, help="lines per second per component")
    p.add_argument("--components", type=int, default=3)
    p.add_argument("--size", default="200x50", help="terminal size WxH")
    a = p.parse_args()
    w, h = (int(x) for x in a.size.lower().split("x"))
    print(json.dumps(asyncio.run(bench(a.seconds, a.rate, a.components, (w, h))), indent=2))


if __name__ == "__main__":
    main()
