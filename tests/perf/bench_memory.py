"""Memory with every ring full, side by side in one run (issue 20 item 3; issue 15 "memory per monitor").

    python tests/perf/bench_memory.py [--components 200] [--lines 12000]

N components each print LINES lines of ~100 bytes (more than the default ring of 10,000 lines,
so every ring is full), then `FILLED NAME`, then stay alive. Under rlsup, once the supervisor's
ring of every component holds its FILLED line (the `logs` request of rlsup.sock), and under
supervisord 4.3.0 once every log file ends with it, after 2 s of rest:

- the supervisor's RSS, PSS, USS and peak RSS (VmHWM); supervisord's the same;
- each monitor's RSS, PSS and USS (median, max, and the sum over monitors), and the zygote's.
  A monitor is forked from the zygote, so most of its RSS is shared: USS is what each one adds,
  PSS sums to what they cost together.

Target: the supervisor under 100 MB (RSS) with 200 full rings. Results: tests/perf/results/memory.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import perfkit as pk  # noqa: E402

HOLD = 3600.0


def comps(n: int, lines: int) -> dict[str, dict[str, Any]]:
    return {f"c{i:03d}": {"argv": [pk.PY, str(pk.WRITER), "fill", f"c{i:03d}", str(lines), str(HOLD)]}
            for i in range(n)}


def hwm_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 2)
    return 0.0


def summary(mems: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {"count": len(mems)}
    for k in ("rss_mb", "pss_mb", "uss_mb"):
        xs = [m[k] for m in mems]
        out[k] = {"median": round(statistics.median(xs), 2), "max": round(max(xs), 2), "sum": round(sum(xs), 2)}
    return out


def run_rlsup(base: Path, n: int, lines: int) -> dict[str, Any]:
    c = comps(n, lines)
    run = pk.RlsupRun(base, "mem", c)
    run.start()
    try:
        sock = run.sock()
        st = run.wait_running(sock, n)

        def filled() -> bool:
            replies = sock.send_many([{"op": "logs", "component": name, "from_seq": lines, "limit": 1} for name in c])
            return all(r.get("ok") and r.get("lines") and r["lines"][0].startswith("FILLED") for r in replies)

        pk.wait_for(filled, 600, every=0.2, what="every ring full")
        fill_s = time.perf_counter() - run.t_start
        rings = sock.send_many([{"op": "logs", "component": name, "from_seq": 0, "limit": 1} for name in c])
        first = [r["first_seq"] for r in rings]
        sock.close()
        time.sleep(2.0)
        mons = run.monitor_pids(st)
        zyg = run.zygote_pids(mons.values())
        sup = {**pk.memory(run.pid), "hwm_mb": hwm_mb(run.pid), "threads": pk.threads(run.pid)}
        mon_mem = [pk.memory(p) for p in mons.values()]
        zyg_mem = [pk.memory(p) for p in zyg]
    finally:
        run.stop()
    pk.rmtree(run.run_dir)
    return {"supervisor": sup, "monitors": summary(mon_mem), "zygote": zyg_mem, "fill_s": round(fill_s, 2),
            "ring_lines_kept": {"median": statistics.median(lines + 1 - f for f in first),
                                "min": min(lines + 1 - f for f in first)}}


def run_supervisord(base: Path, n: int, lines: int) -> dict[str, Any]:
    sv = pk.Supervisord(base, "mem", comps(n, lines), autostart=True)
    sv.start()
    try:
        sv.wait_running(n)

        def filled() -> bool:
            for p in sv.logs.values():
                try:
                    with open(p, "rb") as f:
                        f.seek(0, 2)
                        f.seek(max(0, f.tell() - 40))
                        if b"FILLED" not in f.read():
                            return False
                except OSError:
                    return False
            return True

        pk.wait_for(filled, 600, every=0.2, what="every supervisord log filled")
        time.sleep(2.0)
        mem = {**pk.memory(sv.pid), "hwm_mb": hwm_mb(sv.pid)}
    finally:
        sv.stop()
    pk.rmtree(sv.dir)
    return {"supervisord": mem}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--components", type=int, default=200)
    ap.add_argument("--lines", type=int, default=12000)
    ap.add_argument("--no-supervisord", action="store_true")
    ap.add_argument("--workdir")
    ap.add_argument("--out")
    a = ap.parse_args()
    base = pk.workdir("memory", a.workdir)
    result: dict[str, Any] = {"machine": pk.machine(), "load_before": pk.loadavg(), "components": a.components,
                              "lines_each": a.lines}
    try:
        result["rlsup"] = run_rlsup(base, a.components, a.lines)
        if not a.no_supervisord:
            result.update(run_supervisord(base, a.components, a.lines))
    finally:
        pk.rmtree(base)
    result["load_after"] = pk.loadavg()
    r = result["rlsup"]
    result["targets"] = {"supervisor RSS < 100 MB": r["supervisor"]["rss_mb"] < 100.0}
    path = pk.save("memory", result, a.out)
    m = r["monitors"]
    rows = [["rlsup supervisor", r["supervisor"]["rss_mb"], r["supervisor"]["pss_mb"], r["supervisor"]["uss_mb"],
             r["supervisor"]["hwm_mb"]],
            [f"monitor (median of {m['count']})", m["rss_mb"]["median"], m["pss_mb"]["median"], m["uss_mb"]["median"], "-"],
            [f"monitors (sum of {m['count']})", m["rss_mb"]["sum"], m["pss_mb"]["sum"], m["uss_mb"]["sum"], "-"]]
    for z in r["zygote"]:
        rows.append(["monitor zygote", z["rss_mb"], z["pss_mb"], z["uss_mb"], "-"])
    if "supervisord" in result:
        s = result["supervisord"]
        rows.append(["supervisord", s["rss_mb"], s["pss_mb"], s["uss_mb"], s["hwm_mb"]])
    print()
    print(f"{a.components} components x {a.lines} lines of ~100 bytes; rings hold {r['ring_lines_kept']} lines each "
          f"(all read {r['fill_s']} s after `rlsup up`)")
    print(pk.table(rows, ["process", "RSS MB", "PSS MB", "USS MB", "peak RSS MB"]))
    for k, v in result["targets"].items():
        print(f"  {k}: {pk.verdict(v)}")
    print(f"load average before {result['load_before']}, after {result['load_after']}; "
          f"{result['machine']['cores']} cores; {path}")


if __name__ == "__main__":
    main()
