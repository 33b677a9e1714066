"""The run's state as Prometheus metrics (opt-in, ``metrics:`` in the config; docs/metrics.md).

A collector that reads the supervisor's own folded state on each scrape (no second bookkeeping),
served by prometheus_client's thread server: the scrape's thread takes a snapshot of the state between
two turns of the run's loop (bounded wait), and a failed scrape cannot touch the run.
"""

from __future__ import annotations

import re
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from ..records.state import STATES


def metric_name(key: str) -> str:
    """A parsed metric's key as a Prometheus name: ``rlsup_metric_<key>`` with [a-z0-9_] only."""
    return "rlsup_metric_" + re.sub(r"[^a-zA-Z0-9_]", "_", key).strip("_").lower()


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _component(n: str, c: dict[str, Any], g: dict[str, GaugeMetricFamily],
               parsed: dict[str, GaugeMetricFamily]) -> None:
    ex = c.get("last_exit") or {}
    code = _num(ex.get("exit_code"))
    if code is None and ex.get("signal") in signal.Signals.__members__:  # the journal names it: SIGKILL
        code = -float(signal.Signals[ex["signal"]])
    res = c.get("resources") or {}
    mb = 1024.0 * 1024.0
    values = {
        "up_seconds": _num(c.get("uptime_s")) or 0.0, "last_exit_code": code, "step": _num(c.get("step")),
        "total_steps": _num(c.get("total")), "steps_per_second": _num(c.get("rate")),
        "eta_seconds": _num(c.get("eta_s")),
        "rss_bytes": None if _num(res.get("rss_mb")) is None else float(res["rss_mb"]) * mb,
        "gpu_memory_bytes": None if _num(res.get("gpu_mb")) is None else float(res["gpu_mb"]) * mb,
        "cpu_ratio": None if _num(res.get("cpu_pct")) is None else float(res["cpu_pct"]) / 100.0,
        "log_bytes": _num((c.get("log") or {}).get("offset")),
    }
    for k, v in values.items():
        if v is not None:
            g[k].add_metric([n], v)
    for key, v in (c.get("metrics") or {}).items():
        if _num(v) is not None:
            name = metric_name(key)
            parsed.setdefault(name, GaugeMetricFamily(name, f"Latest '{key}' parsed from the output",
                                                      labels=["component"])).add_metric([n], float(v))


def families(state: dict[str, Any]) -> Iterator[Metric]:
    """Every metric of a folded state (``records.state.view`` output), in a stable order."""
    comps: dict[str, dict[str, Any]] = state.get("components") or {}
    st = GaugeMetricFamily("rlsup_component_state", "1 for the component's current state",
                           labels=["component", "state"])
    attempts = CounterMetricFamily("rlsup_component_attempts", "Attempts started", labels=["component"])
    restarts = CounterMetricFamily("rlsup_component_restarts", "Restarts after a failure", labels=["component"])
    flags = GaugeMetricFamily("rlsup_component_flags", "Flags raised and not cleared, by type",
                              labels=["component", "type"])
    g = {k: GaugeMetricFamily(f"rlsup_component_{k}", h, labels=["component"]) for k, h in (
        ("up_seconds", "Seconds since the current attempt started (0 when not running)"),
        ("last_exit_code", "Exit code of the last attempt (-signal when killed by one)"),
        ("step", "Latest training step parsed from the output"),
        ("total_steps", "Total steps parsed from the output"),
        ("steps_per_second", "Current step rate"),
        ("eta_seconds", "Estimated seconds to the total"),
        ("rss_bytes", "Resident memory of the component's processes"),
        ("gpu_memory_bytes", "GPU memory used by the component's processes"),
        ("cpu_ratio", "CPU use of the component's processes (1 = one core)"),
        ("log_bytes", "Bytes of the current log file read so far"),
    )}
    parsed: dict[str, GaugeMetricFamily] = {}
    for n, c in comps.items():
        for s in STATES:
            st.add_metric([n, s], 1.0 if c.get("state") == s else 0.0)
        attempts.add_metric([n], float(c.get("attempt") or 0))
        restarts.add_metric([n], float(c.get("restarts") or 0))
        for t, k in sorted(Counter(str(f.get("type")) for f in c.get("flags") or []).items()):
            flags.add_metric([n, t], float(k))
        _component(n, c, g, parsed)
    yield from (st, attempts, restarts, flags, *g.values(), *parsed.values())
    yield from _gpus(state.get("gpus") or [])


def _gpus(gpus: list[dict[str, Any]]) -> Iterator[Metric]:
    mem = GaugeMetricFamily("rlsup_gpu_memory_used_bytes", "GPU memory used", labels=["gpu"])
    total = GaugeMetricFamily("rlsup_gpu_memory_total_bytes", "GPU memory", labels=["gpu"])
    util = GaugeMetricFamily("rlsup_gpu_utilization_ratio", "GPU utilisation (1 = busy)", labels=["gpu"])
    for gpu in gpus:
        i = str(gpu.get("index"))
        for fam, v, scale in ((mem, gpu.get("mem_used_mb"), 1024.0 * 1024.0),
                              (total, gpu.get("mem_total_mb"), 1024.0 * 1024.0), (util, gpu.get("util_pct"), 0.01)):
            if (x := _num(v)) is not None:
                fam.add_metric([i], x * scale)
    yield from (mem, total, util)


class StateCollector(Collector):
    """Reads the state on each scrape through ``snapshot`` (the one state.json is written from)."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]]):
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        return families(self.snapshot())


def serve(snapshot: Callable[[], dict[str, Any]], host: str, port: int) -> Callable[[], None]:
    """Start the thread server; returns its stop. A port in use raises OSError (the caller says so)."""
    from prometheus_client import start_http_server

    reg = CollectorRegistry(auto_describe=False)
    reg.register(StateCollector(snapshot))
    server, thread = start_http_server(port, addr=host, registry=reg)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    return stop
