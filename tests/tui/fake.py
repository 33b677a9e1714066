"""A fake session for the TUI tests: records commands, lets a test push snapshots, events and log
lines through the listener exactly as :class:`rlsup.supervisor.client.session.Session` would, and fixed
run states (normal, crash loop, no GPU, 8 GPUs) built by folding real events with state.apply."""

from __future__ import annotations

import asyncio
import functools
import math
import time
from typing import Any

from rlsup.supervisor.records import state as run_state
from rlsup.supervisor.records.progress import MetricHistory
from rlsup.tui.app import RlsupApp

T0 = 1_700_000_000.0  # every timestamp in the fixtures is relative to this
NOW = T0 + 3723.0  # the injected clock: the run is 1h02m03s old


def run_async(fn):
    """Run an ``async def`` test on a fresh event loop (no pytest-asyncio or anyio needed)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return wrapper


def utc_hms(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ts))


class FakeSession:
    def __init__(self, listener: Any, snapshot: dict[str, Any] | None = None,
                 replies: dict[str, dict[str, Any]] | None = None):
        self.listener = listener
        self.snapshot = snapshot
        self.replies = replies or {}
        self.commands: list[tuple[str, str | None, dict[str, Any]]] = []
        self.server = {"host": "pod-1", "name": "demo", "pid": 4242}
        self.closed = False
        self._stop = asyncio.Event()
        self.seq = 1000

    async def run(self) -> None:
        self.listener.on_connection("connecting", "")
        if self.snapshot is not None:
            for e in self.snapshot.get("events", []):  # as Session does: replayed events first
                self.listener.on_event(e)
            self.listener.on_snapshot(self.snapshot, False)
            self.listener.on_connection("attached", "pod-1")
        await self._stop.wait()

    async def command(self, command: str, component: str | None = None, **args: Any) -> dict[str, Any]:
        self.commands.append((command, component, args))
        return self.replies.get(command, {"ok": True, "message": f"{command} {component or 'all'}: requested"})

    def close(self) -> None:
        self.closed = True
        self._stop.set()

    # what a test pushes ---------------------------------------------------------------------
    def event(self, kind: str, component: str | None = None, ts: float = NOW, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        e = {"ts": ts, "seq": self.seq, "kind": kind, "component": component, **fields}
        self.listener.on_event(e)
        return e

    def logs(self, component: str, lines: list[str], seq: int = 0) -> None:
        self.listener.on_logs(component, seq, lines)


def make_app(snapshot: dict[str, Any] | None, replies: dict[str, dict[str, Any]] | None = None,
             **kw: Any) -> RlsupApp:
    """An app over a :class:`FakeSession` with a fixed clock and UTC times."""
    kw.setdefault("target", "local runs/demo")
    kw.setdefault("attach_hint", "rlsup attach --run-dir runs/demo")
    return RlsupApp(lambda listener: FakeSession(listener, snapshot, replies), clock=lambda: NOW,
                    timefmt=utc_hms, **kw)


# ---------------------------------------------------------------------------------- fixed states


def _fold(components: list[str], events: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    st = run_state.initial({"name": "demo"}, components)
    seq = 0
    out = []
    for e in [{"kind": "run_started", "ts": T0, "name": "demo", "run_dir": "runs/demo",
               "config": "configs/demo.yaml", "pid": 4242, "host": "pod-1", "components": components},
              *events]:
        seq += 1
        e = {"seq": seq, "component": None, **e}
        run_state.apply(st, e)
        out.append(e)
    return st, out


def _start(c: str, ts: float, pid: int, attempt: int = 1) -> list[dict[str, Any]]:
    return [{"kind": "started", "component": c, "ts": ts, "pid": pid, "attempt": attempt, "resume": None,
             "command": f"python -m rlsup.trainer.{c}"},
            {"kind": "ready", "component": c, "ts": ts + 4, "probe": "started"}]


def reward_at(step: int) -> float:
    """A deterministic noisy rise from ~0.08 to ~0.64 over 120 steps (what a GRPO reward looks like)."""
    return round(0.08 + 0.56 * (1 - 0.985 ** step) / (1 - 0.985 ** 120) + 0.03 * math.sin(step * 1.7), 4)


def loss_at(step: int) -> float:
    return round(1.2 / (1 + step / 15) + 0.02 * math.sin(step * 2.3), 4)


def full_history(step: int) -> dict[str, Any]:
    """The full-run history a tracker that saw steps 1..step would hold, as the state keeps it."""
    hs = {"reward": MetricHistory(), "loss": MetricHistory()}
    for s in range(1, step + 1):
        hs["reward"].add(s, reward_at(s))
        hs["loss"].add(s, loss_at(s))
    return {k: h.wire() for k, h in hs.items()}


def _progress(c: str, step: int, total: int, rate: float, metric: str, series: list[float]) -> dict[str, Any]:
    return {"kind": "progress", "component": c, "ts": NOW - 1, "step": step, "total": total, "rate": rate,
            "eta_s": (total - step) / rate, "metrics": {metric: series[-1], "loss": 0.4321}, "metric": metric,
            "series": series, "checkpoint": {"step": step - step % 10, "path": f"work/checkpoints/step_{step - step % 10}"},
            "history": full_history(step)}


def _gpu(index: int, util: float, used: float, procs: list[dict[str, Any]], name: str = "NVIDIA H100 80GB HBM3"):
    return {"index": index, "name": name, "uuid": f"GPU-{index:04d}", "util_pct": util, "mem_used_mb": used,
            "mem_total_mb": 81559.0, "temp_c": 40 + index * 3, "power_w": 120 + index * 60,
            "power_limit_w": 700, "processes": procs}


HOST = {"cpu_pct": 37.5, "cpu_count": 32, "mem_used_mb": 96_000.0, "mem_total_mb": 257_000.0, "load1": 5.1}
REWARD = [0.08, 0.1, 0.09, 0.14, 0.2, 0.19, 0.27, 0.31, 0.3, 0.38, 0.42, 0.47, 0.45, 0.52, 0.58, 0.61, 0.6, 0.64]


def log_lines(component: str, n: int = 40) -> list[str]:
    out = []
    for i in range(1, n + 1):
        if component == "trainer":
            out.append(f"[train] step {i:4d} | loss {1 / i:.4f} | reward {min(0.64, 0.08 + i * 0.013):.3f} | lr 1e-06")
        elif component == "inference":
            out.append(f"INFO  127.0.0.1 - \"POST /v1/completions HTTP/1.1\" 200 OK  batch={i % 7 + 1}  ttft={(i % 5) * 11}ms")
        else:
            out.append(f"[orch] rollout batch {i:4d}: 64 samples, mean reward {0.1 + (i % 9) * 0.05:.3f}")
    return out


def _snapshot(st: dict[str, Any], events: list[dict[str, Any]], logs: dict[str, list[str]]) -> dict[str, Any]:
    return {"state": run_state.view(st, NOW), "events": events, "seq": st["seq"],
            "logs": {c: {"seq": 0, "lines": lines} for c, lines in logs.items()}}


COMPONENTS = ["inference", "orchestrator", "trainer"]


def normal_run(gpus: int = 2, backend: str = "nvml", reason: str | None = None) -> dict[str, Any]:
    ev = [*_start("inference", T0 + 1, 1101), *_start("orchestrator", T0 + 30, 1202),
          *_start("trainer", T0 + 31, 1303),
          _progress("orchestrator", 121, 200, 0.034, "reward", REWARD[:-1]),
          _progress("trainer", 120, 200, 0.033, "reward", REWARD)]
    owners = ["inference", "trainer", "orchestrator"]
    gl = [_gpu(i, [91.0, 74.0, 35.0, 12.0, 0.0, 55.0, 97.0, 68.0][i % 8], [70_000.0, 52_000.0, 30_500.0, 8_100.0, 0.0, 41_000.0, 79_800.0, 20_000.0][i % 8],
               [{"pid": 1101 + i, "used_mb": 20_000.0 + i * 1000, "component": owners[i % 3]}]
               + ([{"pid": 9000 + i, "used_mb": 512.0, "component": None}] if i == 3 else []))
          for i in range(gpus)]
    ev.append({"kind": "gpu", "ts": NOW - 0.5, "gpus": gl, "host": HOST, "backend": backend, "reason": reason})
    ev.append({"kind": "resources", "ts": NOW - 0.5, "components": RESOURCES})  # as run.py's ResourcesSampled
    st, events = _fold(COMPONENTS, ev)
    return _snapshot(st, [e for e in events if e["kind"] not in ("progress", "gpu", "resources")],
                     {c: log_lines(c) for c in COMPONENTS})


RESOURCES = {"inference": {"cpu_pct": 12.5, "rss_mb": 3_480.0, "gpu_mb": 20_000.0},
             "orchestrator": {"cpu_pct": 3.1, "rss_mb": 812.0, "gpu_mb": None},
             "trainer": {"cpu_pct": 187.0, "rss_mb": 14_950.0, "gpu_mb": 21_000.0}}


def ended_run() -> dict[str, Any]:
    """The crash loop after the trainer went fatal and the run ended (attached read-only)."""
    snap = crash_loop_run()
    st = snap["state"]
    extra = [{"kind": "fatal", "component": "trainer", "ts": NOW - 5, "reason": "crash loop: 6 crashes in 6 minutes"},
             {"kind": "run_ended", "component": None, "ts": NOW - 2, "exit_code": 1, "reason": "trainer fatal"}]
    seq = st["seq"]
    for e in extra:
        seq += 1
        e["seq"] = seq
        run_state.apply(st, e)
        snap["events"].append(e)
    st["run"]["root"] = {"component": "trainer", "reason": "CUDA out of memory at train.py:88 (step 57)"}
    st["seq"] = seq
    snap["seq"] = seq
    return snap


LONG = ("[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5 "
        "ncclUnhandledCudaError: Call to CUDA function failed. Last error: Cuda failure 'out of memory'")


def long_lines_run() -> dict[str, Any]:
    """A normal run whose trainer log has lines far wider than a pane (wrap and sideways scrolling)."""
    snap = normal_run()
    lines = log_lines("trainer", 30)
    snap["logs"]["trainer"]["lines"] = [*lines[:20], LONG, *lines[20:25], LONG.replace("rank0", "rank1"), *lines[25:]]
    return snap


def no_gpu_run() -> dict[str, Any]:
    return normal_run(gpus=0, backend="none", reason="no NVIDIA driver found")


def eight_gpu_run() -> dict[str, Any]:
    return normal_run(gpus=8, backend="fake")


CUDA_OOM = {"category": "cuda_oom", "summary": "CUDA out of memory (tried to allocate 2.00 GiB) at train.py:88",
            "exception": "torch.OutOfMemoryError", "location": "train.py:88", "step": 57,
            "evidence": ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]}


def crash_loop_run() -> dict[str, Any]:
    ev = [*_start("inference", T0 + 1, 1101), *_start("orchestrator", T0 + 30, 1202)]
    t = NOW - 280  # the fifth crash was 10 s ago; its 32 s backoff has 22 s to go
    for attempt in range(1, 6):
        resume = {"step": 50, "checkpoint": "work/checkpoints/step_50"} if attempt > 1 else None
        ev.append({"kind": "started", "component": "trainer", "ts": t, "pid": 2000 + attempt, "attempt": attempt,
                   "resume": resume, "command": "python -m rlsup.trainer.train",
                   "log_seq": (attempt - 1) * 5})  # where its output starts in the trainer's log stream
        ev.append({"kind": "exited", "component": "trainer", "ts": t + 30, "exit_code": 1, "signal": None,
                   "uptime_s": 30.0, "step": 57, "diagnosis": CUDA_OOM})
        ev.append({"kind": "restart_scheduled", "component": "trainer", "ts": t + 30, "delay_s": 2.0 ** attempt,
                   "attempt": attempt + 1, "reason": "exit code 1"})
        t += 60
    ev += [
        {"kind": "flag", "component": "trainer", "ts": t - 30, "type": "crash_loop",
         "message": "5 crashes in 5 minutes", "action": "backing off; fatal after 10",
         "evidence": ["attempt 1..5 exited with code 1 after ~30s"]},
        {"kind": "flag", "component": "trainer", "ts": t - 29, "type": "repeated_error",
         "message": "same CUDA OOM at train.py:88 in 5 attempts", "action": "lower the batch size",
         "evidence": ["train.py:88  loss.backward()", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]},
        {"kind": "flag", "component": "trainer", "ts": t - 28, "type": "step_crash", "message": "crashes at step 57 every time",
         "action": "inspect the batch at step 57", "evidence": ["last step seen 57 in attempts 1-5"]},
    ]
    ev.append({"kind": "gpu", "ts": NOW - 0.5, "gpus": [_gpu(0, 3.0, 1200.0, [])], "host": HOST, "backend": "nvml",
               "reason": None})
    st, events = _fold(COMPONENTS, ev)
    logs = {c: log_lines(c) for c in COMPONENTS}
    logs["trainer"] = log_lines("trainer", 20) + [
        "Traceback (most recent call last):", '  File "train.py", line 88, in <module>', "    loss.backward()",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    return _snapshot(st, [e for e in events if e["kind"] not in ("progress", "gpu", "resources")], logs)


async def started(pilot):
    """The main screen once the first snapshot is painted (every component has its pane)."""
    await pilot.pause()
    await pilot.pause(0.1)
    screen = pilot.app.main
    assert list(screen.panes) == COMPONENTS
    return screen


def notes(app) -> list[str]:
    """The messages of the toasts shown so far."""
    return [n.message for n in app._notifications]
