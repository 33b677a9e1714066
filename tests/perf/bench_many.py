"""Thousands of components that start and end at once (issue 43 item 6, issue 44 item 2).

    python tests/perf/bench_many.py [--counts 1000,2000,10000] [--repeat 1] [--no-supervisord]

N components of `/bin/true` (`restart: {policy: never}`) in one config, under `rlsup up --headless` with
its preflight (what a user runs), and under supervisord 4.3.0 (`autostart`, `startsecs=0`), alternated.

- rlsup: from `rlsup up` to `run_started` in the journal (loading and checking the config, preparing the
  run dir), to the first and the last `started`, and to `run_ended` (each event's `ts`); the whole
  command's time; the supervisor's CPU and its children's (monitors, the zygote and, through them, the
  components), read from its zombie.
- supervisord: from its start to the last `spawned:` in its log (to the millisecond) and to every
  program EXITED (supervisorctl status every 0.5 s); its own CPU (its children are the components).
- Per component (ms): last started / N and supervisor CPU / N, and the same divided by the smallest
  count's (1.0 at every N: linear; growing: worse than linear).

Nothing here is a timed assertion. The load average before each run is printed and kept.
Results: tests/perf/results/many.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import perfkit as pk  # noqa: E402

SPAWNED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) INFO spawned: ")


def comps(n: int) -> dict[str, dict[str, Any]]:
    return {f"c{i}": {"argv": ["/bin/true"]} for i in range(n)}


def run_rlsup(base: Path, n: int, i: int) -> dict[str, Any]:
    run = pk.RlsupRun(base, f"r{n}-{i}", comps(n), skip_checks=False)
    t0 = time.time()
    run.start()
    try:
        rc, whole, cpu = run.wait_cpu(3600)
    finally:
        run.stop()
    events = [json.loads(line) for line in (run.run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    ts = {k: [e["ts"] for e in events if e["kind"] == k] for k in ("run_started", "started", "run_ended")}
    started = ts["started"]
    res = {"rc": rc, "components": n, "started": len(started),
           "to_run_started_s": round(ts["run_started"][0] - t0, 3),
           "to_first_started_s": round(min(started) - t0, 3) if started else None,
           "to_last_started_s": round(max(started) - t0, 3) if started else None,
           "to_run_ended_s": round(ts["run_ended"][-1] - t0, 3) if ts["run_ended"] else None,
           "whole_s": round(whole, 3), "supervisor_cpu_s": round(cpu["self_s"], 2),
           "children_cpu_s": round(cpu["children_s"], 2)}
    pk.rmtree(run.run_dir)
    return res


def run_supervisord(base: Path, n: int, i: int) -> dict[str, Any]:
    sv = pk.Supervisord(base, f"s{n}-{i}", comps(n), autostart=True)
    t0 = time.time()
    sv.start()
    try:
        def done() -> dict[str, Any] | None:
            st = sv.status()
            ended = sum(1 for s, _ in st.values() if s in ("EXITED", "FATAL", "BACKOFF"))
            return {"ended": ended} if len(st) >= n and ended >= n else None
        pk.wait_for(done, 3600, every=0.5, what=f"{n} supervisord programs exited")
        all_exited = time.time() - t0
        cpu = pk.cpu_ticks_s(sv.pid)
    finally:
        sv.stop()
    spawned = []
    for line in (sv.dir / "supervisord.log").read_text(errors="replace").splitlines():
        m = SPAWNED.match(line)
        if m:
            spawned.append(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000)
    res = {"components": n, "started": len(spawned),
           "to_last_started_s": round(max(spawned) - t0, 3) if spawned else None,
           "to_all_exited_s": round(all_exited, 3), "supervisord_cpu_s": round(cpu, 2)}
    pk.rmtree(sv.dir)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="1000,2000,10000", help="comma-separated numbers of components")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-supervisord", action="store_true")
    ap.add_argument("--workdir")
    ap.add_argument("--out")
    a = ap.parse_args()
    base = pk.workdir("many", a.workdir)
    result: dict[str, Any] = {"machine": pk.machine(), "load_before": pk.loadavg(), "repeat": a.repeat, "counts": {}}
    setups = ["rlsup"] if a.no_supervisord else ["rlsup", "supervisord"]
    try:
        for n in [int(x) for x in a.counts.split(",")]:
            runs: dict[str, list[dict[str, Any]]] = {s: [] for s in setups}
            for r in range(a.repeat):
                for s in (setups if r % 2 == 0 else setups[::-1]):
                    load = pk.loadavg()
                    res = (run_rlsup if s == "rlsup" else run_supervisord)(base, n, r)
                    res["load_before"] = load
                    runs[s].append(res)
                    print(f"  {n} x /bin/true, {s}: {res}", flush=True)
            c: dict[str, Any] = {"runs": runs}
            rl = runs["rlsup"]
            for k in ("to_run_started_s", "to_first_started_s", "to_last_started_s", "to_run_ended_s",
                      "supervisor_cpu_s", "children_cpu_s"):
                c[f"rlsup_{k}"] = round(pk.med([x[k] if x.get(k) is not None else float("nan") for x in rl]), 3)
            c["rlsup_all_started"] = all(x["started"] == n for x in rl)
            c["rlsup_ms_per_component_started"] = round(1000 * c["rlsup_to_last_started_s"] / n, 3)
            c["rlsup_cpu_ms_per_component"] = round(1000 * c["rlsup_supervisor_cpu_s"] / n, 3)
            if "supervisord" in runs:
                sd = runs["supervisord"]
                c["supervisord_to_last_started_s"] = round(pk.med([x["to_last_started_s"] or float("nan") for x in sd]), 3)
                c["supervisord_to_all_exited_s"] = round(pk.med([x["to_all_exited_s"] for x in sd]), 3)
                c["supervisord_cpu_s"] = round(pk.med([x["supervisord_cpu_s"] for x in sd]), 2)
            c["load_before"] = rl[0]["load_before"]
            result["counts"][str(n)] = c
    finally:
        pk.rmtree(base)
    result["load_after"] = pk.loadavg()
    counts = result["counts"]
    smallest = counts[min(counts, key=int)]
    rows = []
    for k, v in counts.items():
        grow_t = v["rlsup_ms_per_component_started"] / smallest["rlsup_ms_per_component_started"]
        grow_c = v["rlsup_cpu_ms_per_component"] / smallest["rlsup_cpu_ms_per_component"]
        rows.append([k, v["rlsup_to_run_started_s"], v["rlsup_to_first_started_s"], v["rlsup_to_last_started_s"],
                     v["rlsup_to_run_ended_s"], v["rlsup_supervisor_cpu_s"], v["rlsup_children_cpu_s"],
                     f"{v['rlsup_ms_per_component_started']} (x{grow_t:.2f})",
                     f"{v['rlsup_cpu_ms_per_component']} (x{grow_c:.2f})",
                     v.get("supervisord_to_last_started_s", "-"), v.get("supervisord_to_all_exited_s", "-"),
                     v.get("supervisord_cpu_s", "-"), " ".join(f"{x:g}" for x in v["load_before"])])
    result["targets"] = {f"{k}: all started": v["rlsup_all_started"] for k, v in counts.items()}
    path = pk.save("many", result, a.out)
    print()
    print(pk.table(rows, ["N", "run_started s", "first started s", "last started s", "run_ended s",
                          "supervisor CPU s", "children CPU s", "ms/comp started", "CPU ms/comp",
                          "sv last spawned s", "sv all exited s", "sv CPU s", "load before"]))
    for k, ok in result["targets"].items():
        print(f"  {k}: {pk.verdict(ok)}")
    print(f"load average before {result['load_before']}, after {result['load_after']}; "
          f"{result['machine']['cores']} cores; {path}")


if __name__ == "__main__":
    main()
