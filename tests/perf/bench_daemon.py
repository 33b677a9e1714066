"""Benchmarks for the daemon and its clients (issue 3), measured side by side in one run.

    python tests/perf/bench_daemon.py [--lines 500000] [--repeat 3]

1. Slow clients: a component floods N lines; its lifetime (from the go signal to its `exited`
   event) with no client, with one subscriber that never reads, and with one that reads
   everything. Ratios against "no client"; medians of alternated runs.
2. Snapshot on attach: hello + subscribe with 10,000 lines of scrollback for each of 3 components,
   over the unix socket (what a local attach does; SSH adds only the link).
3. `rlsup status` end to end: the wall time of the CLI process (interpreter start included).

Results go to stdout and tests/perf/results/daemon.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE.parent / "scripts"
PY = sys.executable
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "RLSUP_GPU_SAMPLER": "none"}
sys.path.insert(0, str(HERE.parent.parent))

from rlsup.supervisor.client.session import Client  # noqa: E402
from rlsup.supervisor.records import protocol  # noqa: E402


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "rlsup.supervisor.cli", *args], capture_output=True, text=True, env=ENV,
                          timeout=timeout)


def events(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]


def wait(pred, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise TimeoutError


def flood_once(tmp: Path, i: int, n: int, client: str) -> float:
    go = tmp / f"go{i}"
    cfg = tmp / f"flood{i}.yaml"
    code = (f"import os, runpy, sys, time\\nwhile not os.path.exists({str(go)!r}): time.sleep(0.005)\\n"
            f"sys.argv = ['flood', '{n}']\\nrunpy.run_path({str(SCRIPTS / 'flood.py')!r})")
    cfg.write_text(f'name: flood{i}\ncomponents:\n  flood:\n    command: ["{PY}", "-c", "{code}"]\n'
                   "    restart: {policy: never}\n")
    run_dir = tmp / f"run{i}"
    up = cli("up", str(cfg), "-d", "--skip-checks", "--run-dir", str(run_dir))
    assert up.returncode == 0, up.stderr
    sock = run_dir / "rlsup.sock"
    s = None
    reader = None
    if client != "none":
        s = socket.socket(socket.AF_UNIX)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(str(sock))
        s.sendall(protocol.encode({"id": 1, "op": "hello", "version": protocol.VERSION, "client": "bench"})
                  + protocol.encode({"id": 2, "op": "subscribe", "lines": 0}))
        if client == "reading":
            import threading

            def drain() -> None:
                try:
                    while s.recv(1 << 20):
                        pass
                except OSError:
                    pass

            reader = threading.Thread(target=drain, daemon=True)
            reader.start()
    time.sleep(0.3)
    t_go = time.time()
    go.touch()
    ev = wait(lambda: next((e for e in events(run_dir) if e["kind"] == "exited"), None))
    elapsed = ev["ts"] - t_go
    size = (run_dir / "logs" / "flood.log").stat().st_size
    assert size > n * 80, f"log incomplete: {size} bytes"
    if s is not None:
        s.close()
    cli("down", "--run-dir", str(run_dir))
    return elapsed


def snapshot_time(tmp: Path, lines: int) -> tuple[float, int]:
    cfg = tmp / "snap.yaml"
    script = tmp / "lines.py"
    script.write_text("import sys, time\nname, n = sys.argv[1], int(sys.argv[2])\n"
                      "for j in range(n):\n    print(f'{name} line {j:06d} ' + 'x' * 80)\n"
                      "sys.stdout.flush()\ntime.sleep(600)\n")
    body = "".join(f'  c{i}:\n    command: ["{PY}", "{script}", "c{i}", "{lines}"]\n' for i in range(3))
    cfg.write_text("name: snap\ncomponents:\n" + body)
    run_dir = tmp / "snaprun"
    assert cli("up", str(cfg), "-d", "--skip-checks", "--run-dir", str(run_dir)).returncode == 0
    try:
        def full() -> bool:
            st = json.loads(cli("status", "--json", "--run-dir", str(run_dir)).stdout or "{}")
            return bool(st) and all(os.path.getsize(run_dir / "logs" / f"c{i}.log") > lines * 90 for i in range(3))

        wait(full)
        time.sleep(0.5)

        async def attach() -> tuple[float, int]:
            t0 = time.perf_counter()
            c = await Client.open_unix(run_dir / "rlsup.sock", name="bench")
            snap = await c.subscribe(lambda m: None, lines=10_000)
            dt = time.perf_counter() - t0
            await c.close()
            return dt, sum(len(b["lines"]) for b in snap["logs"].values())

        times = [asyncio.run(attach()) for _ in range(5)]
        status = []
        for _ in range(7):
            t0 = time.perf_counter()
            r = cli("status", "--run-dir", str(run_dir))
            status.append(time.perf_counter() - t0)
            assert r.returncode == 0
        return statistics.median(t for t, _ in times), times[0][1], statistics.median(status)
    finally:
        cli("down", "--run-dir", str(run_dir))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=500_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    out: dict = {"lines": args.lines, "repeat": args.repeat}
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        runs: dict[str, list[float]] = {"none": [], "stalled": [], "reading": []}
        i = 0
        for _ in range(args.repeat):
            for mode in runs:  # alternated, so machine noise hits every mode alike
                i += 1
                runs[mode].append(flood_once(tmp, i, args.lines, mode))
        med = {k: statistics.median(v) for k, v in runs.items()}
        out["flood_s"] = {k: round(v, 3) for k, v in med.items()}
        out["ratio_stalled_vs_none"] = round(med["stalled"] / med["none"], 3)
        out["ratio_reading_vs_none"] = round(med["reading"] / med["none"], 3)
        snap_s, snap_lines, status_s = snapshot_time(tmp, 10_000)
        out["snapshot_attach_s"] = round(snap_s, 3)
        out["snapshot_lines"] = snap_lines
        out["status_cli_s"] = round(status_s, 3)
    print(json.dumps(out, indent=2))
    res = HERE / "results"
    res.mkdir(exist_ok=True)
    (res / "daemon.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
