"""Exit -> next start, and the supervisor's CPU at start-up (issue 44 item 3, "restart in milliseconds").

    python tests/perf/bench_restart.py                 # this checkout against the base commit
    python tests/perf/bench_restart.py --base HEAD~3   # ... against another commit
    python tests/perf/bench_restart.py --no-base       # this checkout only

For each variant (this working tree, and the base commit checked out with ``git archive`` into a
temporary directory and put first on ``PYTHONPATH``), alternated round by round so they share the
machine's load:

- **restart**: one component ``sh -c 'sleep 0.1; exit 1'`` under ``restart: always`` with a backoff of
  1 ms and no jitter, run by ``rlsup up --headless`` until it has started ``--restarts`` + 1 times. From
  the journal: for each restart, ``started.ts`` minus the ``exited.ts`` before it (the whole of rlsup's
  part: the exit noticed, judged, journaled, the old monitor gone, the new monitor forked and the command
  started), and its two halves (exited -> restart_scheduled, restart_scheduled -> started; the 1 ms
  backoff is in the second). Median and p90 over all restarts of all rounds.
- **start-up CPU**: three idle components (``sleep``) under ``rlsup up --headless``; the supervisor
  process's own CPU (utime+stime, 10 ms ticks) from its exec until the journal holds a ``started`` for
  all three (polled every 5 ms), and the wall time to that moment. supervisord 4.3.0 (``--no-supervisord``
  skips it) beside it: its CPU once ``supervisorctl status`` shows the three RUNNING. And the floor of
  rlsup's stack: the CPU of a Python that only imports asyncio, yaml, pydantic and psutil (which rlsup
  cannot start without), so the part that is rlsup's own shows.

Targets (issue 44): exit -> next start median <= 10 ms at low load; start-up CPU <= 0.15 s for three
components. Nothing here is a timed assertion. Results: tests/perf/results/restart.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import perfkit as pk  # noqa: E402

RESTART_CFG = """name: restart
components:
  a:
    command: ["/bin/sh", "-c", "sleep 0.1; exit 1"]
    restart: {policy: always, backoff: {initial: 0.001, factor: 1, max: 0.001, jitter: 0}, max_restarts: 100000,
              window: 3600}
