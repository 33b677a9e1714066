"""Many chatty components, side by side in one run (issue 20 item 2).

    python tests/perf/bench_chatty.py [--counts 50,200] [--seconds 30] [--rate 100] [--repeat 1]
    python tests/perf/bench_chatty.py --counts 1000     # issue 44 item 2: all 1,000 started, the CPU

N components each write RATE lines/s of ~100 bytes (one write(2) per line, on a fixed schedule;
tests/perf/chatty.c, compiled on first use, or writer.py chatty without a C compiler or with
--python-writers) for SECONDS, all starting at the same instant, then print
`END NAME COUNT t=WALLTIME` and stay alive (so an exit cannot hurry the reading of the last line).
Each count runs under rlsup (`rlsup up --headless`) and under supervisord 4.3.0, alternated.

- CPU over the writing window (run time from schedstat, percent of one core), the writers excluded:
  rlsup = the supervisor + every monitor + the monitor zygote (also reported separately);
  supervisord = its own process (its children are the writers). The writers' CPU is reported for
  context only.
- Drain: for each component, from the END line's own timestamp to the moment the supervisor has
  it: for rlsup, pushed to one subscriber of rlsup.sock (subscribed 0.3 s before the window's end
  from each END line's seq on, as a TUI is: within the server's 50 ms flush of the ring holding it;
  `--drain poll`: a `logs` request per component every 5 ms, the measure until issue 44 item 2); for
  supervisord, in its log file (polled every 5 ms). Reported: the worst component, the median, and
  "all read" minus the last END written. Then each ring is compared with its log file (as many
  lines in both).
- The supervisor's own lag (issue 44 item 2): how late its scheduled work ran (the tick, evaluations,
  each round of log reads after its pause) over the writing window, p50/p90/max, from `run.ticks` of
  the subscription's snapshot (what `rlsup status --json` shows); and the share of the window the
  supervisor (rlsup's, or supervisord) spent runnable but waiting for a CPU (schedstat): a supervisor
  late while it waits for a CPU is late because the machine does not run it, not because of its work.
- Threads of the supervisor process at the end of the window, of each monitor, and of all of rlsup's
  processes together after the drain.

The load average of a run with 200 writers is inflated by the writers themselves (each is briefly
runnable 100 times a second); the load before each run is in the JSON.

Targets: 50 x 100 lines/s: rlsup CPU (supervisor + monitors) <= supervisord's; 200 x 100: headroom
(< 100% of a core) and drain < 0.1 s; supervisor threads the same at 50 and 200 components; at every
count, ticks on time (late p90 <= 50 ms, max <= 500 ms) and drain < 0.5 s (supervisord: ~0.1 s at 1,000).
Results: tests/perf/results/chatty.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import perfkit as pk  # noqa: E402

HOLD = 3600.0
POLL_S = 0.005
LATE_P90_MS, LATE_MAX_MS = 50.0, 500.0  # ticks on time: the supervisor's scheduled work late by at most this
DRAIN_S = 0.5  # every component's last line in the supervisor's ring within this (supervisord: ~0.1 s at 1,000)
SUBSCRIBE_EARLY_S = 0.3  # rlsup's CPU window ends this early: the drain's subscription begins then


WRITER: list[str] = []


def comps(n: int, rate: float, seconds: float, go: Path) -> dict[str, dict[str, Any]]:
    return {f"c{i:03d}": {"argv": [*WRITER, f"c{i:03d}", str(rate), str(seconds), str(go), str(HOLD)]}
            for i in range(n)}


def parse_end(line: str) -> float | None:
    if not line.startswith("END ") or " t=" not in line:
        return None
    try:
        return float(line.rsplit("t=", 1)[1])
    except ValueError:
        return None


def runqueue_wait_s(pid: int) -> float:
    """Seconds ``pid``'s main thread (rlsup's loop) has spent runnable but waiting for a CPU (schedstat)."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


