"""Flood throughput, side by side in one run (issue 20 item 1, issue 15 "log flood overhead").

    python tests/perf/bench_flood.py [--repeat 3] [--only lines,blocks,biglines] [--lines 1000000]

Three workloads, each written by the same script (tests/perf/writer.py) in four setups:

    lines     1,000,000 lines of 90 bytes, one write(2) per line (PYTHONUNBUFFERED=1); every
              1000th line is a progress line, and under rlsup the progress pattern is on
    blocks    94 MB in 64 KiB blocks (1434 writes; 512 lines of 128 bytes each)
    biglines  60 lines of 1 MiB, one write each

    file         writer > file                              (the physical floor of the writer)
    cat          writer | cat > file                        (the floor through a pipe)
    rlsup        `rlsup up CONFIG --headless` (one run per measurement, its monitor writes the log)
    supervisord  supervisord 4.3.0 (installed into tests/perf/.cache), `supervisorctl start`, log to file
    rlsup_paused diagnostic: rlsup with the supervisor SIGSTOPped while the writer writes (the monitor
                 alone moves the bytes): separates the monitor's cost from the supervisor's reading

The figure is the writer's lifetime as the writer itself measures it (perf_counter from its first
write to its last write returned, after 0.5 s of rest so that start-up work of either supervisor
is over). Setups are alternated within each repeat (the order rotates); medians are reported.
Every log is checked byte for byte (size and sha256 against the content rebuilt here), and under
rlsup the final step in state.json must equal the last step printed. The whole `rlsup up` command
(start-up, preflight checks, shutdown) is timed against the whole `writer > file` process.
CPU seconds per run show where the time goes: the writer's (its own rusage), cat's, supervisord's
(its process over the run), rlsup's supervisor (read from its zombie) and monitor (the CPU of the
supervisor's reaped children less the writer's).

The supervisor's CPU over the data alone (CPU/sv) is its run time (schedstat) from the last moment its
component's log was empty to the moment state.json records every byte read, the writer kept alive
until then, against supervisord's over its whole run of the writer.

Targets (issue 44): the capture (writer's lifetime) <= 1.1x cat on every workload; the supervisor's
CPU over the data <= 1.5x supervisord's on the line flood and the blocks; the line flood <= 1.10x
file, blocks and big lines <= supervisord (earlier issues). Results: tests/perf/results/flood.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import perfkit as pk  # noqa: E402
import writer as wr  # noqa: E402

PATTERN = r"Step (?P<step>\d+)/(?P<total>\d+) \| loss (?P<loss>[\d.]+)"
SETTLE = 0.5
SETUPS = ["file", "cat", "rlsup", "supervisord", "rlsup_paused"]


def workloads(lines: int) -> dict[str, dict[str, Any]]:
    return {
        "lines": {"mode": "lines", "n": lines, "env": {"PYTHONUNBUFFERED": "1"}, "progress": PATTERN},
        "blocks": {"mode": "blocks", "n": 1434, "env": {}},
        "biglines": {"mode": "biglines", "n": 60, "env": {}},
    }


def expected(wl: dict[str, Any]) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    if wl["mode"] == "lines":
        buf = []
        for i, text in enumerate(wr.lines_content(wl["n"])):
            buf.append(text)
            if i % 10000 == 9999:
                b = "".join(buf).encode()
                h.update(b)
                size += len(b)
                buf = []
        b = "".join(buf).encode()
        h.update(b)
        size += len(b)
    else:
        make = wr.block if wl["mode"] == "blocks" else wr.bigline
        for i in range(wl["n"]):
            b = make(i)
            h.update(b)
            size += len(b)
    return size, h.hexdigest()


def digest(path: Path) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 22)
            if not b:
                break
            h.update(b)
            size += len(b)
    return size, h.hexdigest()


def argv(wl: dict[str, Any], stamp: Path, until: Path | None = None) -> list[str]:
    return [pk.PY, str(pk.WRITER), wl["mode"], str(wl["n"]), str(stamp), str(SETTLE), *([str(until)] if until else [])]


def read_stamp(stamp: Path) -> tuple[float, float]:
    st = json.loads(stamp.read_text())
    return float(st["seconds"]), float(st["cpu_s"])


def run_file(wl, d: Path, exp) -> dict[str, Any]:
    out, stamp = d / "file.out", d / "stamp"
    stamp.unlink(missing_ok=True)
    with open(out, "wb") as f:
        t0 = time.perf_counter()
        subprocess.run(argv(wl, stamp), stdout=f, env=pk.env(**wl["env"]), check=True)
        whole = time.perf_counter() - t0
    ok = digest(out) == exp
    out.unlink()
    w, wcpu = read_stamp(stamp)
    return {"writer_s": w, "whole_s": whole, "bytes_ok": ok, "cpu_s": {"writer": wcpu}}


def run_cat(wl, d: Path, exp) -> dict[str, Any]:
    out, stamp = d / "cat.out", d / "stamp"
    stamp.unlink(missing_ok=True)
    with open(out, "wb") as f:
        t0 = time.perf_counter()
        w = subprocess.Popen(argv(wl, stamp), stdout=subprocess.PIPE, env=pk.env(**wl["env"]))
        c = subprocess.Popen(["cat"], stdin=w.stdout, stdout=f)
        assert w.stdout is not None
        w.stdout.close()
        w.wait()
        _, _, ru = os.wait4(c.pid, 0)
        cat = {"cpu_s": round(ru.ru_utime + ru.ru_stime, 3), "minflt": ru.ru_minflt}
        c.returncode = 0
        whole = time.perf_counter() - t0
    ok = digest(out) == exp
    out.unlink()
    ws, wcpu = read_stamp(stamp)
    return {"writer_s": ws, "whole_s": whole, "bytes_ok": ok,
            "cpu_s": {"writer": wcpu, "cat": cat["cpu_s"]}, "cat": cat}


def run_rlsup(wl, d: Path, exp, i: int, paused: bool = False) -> dict[str, Any]:
    stamp, until = d / "stamp", d / "until"
    stamp.unlink(missing_ok=True)
    until.unlink(missing_ok=True)
    comp = {"argv": argv(wl, stamp, None if paused else until), "env": wl["env"]}
    if wl.get("progress"):
        comp["progress"] = wl["progress"]
    run = pk.RlsupRun(d, f"r{i}{'p' if paused else ''}", {"w": comp}, skip_checks=False)
    run.start()
    log = run.run_dir / "logs" / "w.log"
    data_cpu = None
    if not paused:
        # The supervisor's CPU over the data alone: from the last moment its component's log was still empty (the
        # writer rests SETTLE s first) to the moment state.json says every byte is read; the writer stays alive
        # until then, so that neither the start-up nor the handling of its exit is counted.
        c0 = None
        while not stamp.exists():
            try:
                if log.stat().st_size > 0:
                    break
            except OSError:
                pass
            c0 = pk.cpu_sched_s(run.pid)
            time.sleep(0.001)
        pk.wait_for(lambda: (run.state().get("components", {}).get("w", {}).get("log") or {}).get("offset") == exp[0],
                    120, every=0.01, what="the supervisor to read the whole log")
        if c0 is not None:
            data_cpu = round(pk.cpu_sched_s(run.pid) - c0, 4)
        until.touch()
    if paused:
        # Diagnostic: the supervisor stopped while the writer writes, so only the monitor moves the
        # bytes (it needs no supervisor): what the data path costs the writer without the supervisor's
        # reading competing for the CPU. Stopped as soon as the monitor's record exists (the writer
        # rests SETTLE s before writing), continued once the writer is done.
        mons = run.run_dir / "monitors"
        pk.wait_for(lambda: mons.is_dir() and any(mons.glob("w.*.json")), 120, every=0.002,
                    what="the monitor's record")
        os.kill(run.pid, signal.SIGSTOP)
        monitor: dict[str, float] = {}
        try:
            pk.wait_for(stamp.exists, 600, every=0.01, what="the writer")
            time.sleep(0.1)
            # The monitor waits for the (stopped) supervisor to tell it to finish: read it exactly now.
            rec = json.loads(next(mons.glob("w.*.json")).read_text())
            monitor = pk.proc_stat(int(rec["shim_pid"]))
        finally:
            os.kill(run.pid, signal.SIGCONT)
    rc, whole, cpu = run.wait_cpu(600)
    ws, wcpu = read_stamp(stamp)
    # The monitor's and the zygote's CPU: what the supervisor's reaped children used, less the writer's.
    res: dict[str, Any] = {"writer_s": ws, "whole_s": whole, "rc": rc,
                           "cpu_s": {"writer": wcpu, "supervisor": cpu["self_s"],
                                     "monitor": round(max(0.0, cpu["children_s"] - wcpu), 3)}}
    if data_cpu is not None:
        res["cpu_s"]["supervisor_data"] = data_cpu
    if paused and monitor:
        res["monitor_exact"] = monitor
    got = digest(log)
    res["bytes_ok"] = got == exp
    if not res["bytes_ok"]:
        res["bytes_got"] = got[0]
    if wl["mode"] == "lines":
        st = run.state()["components"]["w"]
        res["final_step"] = st.get("step")
        res["final_step_ok"] = st.get("step") == wl["n"] // 1000
    pk.rmtree(run.run_dir)
    return res


def run_supervisord(wl, d: Path, exp, sv: pk.Supervisord, stamp: Path) -> dict[str, Any]:
    stamp.unlink(missing_ok=True)
    log = sv.logs["w"]
    log.unlink(missing_ok=True)
    c0 = pk.cpu_sched_s(sv.pid)
    t0 = time.perf_counter()
    r = sv.ctl("start", "w")
    assert r.returncode == 0, r.stdout + r.stderr
    pk.wait_for(lambda: stamp.exists() and sv.status().get("w", ("",))[0] == "EXITED", 600, every=0.05,
                what="supervisord's writer to exit")
    whole = time.perf_counter() - t0  # includes supervisorctl's own start: for reference only
    try:
        pk.wait_for(lambda: log.stat().st_size >= exp[0], 30, every=0.02, what="supervisord's log")
    except TimeoutError:
        pass
    c1 = pk.cpu_sched_s(sv.pid)
    got = digest(log)
    ws, wcpu = read_stamp(stamp)
    res = {"writer_s": ws, "whole_s": whole, "bytes_ok": got == exp,
           "cpu_s": {"writer": wcpu, "supervisord": round(c1 - c0, 3)}}
    if not res["bytes_ok"]:
        res["bytes_got"] = got[0]
    log.unlink(missing_ok=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="lines,blocks,biglines")
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--no-supervisord", action="store_true")
    ap.add_argument("--no-diagnostic", action="store_true", help="skip the rlsup_paused runs")
    ap.add_argument("--workdir", help="where logs go (default tests/perf/.cache/work)")
    ap.add_argument("--out")
    a = ap.parse_args()
    setups = [s for s in SETUPS if not (a.no_supervisord and s == "supervisord")
              and not (a.no_diagnostic and s == "rlsup_paused")]
    base = pk.workdir("flood", a.workdir)
    result: dict[str, Any] = {"machine": pk.machine(), "load_before": pk.loadavg(), "repeat": a.repeat,
                              "workloads": {}}
    rows = []
    try:
        for name in a.only.split(","):
            wl = workloads(a.lines)[name]
            d = base / name
            d.mkdir()
            exp = expected(wl)
            runs: dict[str, list[dict[str, Any]]] = {s: [] for s in setups}
            sv = None
            sv_stamp = d / "sv-stamp"
            if "supervisord" in setups:
                sv = pk.Supervisord(d, "sv", {"w": {"argv": argv(wl, sv_stamp), "env": wl["env"]}}, autostart=False)
                sv.start()
            try:
                for r in range(a.repeat):
                    order = setups[r % len(setups):] + setups[:r % len(setups)]
                    for s in order:
                        if s == "file":
                            runs[s].append(run_file(wl, d, exp))
                        elif s == "cat":
                            runs[s].append(run_cat(wl, d, exp))
                        elif s == "rlsup":
                            runs[s].append(run_rlsup(wl, d, exp, r))
                        elif s == "rlsup_paused":
                            runs[s].append(run_rlsup(wl, d, exp, r, paused=True))
                        else:
                            runs[s].append(run_supervisord(wl, d, exp, sv, sv_stamp))
                    print(f"  {name} run {r + 1}: " + ", ".join(
                        f"{s} {runs[s][-1]['writer_s']:.3f}s" + ("" if runs[s][-1]["bytes_ok"] else " BYTES WRONG")
                        for s in setups), flush=True)
            finally:
                if sv is not None:
                    sv.stop()
            m = {s: pk.med([x["writer_s"] for x in runs[s]]) for s in setups}
            w = {"bytes": exp[0], "writes": wl["n"], "runs": runs, "median_writer_s": {s: round(v, 4) for s, v in m.items()},
                 "bytes_ok": {s: all(x["bytes_ok"] for x in runs[s]) for s in setups}}
            w["median_cpu_s"] = {s: {k: round(pk.med([x["cpu_s"][k] for x in runs[s]]), 3) for k in runs[s][0]["cpu_s"]}
                                 for s in setups}
            w["rlsup_vs_cat"] = round(m["rlsup"] / m["cat"], 3)
            w["rlsup_vs_file"] = round(m["rlsup"] / m["file"], 3)
            w["cat_vs_file"] = round(m["cat"] / m["file"], 3)
            w["rlsup_whole_command_s"] = round(pk.med([x["whole_s"] for x in runs["rlsup"]]), 3)
            w["file_whole_process_s"] = round(pk.med([x["whole_s"] for x in runs["file"]]), 3)
            if "rlsup_paused" in m:
                w["rlsup_paused_vs_cat"] = round(m["rlsup_paused"] / m["cat"], 3)
            if "supervisord" in m:
                w["supervisord_vs_cat"] = round(m["supervisord"] / m["cat"], 3)
                w["supervisord_vs_file"] = round(m["supervisord"] / m["file"], 3)
                w["rlsup_vs_supervisord"] = round(m["rlsup"] / m["supervisord"], 3)
            if "supervisord" in m and "supervisor_data" in w["median_cpu_s"]["rlsup"]:
                w["rlsup_data_cpu_vs_supervisord"] = round(
                    w["median_cpu_s"]["rlsup"]["supervisor_data"] / max(w["median_cpu_s"]["supervisord"]["supervisord"], 1e-3), 3)
            # Issue 44: the capture within 1.1x of a pipe into cat; the supervisor's CPU over the data at most 1.5x
            # supervisord's (on the line flood and the blocks). Earlier: the line flood within 1.10x of a file.
            w["targets"] = {"rlsup_vs_cat <= 1.1": w["rlsup_vs_cat"] <= 1.1}
            if name == "lines":
                w["final_step_ok"] = all(x.get("final_step_ok") for x in runs["rlsup"])
                w["targets"]["rlsup_vs_file <= 1.10"] = w["rlsup_vs_file"] <= 1.10
            elif "supervisord" in m:
                w["targets"]["rlsup <= supervisord"] = m["rlsup"] <= m["supervisord"]
            if "rlsup_data_cpu_vs_supervisord" in w and name in ("lines", "blocks"):
                w["targets"]["supervisor CPU <= 1.5x supervisord"] = w["rlsup_data_cpu_vs_supervisord"] <= 1.5
            result["workloads"][name] = w
            rows.append([name, *(f"{m[s]:.3f}" for s in setups), w["rlsup_vs_cat"], w["rlsup_vs_file"],
                         w.get("supervisord_vs_cat", "-"), w.get("rlsup_vs_supervisord", "-"),
                         w.get("rlsup_data_cpu_vs_supervisord", "-"),
                         "ok" if all(w["bytes_ok"].values()) else "WRONG",
                         ", ".join(f"{k}: {pk.verdict(v)}" for k, v in w["targets"].items())])
            pk.rmtree(d)
    finally:
        pk.rmtree(base)
    result["load_after"] = pk.loadavg()
    path = pk.save("flood", result, a.out)
    print()
    print(pk.table(rows, ["workload", *(f"{s} s" for s in setups), "rlsup/cat", "rlsup/file", "sv/cat",
                          "rlsup/sv", "CPU/sv", "bytes", "targets"]))
    for name, w in result["workloads"].items():
        extra = f", final step ok: {w['final_step_ok']}" if "final_step_ok" in w else ""
        print(f"{name}: whole `rlsup up` {w['rlsup_whole_command_s']:.3f}s vs whole `writer > file` "
              f"{w['file_whole_process_s']:.3f}s{extra}")
        print("    CPU s (medians): " + "; ".join(
            f"{s}: " + ", ".join(f"{k} {v:.3f}" for k, v in c.items()) for s, c in w["median_cpu_s"].items()))
        print(f"    the supervisor over the data alone (schedstat, from the writer's first byte to the last byte read): "
              f"{w['median_cpu_s']['rlsup'].get('supervisor_data', '-')}s")
        if "rlsup_paused" in w["runs"]:
            ex = [x["monitor_exact"] for x in w["runs"]["rlsup_paused"] if x.get("monitor_exact")]
            cats = w["runs"]["cat"]
            if ex:
                print(f"    monitor alone (supervisor paused), whole life: CPU {pk.med([x['cpu_s'] for x in ex]):.3f}s, "
                      f"minor faults {int(pk.med([x['minflt'] for x in ex]))}; cat: CPU "
                      f"{pk.med([x['cat']['cpu_s'] for x in cats]):.3f}s, minor faults "
                      f"{int(pk.med([x['cat']['minflt'] for x in cats]))}")
    print(f"load average before {result['load_before']}, after {result['load_after']}; "
          f"{result['machine']['cores']} cores; {path}")


if __name__ == "__main__":
    main()
