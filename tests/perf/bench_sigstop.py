"""A stopped supervisor must not slow a flooding child (issue 15 "SIGSTOP of the supervisor for 30 s").

    python tests/perf/bench_sigstop.py [--seconds 30] [--repeat 1] [--no-supervisord]

One component floods 90-byte lines (one write(2) each, tests/perf/writer.py timedflood) for
SECONDS from a common start instant and counts what it wrote. Case "stopped": the supervisor
process alone (not its monitors) is SIGSTOPped 0.2 s before the start and SIGCONTed 0.3 s after the
end; case "free": the same without the stop. Cases alternate; the figure is lines written in the
window, stopped / free (about 1.0 means the child never noticed; the child may even gain a little,
as the stopped supervisor leaves it a core). supervisord 4.3.0 is measured the same way for reference
(its child writes into a pipe only supervisord reads).

Checked as well: the log on disk holds every line (size, first and last line), and for rlsup the
time from SIGCONT (or, free, from the end of the window) until the supervisor's ring holds the
last line (catch-up). Results: tests/perf/results/sigstop.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import perfkit as pk  # noqa: E402

LINE = 90


def check_log(path: Path, lines: int) -> dict[str, Any]:
    size = path.stat().st_size
    with open(path, "rb") as f:
        first = f.readline()
        f.seek(max(0, size - LINE))
        last = f.read()
    ok = (size == LINE * lines and first.startswith(b"line 000000001 ")
          and last.startswith(f"line {lines:09d} ".encode()))
    return {"log_bytes": size, "log_ok": ok}


def flood(base: Path, setup: str, stopped: bool, seconds: float, tag: str) -> dict[str, Any]:
    go, stamp = base / f"go-{tag}", base / f"stamp-{tag}"
    comp = {"w": {"argv": [pk.PY, str(pk.WRITER), "timedflood", str(go), str(seconds), str(stamp)],
                  "env": {"PYTHONUNBUFFERED": "1"}}}
    res: dict[str, Any] = {}
    if setup == "rlsup":
        sup = pk.RlsupRun(base, tag, comp, logs={"max_bytes": 1 << 40})
    else:
        sup = pk.Supervisord(base, tag, comp, autostart=True)
    sup.start()
    sock = None
    try:
        if setup == "rlsup":
            sock = sup.sock()
            sup.wait_running(sock, 1)
        else:
            sup.wait_running(1)
        time.sleep(1.0)
        start = time.time() + 1.0
        go.write_text(f"{start:.6f}\n")
        if stopped:
            time.sleep(max(0.0, start - 0.2 - time.time()))
            os.kill(sup.pid, signal.SIGSTOP)
        time.sleep(max(0.0, start + seconds + 0.3 - time.time()))
        if stopped:
            os.kill(sup.pid, signal.SIGCONT)
        t_resume = time.monotonic()
        pk.wait_for(stamp.exists, 600, what="the writer's count")
        time.sleep(0.05)
        st = json.loads(stamp.read_text())
        lines = int(st["lines"])
        res.update(lines=lines, writer_s=round(st["seconds"], 3))
        if setup == "rlsup":
            assert sock is not None

            def caught_up() -> bool:
                try:
                    r = sock.request("logs", component="w", from_seq=lines - 1, limit=1)
                except OSError:  # the run already ended (the writer exited): its end comes after the last read
                    res["ended_before_asked"] = True
                    return True
                return r.get("ok") and r["next_seq"] >= lines

            pk.wait_for(caught_up, 600, every=0.01, what="the supervisor to catch up")
            res["catch_up_s"] = round(time.monotonic() - t_resume, 3)
            sock.close()
            sock = None
            rc, _ = sup.wait(600)
            log = sup.run_dir / "logs" / "w.log"
        else:
            log = sup.logs["w"]
            pk.wait_for(lambda: log.stat().st_size >= LINE * lines, 60, what="supervisord's log")
        res.update(check_log(log, lines))
    finally:
        if sock is not None:
            sock.close()
        try:
            os.kill(sup.pid, signal.SIGCONT)
        except OSError:
            pass
        sup.stop()
        pk.rmtree(sup.run_dir if setup == "rlsup" else sup.dir)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-supervisord", action="store_true")
    ap.add_argument("--workdir")
    ap.add_argument("--out")
    a = ap.parse_args()
    base = pk.workdir("sigstop", a.workdir)
    setups = ["rlsup"] if a.no_supervisord else ["rlsup", "supervisord"]
    result: dict[str, Any] = {"machine": pk.machine(), "load_before": pk.loadavg(), "seconds": a.seconds,
                              "repeat": a.repeat, "setups": {}}
    try:
        for s in setups:
            runs: dict[str, list[dict[str, Any]]] = {"stopped": [], "free": []}
            for r in range(a.repeat):
                for case in (["stopped", "free"] if r % 2 == 0 else ["free", "stopped"]):
                    res = flood(base, s, case == "stopped", a.seconds, f"{s}-{case}-{r}")
                    res["load"] = pk.loadavg()
                    runs[case].append(res)
                    print(f"  {s}, {case}: {res}", flush=True)
            ls, lf = pk.med([x["lines"] for x in runs["stopped"]]), pk.med([x["lines"] for x in runs["free"]])
            result["setups"][s] = {"runs": runs, "lines_stopped": ls, "lines_free": lf, "ratio": round(ls / lf, 3),
                                   "logs_ok": all(x["log_ok"] for v in runs.values() for x in v)}
    finally:
        pk.rmtree(base)
    result["load_after"] = pk.loadavg()
    result["targets"] = {"rlsup: stopped / free ~ 1.0 (>= 0.95)": result["setups"]["rlsup"]["ratio"] >= 0.95}
    path = pk.save("sigstop", result, a.out)
    rows = []
    for s, v in result["setups"].items():
        cu = [x.get("catch_up_s") for x in v["runs"]["stopped"]] if s == "rlsup" else "-"
        cf = [x.get("catch_up_s") for x in v["runs"]["free"]] if s == "rlsup" else "-"
        rows.append([s, int(v["lines_free"]), int(v["lines_stopped"]), v["ratio"], "ok" if v["logs_ok"] else "WRONG",
                     cu, cf])
    print()
    print(pk.table(rows, ["setup", f"lines in {a.seconds:g}s (free)", "lines (supervisor stopped)", "stopped/free",
                          "log on disk", "catch-up after SIGCONT s", "drain after end (free) s"]))
    for k, v in result["targets"].items():
        print(f"  {k}: {pk.verdict(v)}")
    print(f"load average before {result['load_before']}, after {result['load_after']}; "
          f"{result['machine']['cores']} cores; {path}")


if __name__ == "__main__":
    main()