def window(go: Path, seconds: float, sample_pids, early: float = 0.0) -> tuple[dict[str, Any], float]:
    """Start everyone at once and sample CPU around the writing window (ending ``early`` seconds before its
    end: the drain's watch begins then). Also: the share of the window the supervisor (the first of
    ``sample_pids``; its main thread) spent runnable but waiting for a CPU (``waiting_pct``).

    CPU is each task's run time from schedstat (nanoseconds: /proc/PID/stat counts whole ticks, which loses up
    to 10 ms a process, 10 s over 1,000 writers). The first sample is taken before the go, while everyone
    idles: at 1,000 components the machine is saturated once the writers start and this process waits its turn
    too; sampled after the go, it read the writers' CPU only once they were done (0.0%)."""
    pids = sample_pids()
    main = next(iter(pids.values()))[0]
    c0 = {k: pk.cpu_many(v, pk.cpu_sched_s) for k, v in pids.items()}
    start = time.time() + 1.0
    go.write_text(f"{start:.6f}\n")
    time.sleep(max(0.0, start - time.time()))
    t0, w0 = time.monotonic(), runqueue_wait_s(main)
    time.sleep(max(0.0, start + seconds - early - time.time()))
    w1, tw = runqueue_wait_s(main), time.monotonic()
    c1 = {k: pk.cpu_many(v, pk.cpu_sched_s) for k, v in pids.items()}
    dt = tw - t0
    cpu = {}
    for k in pids:
        cpu[k] = sum(c1[k][p] - c0[k][p] for p in c1[k] if p in c0[k])
    out = {k: round(100.0 * v / dt, 2) for k, v in cpu.items()}
    out["waiting_pct"] = round(100.0 * (w1 - w0) / (tw - t0), 1)
    out["sampled_after_s"] = round(time.monotonic() - tw, 2)  # how long reading every process's CPU took
    return out, start + seconds


def drain_rlsup_polled(sock: pk.Sock, names: list[str], total: int, timeout: float) -> tuple[dict, dict, dict]:
    """(--drain poll, the way this bench measured until issue 44 item 2) a `logs` request per component
    not yet seen, pipelined, every 5 ms: at 1,000 components, 200,000 requests a second to answer."""
    seen: dict[str, float] = {}
    ends: dict[str, float] = {}
    next_seq: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    while len(seen) < len(names) and time.monotonic() < deadline:
        todo = [n for n in names if n not in seen]
        replies = sock.send_many([{"op": "logs", "component": n, "from_seq": total, "limit": 1} for n in todo])
        now = time.time()
        for n, r in zip(todo, replies, strict=True):
            if r.get("ok") and r.get("lines"):
                t = parse_end(r["lines"][-1])
                if t is not None:
                    seen[n], ends[n], next_seq[n] = now, t, r["next_seq"]
        time.sleep(POLL_S)
    return seen, ends, next_seq


def subscribe(sock: pk.Sock, names: list[str], total: int) -> tuple[dict[str, Any], float]:
    """Subscribe to every component's lines from its END line on (seq ``total``): the supervisor pushes
    them as it reads them, as it does to a TUI. Returns the snapshot's state and when its reply came."""
    reply = sock.request("subscribe", lines=0, since=1 << 62, log_from=dict.fromkeys(names, total))
    at = time.time()
    # What the rings held already comes in the reply: as if pushed when it came.
    sock.first = [(at, {"type": "logs", "component": n, **v}) for n, v in reply["logs"].items()]  # type: ignore[attr-defined]
    return reply["state"], at


def pushes(sock: pk.Sock, deadline: float):
    """(when it came, message) for each message the supervisor pushes, until ``deadline`` (monotonic)."""
    yield from sock.first  # type: ignore[attr-defined]
    at = time.time()
    while time.monotonic() < deadline:
        nl = sock.buf.find(b"\n")
        if nl < 0:
            sock.s.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                chunk = sock.s.recv(1 << 20)
            except TimeoutError:
                return
            if not chunk:
                return
            at = time.time()  # stamped on arrival, before any of it is parsed
            sock.buf += chunk
            continue
        line, sock.buf = sock.buf[:nl], sock.buf[nl + 1:]
        yield at, json.loads(line)


def drain_rlsup_pushed(sock: pk.Sock, names: list[str], total: int, timeout: float) -> tuple[dict, dict, dict]:
    """Each component's END line as the supervisor pushes it to its subscriber (:func:`subscribe`, at most
    one 50 ms flush after its ring holds it): one connection, no request per component."""
    seen: dict[str, float] = {}
    ends: dict[str, float] = {}
    next_seq: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    for at, m in pushes(sock, deadline):
        n = m.get("component")
        if m.get("type") != "logs" or n in seen or not m.get("lines"):
            continue
        for i, line in enumerate(m["lines"]):
            t = parse_end(line)
            if t is not None:
                seen[n], ends[n], next_seq[n] = at, t, m["seq"] + i + 1
        if len(seen) == len(names):
            break
    return seen, ends, next_seq