"""

STARTUP_CFG = "name: startup\ncomponents:\n" + "".join(
    f"  c{i}:\n    command: [\"sleep\", \"600\"]\n    restart: {{policy: never}}\n" for i in range(3))


class Variant:
    """One version of rlsup: the source tree it runs from (on PYTHONPATH through a shim package)."""

    def __init__(self, label: str, src: Path, work: Path):
        self.label = label
        self.env = pk.env(PYTHONPATH=pk.source_path(label, src, work))
        self.env.pop("RLSUP_RUN_DIR", None)

    def up(self, cfg: Path, run_dir: Path, out: Path) -> subprocess.Popen[bytes]:
        argv = [pk.PY, "-m", "rlsup.supervisor.cli", "up", str(cfg), "--headless", "--skip-checks",
                "--run-dir", str(run_dir)]
        with open(out, "wb") as f:
            return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=self.env, cwd=str(cfg.parent))


def events(run_dir: Path) -> list[dict[str, Any]]:
    out = []
    try:
        with open(run_dir / "events.jsonl") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a line being written
    except OSError:
        pass
    return out


def count_started(run_dir: Path) -> int:
    try:
        return (run_dir / "events.jsonl").read_bytes().count(b'"kind": "started"')
    except OSError:
        return 0


def end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            proc.wait(30)


def measure_restarts(v: Variant, work: Path, restarts: int, rnd: int) -> dict[str, list[float]]:
    d = work / f"restart-{v.label}-{rnd}"
    d.mkdir()
    cfg = d / "c.yaml"
    cfg.write_text(RESTART_CFG)
    run_dir = d / "run"
    proc = v.up(cfg, run_dir, d / "out.txt")
    try:
        pk.wait_for(lambda: count_started(run_dir) >= restarts + 1 or proc.poll() is not None, 60 + restarts,
                    every=0.05, what=f"{restarts} restarts")
    finally:
        end(proc)
    gaps: dict[str, list[float]] = {"exit_to_start": [], "exit_to_scheduled": [], "scheduled_to_start": []}
    exited = scheduled = None
    for e in events(run_dir):
        if e.get("component") != "a":
            continue
        k = e.get("kind")
        if k == "exited":
            exited, scheduled = e["ts"], None
        elif k == "restart_scheduled" and exited is not None:
            scheduled = e["ts"]
        elif k == "started" and exited is not None:
            gaps["exit_to_start"].append((e["ts"] - exited) * 1000)
            if scheduled is not None:
                gaps["exit_to_scheduled"].append((scheduled - exited) * 1000)
                gaps["scheduled_to_start"].append((e["ts"] - scheduled) * 1000)
            exited = scheduled = None
    if not gaps["exit_to_start"]:
        raise RuntimeError(f"{v.label}: no restart seen: {(d / 'out.txt').read_text()[-2000:]}")
    return gaps


def measure_startup(v: Variant, work: Path, rnd: int) -> dict[str, float]:
    d = work / f"startup-{v.label}-{rnd}"
    d.mkdir()
    cfg = d / "c.yaml"
    cfg.write_text(STARTUP_CFG)
    run_dir = d / "run"
    t0 = time.perf_counter()
    proc = v.up(cfg, run_dir, d / "out.txt")
    try:
        while count_started(run_dir) < 3:
            if proc.poll() is not None:
                raise RuntimeError(f"{v.label}: rlsup ended: {(d / 'out.txt').read_text()[-2000:]}")
            if time.perf_counter() - t0 > 120:
                raise TimeoutError("three components not started in 120 s")
            time.sleep(0.005)
        wall = time.perf_counter() - t0
        cpu = pk.cpu_ticks_s(proc.pid)
    finally:
        end(proc)
    return {"cpu_s": cpu, "wall_s": wall}


def measure_supervisord(work: Path, rnd: int) -> dict[str, float]:
    comps = {f"c{i}": {"argv": ["sleep", "600"]} for i in range(3)}
    t0 = time.perf_counter()
    sv = pk.Supervisord(work, f"sv{rnd}", comps, autostart=True)
    try:
        sv.start()
        sv.wait_running(3, timeout=60)
        wall = time.perf_counter() - t0
        cpu = pk.cpu_ticks_s(sv.pid)
    finally:
        sv.stop()
    return {"cpu_s": cpu, "wall_s": wall}


FLOOR = "import asyncio, yaml, pydantic, psutil"


def measure_floor() -> float:
    """CPU seconds of a Python that only imports the libraries rlsup's supervisor cannot start without."""
    def spent() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime
    before = spent()
    subprocess.run([pk.PY, "-c", FLOOR], check=True, env=pk.env())
    return spent() - before


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--restarts", type=int, default=50, help="restarts measured per variant (over all rounds)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base", default=None, help="git revision to compare with (default: the merge base with main)")
    ap.add_argument("--no-base", action="store_true")
    ap.add_argument("--no-supervisord", action="store_true")
    ap.add_argument("--workdir")
    ap.add_argument("--out")
    a = ap.parse_args()
    load_before = pk.loadavg()
    work = Path(tempfile.mkdtemp(prefix="rlsup-bench-restart-", dir=a.workdir))
    variants = [Variant("this", pk.REPO, work)]
    base_rev = None
    if not a.no_base:
        base_rev = a.base or _default_base()
        src = work / "base"
        src.mkdir()
        archive = subprocess.run(["git", "-C", str(pk.REPO), "archive", base_rev], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
        variants.append(Variant(f"base {base_rev[:9]}", src, work))
    per_round = max(1, -(-a.restarts // a.rounds))
    restarts: dict[str, dict[str, list[float]]] = {v.label: {} for v in variants}
    startup: dict[str, list[dict[str, float]]] = {v.label: [] for v in variants}
    sv: list[dict[str, float]] = []
    floor: list[float] = []
    try:
        for r in range(a.rounds):
            for v in (variants if r % 2 == 0 else variants[::-1]):
                print(f"round {r + 1}: {v.label}: {per_round} restarts, start-up ...", file=sys.stderr, flush=True)
                for k, xs in measure_restarts(v, work, per_round, r).items():
                    restarts[v.label].setdefault(k, []).extend(xs)
                startup[v.label].append(measure_startup(v, work, r))
            if not a.no_supervisord:
                sv.append(measure_supervisord(work, r))
            floor.append(measure_floor())
    finally:
        load_after = pk.loadavg()
        if not os.environ.get("KEEP"):
            pk.rmtree(work)
    rows = []
    result: dict[str, Any] = {"machine": pk.machine(), "base": base_rev, "load_before": load_before,
                              "load_after": load_after, "variants": {}}
    for v in variants:
        g = restarts[v.label]
        s = startup[v.label]
        fig = {
            "restarts": len(g["exit_to_start"]),
            "exit_to_start_ms_p50": round(statistics.median(g["exit_to_start"]), 1),
            "exit_to_start_ms_p90": round(pct(g["exit_to_start"], 0.9), 1),
            "exit_to_scheduled_ms_p50": round(pk.med(g["exit_to_scheduled"]), 1),
            "scheduled_to_start_ms_p50": round(pk.med(g["scheduled_to_start"]), 1),
            "startup_cpu_s_p50": round(pk.med([x["cpu_s"] for x in s]), 3),
            "startup_wall_s_p50": round(pk.med([x["wall_s"] for x in s]), 3),
            "raw": {"restart_ms": g, "startup": s},
        }
        result["variants"][v.label] = fig
        rows.append([v.label, fig["restarts"], fig["exit_to_start_ms_p50"], fig["exit_to_start_ms_p90"],
                     fig["exit_to_scheduled_ms_p50"], fig["scheduled_to_start_ms_p50"], fig["startup_cpu_s_p50"],
                     fig["startup_wall_s_p50"]])
    if sv:
        result["supervisord"] = {"startup_cpu_s_p50": round(pk.med([x["cpu_s"] for x in sv]), 3),
                                 "startup_wall_s_p50": round(pk.med([x["wall_s"] for x in sv]), 3), "raw": sv}
        rows.append([f"supervisord {pk.SUPERVISORD_VERSION}", "", "", "", "", "",
                     result["supervisord"]["startup_cpu_s_p50"], result["supervisord"]["startup_wall_s_p50"]])
    result["floor"] = {"what": FLOOR, "cpu_s_p50": round(pk.med(floor), 3), "raw": floor}
    rows.append(["python + its libraries", "", "", "", "", "", result["floor"]["cpu_s_p50"], ""])
    print(pk.table(rows, ["variant", "restarts", "exit->start p50 ms", "p90 ms", "exit->scheduled p50",
                          "scheduled->start p50", "start-up CPU s (3)", "start-up wall s"]))
    print("targets: exit->start p50 <= 10 ms at low load; start-up CPU <= 0.15 s for three components")
    print(f"load average before {load_before}, after {load_after}")
    print(f"results: {pk.save('restart', result, a.out)}")


def _default_base() -> str:
    r = subprocess.run(["git", "-C", str(pk.REPO), "merge-base", "HEAD", "main"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else "HEAD"


if __name__ == "__main__":
    main()
