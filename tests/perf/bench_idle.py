"""Idle cost, side by side in one run (issue 20 item 4, issue 15 "idle CPU" and "memory per monitor").

    python tests/perf/bench_idle.py [--seconds 60] [--components 3]

rlsup (`rlsup up --headless`, no client attached) and supervisord 4.3.0 each supervise the same
idle components (`sleep`), at the same time, over the same window, after SETTLE seconds for
start-up work to end. A second rlsup run beside them ("supervisor, watching") supervises the same
components configured as an RL stack's are: two watch a rollouts directory and one a checkpoints
directory (`watch:` and `resume.checkpoints`), where nothing is written during the window. CPU is read as run time in nanoseconds (the sum of
/proc/PID/task/*/schedstat) and, as a cross-check, as utime+stime ticks; a window of 60 s puts
one 10 ms tick at 0.017%, hence the nanosecond figure. Reported: the supervisor, its monitors and
the zygote (each and together), supervisord (its own process); the memory of each monitor
(RSS/PSS/USS) and of the supervisor; the supervisor's threads.

Target: the supervisor under 0.05% of one core with three idle components.
Results: tests/perf/results/idle.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import perfkit as pk  # noqa: E402

SETTLE = 5.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--components", type=int, default=3)
    ap.add_argument("--no-supervisord", action="store_true")
    ap.add_argument("--workdir")
    ap.add_argument("--out")
    a = ap.parse_args()
    base = pk.workdir("idle", a.workdir)
    comps = {f"c{i}": {"argv": [pk.PY, str(pk.WRITER), "idle"]} for i in range(a.components)}
    result: dict[str, Any] = {"machine": pk.machine(), "load_before": pk.loadavg(), "seconds": a.seconds,
                              "components": a.components}
    run = pk.RlsupRun(base, "idle", comps)
    (base / "rollouts").mkdir()
    (base / "checkpoints").mkdir()
    wcomps = {n: dict(c) for n, c in comps.items()}
    for i, c in enumerate(wcomps.values()):
        if i < 2:
            c["watch"] = [str(base / "rollouts")]
        if i == 0:
            c["checkpoints"] = str(base / "checkpoints")
    wrun = pk.RlsupRun(base, "idlew", wcomps)
    sv = None if a.no_supervisord else pk.Supervisord(base, "idle", comps, autostart=True)
    try:
        run.start()
        wrun.start()
        if sv is not None:
            sv.start()
        sock = run.sock()
        st = run.wait_running(sock, a.components)
        sock.close()  # no client attached during the window
        sock = wrun.sock()
        wrun.wait_running(sock, a.components)
        sock.close()
        if sv is not None:
            sv.wait_running(a.components)
        mons = list(run.monitor_pids(st).values())
        zyg = run.zygote_pids(mons)
        groups = {"supervisor": [run.pid], "supervisor, watching": [wrun.pid], "monitors": mons, "zygote": zyg}
        if sv is not None:
            groups["supervisord"] = [sv.pid]
        time.sleep(SETTLE)
        t0 = time.monotonic()
        n0 = {k: pk.cpu_many(v, pk.cpu_sched_s) for k, v in groups.items()}
        k0 = {k: pk.cpu_many(v) for k, v in groups.items()}
        time.sleep(a.seconds)
        n1 = {k: pk.cpu_many(v, pk.cpu_sched_s) for k, v in groups.items()}
        k1 = {k: pk.cpu_many(v) for k, v in groups.items()}
        dt = time.monotonic() - t0
        cpu: dict[str, Any] = {}
        for k in groups:
            ns = sum(n1[k][p] - n0[k][p] for p in n1[k] if p in n0[k])
            tk = sum(k1[k][p] - k0[k][p] for p in k1[k] if p in k0[k])
            cpu[k] = {"pct_sched": round(100.0 * ns / dt, 4), "pct_ticks": round(100.0 * tk / dt, 4)}
        cpu["monitors_each"] = [round(100.0 * (n1["monitors"][p] - n0["monitors"][p]) / dt, 4)
                                for p in mons if p in n0["monitors"] and p in n1["monitors"]]
        result["cpu"] = cpu
        result["memory"] = {"supervisor": pk.memory(run.pid), "monitors": [pk.memory(p) for p in mons],
                            "zygote": [pk.memory(p) for p in zyg]}
        if sv is not None:
            result["memory"]["supervisord"] = pk.memory(sv.pid)
        result["supervisor_threads"] = pk.threads(run.pid)
        result["supervisor_watching_threads"] = pk.threads(wrun.pid)
        result["monitor_threads"] = [pk.threads(p) for p in mons]
    finally:
        run.stop()
        wrun.stop()
        if sv is not None:
            sv.stop()
        pk.rmtree(base)
    result["load_after"] = pk.loadavg()
    sup = result["cpu"]["supervisor"]["pct_sched"]
    watching = result["cpu"]["supervisor, watching"]["pct_sched"]
    result["targets"] = {"supervisor idle < 0.05% of a core": sup < 0.05,
                         "supervisor idle, watching 3 directories, < 0.05%": watching < 0.05}
    path = pk.save("idle", result, a.out)
    cpu = result["cpu"]
    rows = [[k, cpu[k]["pct_sched"], cpu[k]["pct_ticks"]] for k in groups]
    print()
    print(f"{a.components} idle components, {a.seconds:g} s window")
    print(pk.table(rows, ["process", "% of a core (schedstat)", "% (ticks)"]))
    mem = result["memory"]
    mrows = [["supervisor", mem["supervisor"]["rss_mb"], mem["supervisor"]["pss_mb"], mem["supervisor"]["uss_mb"]]]
    mrows += [[f"monitor {i}", m["rss_mb"], m["pss_mb"], m["uss_mb"]] for i, m in enumerate(mem["monitors"])]
    mrows += [["zygote", m["rss_mb"], m["pss_mb"], m["uss_mb"]] for m in mem["zygote"]]
    if "supervisord" in mem:
        mrows.append(["supervisord", mem["supervisord"]["rss_mb"], mem["supervisord"]["pss_mb"],
                      mem["supervisord"]["uss_mb"]])
    print(pk.table(mrows, ["process", "RSS MB", "PSS MB", "USS MB"]))
    print(f"supervisor threads {result['supervisor_threads']} ({result['supervisor_watching_threads']} watching), "
          f"monitor threads {result['monitor_threads']}")
    for k, v in result["targets"].items():
        print(f"  {k}: {pk.verdict(v)}")
    print(f"load average before {result['load_before']}, after {result['load_after']}; "
          f"{result['machine']['cores']} cores; {path}")


if __name__ == "__main__":
    main()