def drain_rlsup(sock: pk.Sock, names: list[str], total: int, timeout: float, logs: Path,
                polled: bool = False) -> dict[str, Any]:
    seen, ends, next_seq = (drain_rlsup_polled if polled else drain_rlsup_pushed)(sock, names, total, timeout)
    out = summarise(seen, ends, names)
    # The ring against the log file: as many lines in one as in the other, for every component.
    mismatched = []
    for n in names:
        with open(logs / f"{n}.log", "rb") as f:
            count = f.read().count(b"\n")
        if next_seq.get(n) != count:
            mismatched.append(n)
    out["ring_matches_log"] = not mismatched
    if mismatched:
        out["ring_mismatched"] = mismatched[:10]
    return out


def drain_supervisord(logs: dict[str, Path], timeout: float) -> dict[str, Any]:
    seen: dict[str, float] = {}
    ends: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(seen) < len(logs) and time.monotonic() < deadline:
        for n, p in logs.items():
            if n in seen:
                continue
            try:
                with open(p, "rb") as f:
                    f.seek(0, 2)
                    size = f.tell()
                    f.seek(max(0, size - 200))
                    tail = f.read().decode(errors="replace")
            except OSError:
                continue
            if tail.endswith("\n"):
                t = parse_end(tail[:-1].rsplit("\n", 1)[-1])
                if t is not None:
                    seen[n], ends[n] = time.time(), t
        time.sleep(POLL_S)
    return summarise(seen, ends, list(logs))


