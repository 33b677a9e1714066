"""Benchmarks for the core supervisor (issue 2), measured side by side in one run.

    python tests/perf/bench_supervisor.py [--lines 1000000] [--repeat 3]

1. Log flood: one component writes N lines (~100 bytes each) as fast as it can. The writer's
   lifetime under `rlsup up --headless` (progress pattern on) divided by its lifetime when
   redirected to a file, same interpreter and environment. Runs alternate; medians reported.
   Every byte is checked on disk.
2. Supervisor CPU with three idle components over 20 s (percent of one core).
3. Exit-to-event latency: time from a child's last instruction to the `exited` event's ts.

Items 1 and 2 are measured more completely, next to `pipe -> cat`, a file and supervisord, by
bench_flood.py and bench_idle.py (issues 15 and 20; see tests/perf/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE.parent / "scripts"
PY = sys.executable
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "RLSUP_GPU_SAMPLER": "none"}


def rlsup(config: Path, run_dir: Path) -> subprocess.Popen:
    return subprocess.Popen([PY, "-m", "rlsup.supervisor.cli", "up", str(config), "--headless", "--run-dir",
                             str(run_dir)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=ENV)


def events(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]


def flood_baseline(n: int, out: Path) -> float:
    with open(out, "wb") as f:
        t0 = time.perf_counter()
        subprocess.run([PY, str(SCRIPTS / "flood.py"), str(n)], stdout=f, env=ENV, check=True)
        return time.perf_counter() - t0


def flood_rlsup(n: int, tmp: Path, i: int, expected_size: int) -> tuple[float, float]:
    cfg = tmp / f"flood{i}.yaml"
    cfg.write_text(
        "components:\n  flood:\n"
        f"    command: [{PY!r}, {str(SCRIPTS / 'flood.py')!r}, '{n}']\n"
        "    progress: {pattern: 'Step (?P<step>\\d+)/(?P<total>\\d+) \\| loss (?P<loss>[\\d.]+)'}\n")
    run_dir = tmp / f"run{i}"
    t0 = time.perf_counter()
    p = rlsup(cfg, run_dir)
    assert p.wait(600) == 0
    total = time.perf_counter() - t0
    ev = events(run_dir)
    started = next(e for e in ev if e["kind"] == "started")["ts"]
    exited = next(e for e in ev if e["kind"] == "exited")["ts"]
    size = (run_dir / "logs" / "flood.log").stat().st_size
    assert size == expected_size, f"log has {size} bytes, expected {expected_size}"
    return exited - started, total


def idle_cpu(tmp: Path, seconds: float) -> float:
    cfg = tmp / "idle.yaml"
    cfg.write_text("components:\n" + "".join(
        f"  c{i}:\n    command: [{PY!r}, '-c', 'import time; time.sleep(600)']\n" for i in range(3)))
    run_dir = tmp / "idle-run"
    p = rlsup(cfg, run_dir)
    time.sleep(3)  # let start-up work settle
    proc = psutil.Process(p.pid)
    c0 = sum(proc.cpu_times()[:2])
    time.sleep(seconds)
    c1 = sum(proc.cpu_times()[:2])
    p.terminate()
    p.wait(60)
    return 100.0 * (c1 - c0) / seconds


def exit_latency(tmp: Path, count: int) -> list[float]:
    stamp = tmp / "stamp"
    code = (f"import time, os\ntime.sleep(0.3)\nopen({str(stamp)!r}, 'w').write(repr(time.time()))\nos._exit(3)\n")
    script = tmp / "exiter.py"
    script.write_text(code)
    cfg = tmp / "lat.yaml"
    cfg.write_text("components:\n  x:\n"
                   f"    command: [{PY!r}, {str(script)!r}]\n"
                   f"    restart: {{max_restarts: {count - 1}, backoff: {{initial: 0.05, jitter: 0}}}}\n")
    run_dir = tmp / "lat-run"
    stamps: list[float] = []
    p = rlsup(cfg, run_dir)
    seen = 0
    while p.poll() is None or seen < count:
        if stamp.exists():
            try:
                stamps.append(float(stamp.read_text()))
                stamp.unlink()
                seen += 1
            except ValueError:
                pass
        if p.poll() is not None and not stamp.exists():
            break
        time.sleep(0.005)
    ev = [e for e in events(run_dir) if e["kind"] == "exited"]
    return [1000 * (e["ts"] - s) for e, s in zip(ev, stamps, strict=False)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--idle-seconds", type=float, default=20.0)
    ap.add_argument("--out", default=str(HERE / "results" / "latest.json"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        base, under, totals = [], [], []
        expected = None
        for i in range(a.repeat):
            base.append(flood_baseline(a.lines, tmp / "base.log"))
            expected = (tmp / "base.log").stat().st_size
            w, t = flood_rlsup(a.lines, tmp, i, expected)
            under.append(w)
            totals.append(t)
            print(f"  flood run {i + 1}: file {base[-1]:.3f}s, under rlsup {w:.3f}s (whole command {t:.3f}s)",
                  flush=True)
        ratio = statistics.median(under) / statistics.median(base)
        cpu = idle_cpu(tmp, a.idle_seconds)
        lat = exit_latency(tmp, 5)
    result = {
        "lines": a.lines, "bytes": expected, "repeat": a.repeat,
        "flood_file_s": statistics.median(base), "flood_rlsup_s": statistics.median(under),
        "flood_ratio": round(ratio, 3), "rlsup_command_s": statistics.median(totals),
        "idle_cpu_pct_3_components": round(cpu, 3),
        "exit_to_event_ms": [round(x, 1) for x in lat],
        "machine": f"{os.cpu_count()} cores, python {sys.version.split()[0]}",
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
