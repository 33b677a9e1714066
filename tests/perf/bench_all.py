"""Every side-by-side benchmark of issues 15 and 20, one after the other, then one table of figures vs targets.

    python tests/perf/bench_all.py            # full figures (about 15 minutes on 2 cores)
    python tests/perf/bench_all.py --quick    # shorter windows and fewer repeats (about 5 minutes)
    python tests/perf/bench_all.py --summary  # only the table, from tests/perf/results/*.json

Runs bench_idle, bench_flood, bench_sigstop, bench_memory and bench_chatty (each also runs alone:
see its --help) in fresh interpreters, so one's leftovers never weigh on the next, with a pause of up
to a minute before each for the load average to come down. Run it on a quiet
machine: every figure is taken side by side with its reference, but a busy machine still adds noise.
The load average at the start and end of each benchmark is in its JSON and in the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import perfkit as pk  # noqa: E402

# name: (full args, quick args). Idle first, while nothing of ours has run yet; the 200-process
# benchmarks last, as they leave the load average high for minutes.
BENCHES: dict[str, tuple[list[str], list[str]]] = {
    "idle": ([], ["--seconds", "30"]),
    "flood": ([], ["--repeat", "1"]),
    "sigstop": ([], ["--seconds", "10"]),
    "memory": ([], []),
    "chatty": ([], ["--seconds", "10"]),
}
SETTLE_MAX_S = 60.0


def settle() -> None:
    """Before each benchmark: up to a minute for the previous one's processes to be gone and the
    1-minute load average to fall below the core count (it never will on a busy machine)."""
    cores = os.cpu_count() or 1
    t0 = time.monotonic()
    time.sleep(5.0)
    while os.getloadavg()[0] > cores and time.monotonic() - t0 < SETTLE_MAX_S:
        time.sleep(2.0)


def load(name: str) -> dict[str, Any] | None:
    p = pk.RESULTS / f"{name}.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def f(x: Any, nd: int = 3) -> str:
    return f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def summary() -> str:
    rows: list[list[str]] = []

    def add(what: str, got: str, target: str, ok: bool | None, r: dict[str, Any] | None) -> None:
        la = f"{r['load_before'][0]:.1f}-{r['load_after'][0]:.1f}" if r else "-"
        rows.append([what, got, target, pk.verdict(ok), la])

    fl = load("flood")
    if fl:
        for name, w in fl["workloads"].items():
            m = w["median_writer_s"]
            sv = f", supervisord {f(m['supervisord'])}s ({f(w['supervisord_vs_cat'], 2)}x cat)" if "supervisord" in m else ""
            got = (f"rlsup {f(m['rlsup'])}s = {f(w['rlsup_vs_cat'], 2)}x cat ({f(m['cat'])}s), "
                   f"{f(w['rlsup_vs_file'], 2)}x file ({f(m['file'])}s){sv}; bytes ok: {all(w['bytes_ok'].values())}")
            for k, ok in w["targets"].items():
                add(f"flood {name} ({w['bytes'] / 1e6:.0f} MB)", got, k, ok, fl)
                got = '"'
            add(f"flood {name}: whole `rlsup up`", f"{f(w['rlsup_whole_command_s'])}s vs `writer > file` "
                f"{f(w['file_whole_process_s'])}s", "-", None, fl)
            if "final_step_ok" in w:
                add("flood lines: final step in state.json", str(w["final_step_ok"]), "= last step printed",
                    w["final_step_ok"], fl)
    ch = load("chatty")
    if ch:
        for n, c in ch["counts"].items():
            got = (f"rlsup {c['rlsup_cpu_pct']}% (supervisor {c['rlsup_supervisor_cpu_pct']}%, monitors "
                   f"{c['rlsup_monitors_cpu_pct']}%), supervisord {c.get('supervisord_cpu_pct', '-')}%; drain rlsup "
                   f"{c['rlsup_drain_max_s']}s, supervisord {c.get('supervisord_drain_max_s', '-')}s; supervisor threads "
                   f"{c['rlsup_supervisor_threads']} (all rlsup processes {c.get('rlsup_threads_all_processes', '-')}); "
                   f"ring = log: {c.get('rlsup_ring_matches_log', '-')}")
            add(f"chatty {n} x {ch['rate']:g} lines/s, {ch['seconds']:g}s", got, "", None, ch)
        for k, ok in ch["targets"].items():
            add("chatty", "", k, ok, ch)
    me = load("memory")
    if me:
        r = me["rlsup"]
        m = r["monitors"]
        got = (f"supervisor RSS {r['supervisor']['rss_mb']} MB (peak {r['supervisor']['hwm_mb']}); monitors each "
               f"RSS {m['rss_mb']['median']} / PSS {m['pss_mb']['median']} / USS {m['uss_mb']['median']} MB, all "
               f"{m['count']}: PSS {m['pss_mb']['sum']} MB; supervisord RSS {me.get('supervisord', {}).get('rss_mb', '-')} MB")
        for k, ok in me["targets"].items():
            add(f"memory {me['components']} full rings", got, k, ok, me)
    idl = load("idle")
    if idl:
        c = idl["cpu"]
        mons = idl["memory"]["monitors"]
        watching = c.get("supervisor, watching", {}).get("pct_sched", "-")
        got = (f"supervisor {c['supervisor']['pct_sched']}% ({watching}% watching 3 directories), monitors "
               f"{c['monitors']['pct_sched']}%, zygote "
               f"{c['zygote']['pct_sched']}%, supervisord {c.get('supervisord', {}).get('pct_sched', '-')}% "
               f"({idl['seconds']:g}s); per monitor USS {mons[0]['uss_mb'] if mons else '-'} MB, "
               f"PSS {mons[0]['pss_mb'] if mons else '-'} MB")
        for k, ok in idl["targets"].items():
            add(f"idle, {idl['components']} components", got, k, ok, idl)
    ss = load("sigstop")
    if ss:
        r = ss["setups"]["rlsup"]
        sv = ss["setups"].get("supervisord")
        got = (f"rlsup {int(r['lines_stopped'])} / {int(r['lines_free'])} lines = {r['ratio']}" +
               (f"; supervisord {int(sv['lines_stopped'])} / {int(sv['lines_free'])} = {sv['ratio']}" if sv else "") +
               f"; logs complete: {r['logs_ok']}")
        for k, ok in ss["targets"].items():
            add(f"SIGSTOP of the supervisor {ss['seconds']:g}s", got, k, ok, ss)
    return pk.table(rows, ["benchmark", "figures (medians)", "target", "verdict", "load avg"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--summary", action="store_true", help="print the table from the last results only")
    ap.add_argument("--only", default=",".join(BENCHES))
    a = ap.parse_args()
    if not a.summary:
        for name in a.only.split(","):
            full, quick = BENCHES[name]
            cmd = [pk.PY, str(HERE / f"bench_{name}.py"), *(quick if a.quick else full)]
            settle()
            print(f"== {' '.join(cmd[1:])}  (load {pk.loadavg()})", flush=True)
            subprocess.run(cmd, check=False)
    print()
    print(summary())
    print(f"{pk.machine()['cores']} cores")


if __name__ == "__main__":
    main()