def summarise(seen: dict[str, float], ends: dict[str, float], names: list[str]) -> dict[str, Any]:
    lags = sorted(seen[n] - ends[n] for n in seen)
    out: dict[str, Any] = {"components_read": len(seen), "components": len(names)}
    if lags:
        out["drain_max_s"] = round(lags[-1], 4)
        out["drain_median_s"] = round(lags[len(lags) // 2], 4)
        out["all_read_after_last_end_s"] = round(max(seen.values()) - max(ends.values()), 4)
    return out


def run_rlsup(base: Path, n: int, rate: float, seconds: float, i: int, polled: bool = False) -> dict[str, Any]:
    go = base / f"go-r{n}-{i}"
    run = pk.RlsupRun(base, f"r{n}-{i}", comps(n, rate, seconds, go))
    run.start()
    try:
        sock = run.sock()
        st = run.wait_running(sock, n)
        mons = list(run.monitor_pids(st).values())
        kids = list(run.child_pids(st).values())
        zyg = run.zygote_pids(mons)
        pids = {"supervisor": [run.pid], "monitors": mons, "zygote": zyg, "writers": kids}
        names, total = list(comps(n, rate, seconds, go)), int(rate * seconds)
        cpu, end = window(go, seconds, lambda: pids, early=0 if polled else SUBSCRIBE_EARLY_S)
        thr = pk.threads(run.pid)
        if polled:
            ticks = sock.request("snapshot", lines=0, since=1 << 62)["state"]["run"].get("ticks")
        else:
            sub = run.sock()
            state, at = subscribe(sub, names, total)
            ticks = state["run"].get("ticks")  # the writing window's (its last 30 s)
        drain = drain_rlsup(sock if polled else sub, names, total, 30, run.run_dir / "logs", polled)
        drain["subscribed_before_end_s"] = None if polled else round(end - at, 3)
        per_mon = [pk.threads(p) for p in mons]
        mon_thr = sorted(set(per_mon))
        all_thr = thr + sum(per_mon) + sum(pk.threads(p) for p in zyg)
        sock.close()
        if not polled:
            sub.close()
    finally:
        run.stop()
    res = {"cpu_pct": cpu, "rlsup_total_cpu_pct": round(cpu["supervisor"] + cpu["monitors"] + cpu["zygote"], 2),
           "supervisor_threads": thr, "monitor_threads": mon_thr, "rlsup_threads_all_processes": all_thr,
           "monitors": len(mons), "ticks": ticks, **drain}
    pk.rmtree(run.run_dir)
    return res


def run_supervisord(base: Path, n: int, rate: float, seconds: float, i: int) -> dict[str, Any]:
    go = base / f"go-s{n}-{i}"
    sv = pk.Supervisord(base, f"s{n}-{i}", comps(n, rate, seconds, go), autostart=True)
    sv.start()
    try:
        st = sv.wait_running(n)
        kids = [p for _, p in st.values() if p]
        pids = {"supervisord": [sv.pid], "writers": kids}
        cpu, end = window(go, seconds, lambda: pids)
        thr = pk.threads(sv.pid)
        drain = drain_supervisord(sv.logs, 30)
    finally:
        sv.stop()
    pk.rmtree(sv.dir)
    return {"cpu_pct": cpu, "supervisord_threads": thr, **drain}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="50,200")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-supervisord", action="store_true")
    ap.add_argument("--drain", choices=["push", "poll"], default="push",
                    help="rlsup's drain: its pushes to one subscriber (default), or a `logs` request per component "
                         "every 5 ms (the measure before issue 44 item 2: at 1,000 components, the polling's own)")
    ap.add_argument("--python-writers", action="store_true", help="writer.py instead of the C writer (chatty.c)")
    ap.add_argument("--workdir")
    ap.add_argument("--out")
    a = ap.parse_args()
    WRITER[:] = pk.chatty_writer(a.python_writers)
    base = pk.workdir("chatty", a.workdir)
    result: dict[str, Any] = {"machine": pk.machine(), "load_before": pk.loadavg(), "seconds": a.seconds,
                              "rate": a.rate, "repeat": a.repeat, "writer": " ".join(WRITER), "counts": {}}
    setups = ["rlsup"] if a.no_supervisord else ["rlsup", "supervisord"]
    try:
        for n in [int(x) for x in a.counts.split(",")]:
            runs: dict[str, list[dict[str, Any]]] = {s: [] for s in setups}
            for r in range(a.repeat):
                order = setups if r % 2 == 0 else setups[::-1]
                for s in order:
                    load = pk.loadavg()
                    res = (run_rlsup(base, n, a.rate, a.seconds, r, a.drain == "poll") if s == "rlsup"
                           else run_supervisord(base, n, a.rate, a.seconds, r))
                    res["load_before"] = load
                    runs[s].append(res)
                    print(f"  {n} x {a.rate:g} lines/s, {s}: {res}", flush=True)
            c: dict[str, Any] = {"runs": runs}
            rl = runs["rlsup"]
            c["rlsup_cpu_pct"] = round(pk.med([x["rlsup_total_cpu_pct"] for x in rl]), 2)
            c["rlsup_supervisor_cpu_pct"] = round(pk.med([x["cpu_pct"]["supervisor"] for x in rl]), 2)
            c["rlsup_monitors_cpu_pct"] = round(pk.med([x["cpu_pct"]["monitors"] + x["cpu_pct"]["zygote"] for x in rl]),
                                                2)
            c["rlsup_writers_cpu_pct"] = round(pk.med([x["cpu_pct"]["writers"] for x in rl]), 2)
            c["rlsup_supervisor_waiting_pct"] = round(pk.med([x["cpu_pct"]["waiting_pct"] for x in rl]), 1)
            c["rlsup_drain_max_s"] = round(pk.med([x.get("drain_max_s", float("nan")) for x in rl]), 4)
            c["rlsup_drain_median_s"] = round(pk.med([x.get("drain_median_s", float("nan")) for x in rl]), 4)
            for q in ("p50", "p90", "max"):  # the supervisor's own lag over the writing window (status: run.ticks)
                c[f"rlsup_late_{q}_ms"] = max((x["ticks"] or {}).get(f"late_{q}_ms", float("nan")) for x in rl)
            c["rlsup_supervisor_threads"] = max(x["supervisor_threads"] for x in rl)
            c["rlsup_ring_matches_log"] = all(x.get("ring_matches_log") for x in rl)
            c["rlsup_threads_all_processes"] = max(x["rlsup_threads_all_processes"] for x in rl)
            c["rlsup_monitors"] = min(x["monitors"] for x in rl)  # components started (one monitor each)
            if "supervisord" in runs:
                sd = runs["supervisord"]
                c["supervisord_cpu_pct"] = round(pk.med([x["cpu_pct"]["supervisord"] for x in sd]), 2)
                c["supervisord_writers_cpu_pct"] = round(pk.med([x["cpu_pct"]["writers"] for x in sd]), 2)
                c["supervisord_waiting_pct"] = round(pk.med([x["cpu_pct"]["waiting_pct"] for x in sd]), 1)
                c["supervisord_drain_max_s"] = round(pk.med([x.get("drain_max_s", float("nan")) for x in sd]), 4)
                c["supervisord_drain_median_s"] = round(pk.med([x.get("drain_median_s", float("nan")) for x in sd]),
                                                        4)
            result["counts"][str(n)] = c
    finally:
        pk.rmtree(base)
    result["load_after"] = pk.loadavg()
    counts = result["counts"]
    thr = {k: v["rlsup_supervisor_threads"] for k, v in counts.items()}
    targets = {}
    if "50" in counts and "supervisord_cpu_pct" in counts["50"]:
        targets["50: rlsup CPU <= supervisord"] = counts["50"]["rlsup_cpu_pct"] <= counts["50"]["supervisord_cpu_pct"]
    if "200" in counts:
        targets["200: rlsup CPU < 100% (headroom)"] = counts["200"]["rlsup_cpu_pct"] < 100.0
        targets["200: drain < 0.1 s"] = counts["200"]["rlsup_drain_max_s"] < 0.1
    if "1000" in counts:  # issue 44 item 2: all started, CPU linear in components, ahead of supervisord
        targets["1000: every component started"] = counts["1000"]["rlsup_monitors"] == 1000
        if "supervisord_cpu_pct" in counts["1000"]:
            targets["1000: rlsup CPU <= supervisord"] = (counts["1000"]["rlsup_cpu_pct"]
                                                        <= counts["1000"]["supervisord_cpu_pct"])
    for k, v in counts.items():  # issue 44 item 2: ticks on time, the drain comparable to supervisord's
        targets[f"{k}: ticks on time (p90 <= {LATE_P90_MS:g} ms, max <= {LATE_MAX_MS:g} ms)"] = (
            v["rlsup_late_p90_ms"] <= LATE_P90_MS and v["rlsup_late_max_ms"] <= LATE_MAX_MS)
        targets[f"{k}: drain < {DRAIN_S:g} s"] = v["rlsup_drain_max_s"] < DRAIN_S
    if len(thr) > 1:
        targets["threads not growing"] = len(set(thr.values())) == 1
    result["targets"] = targets
    path = pk.save("chatty", result, a.out)
    rows = []
    for k, v in counts.items():
        rows.append([f"{k} x {a.rate:g}/s", v["rlsup_cpu_pct"], v["rlsup_supervisor_cpu_pct"], v["rlsup_monitors_cpu_pct"],
                     v.get("supervisord_cpu_pct", "-"),
                     f"{v['rlsup_supervisor_waiting_pct']} / {v.get('supervisord_waiting_pct', '-')}",
                     f"{v['rlsup_late_p50_ms']:g} / {v['rlsup_late_p90_ms']:g} / {v['rlsup_late_max_ms']:g}",
                     f"{v['rlsup_drain_max_s']} ({v['rlsup_drain_median_s']})",
                     f"{v.get('supervisord_drain_max_s', '-')} ({v.get('supervisord_drain_median_s', '-')})",
                     f"{v['rlsup_supervisor_threads']} ({v['rlsup_threads_all_processes']})", f"{v['rlsup_writers_cpu_pct']} / {v.get('supervisord_writers_cpu_pct', '-')}"])
    print()
    print(pk.table(rows, ["components", "rlsup %", "supervisor %", "monitors %", "supervisord %",
                          "waiting for a CPU % (sup/sv)", "late ms p50/p90/max", "rlsup drain s max (med)",
                          "sv drain s max (med)", "threads (all rlsup)", "writers % (rlsup/sv)"]))
    for k, v in targets.items():
        print(f"  {k}: {pk.verdict(v)}")
    print(f"load average before {result['load_before']}, after {result['load_after']}; "
          f"{result['machine']['cores']} cores; {path}")


if __name__ == "__main__":
    main()
