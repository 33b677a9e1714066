"""What `rlsup up` imports before its components have started (issue 44 item 3: start-up CPU).

The supervisor's start is mostly imports; the modules below are used later or by other commands (the fleet
client and SSH, the archive's readers, the exit diagnosis, py-spy's stacks, the metrics and notifications, the
checks, the report, the escaping of a terminal's output), so each is imported when first used. A real `rlsup up --headless` (what `up -d`'s daemon
runs, and the look at an existing run dir that the daemon leaves to the command that started it) is started in a
child that reports its sys.modules once the journal holds a `started` for each component. Not timed: the CPU
it takes is measured by tests/perf/bench_restart.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

DEFERRED = [f"rlsup.supervisor.{m}" for m in (
    "client.fleet", "client.ssh", "client.bridge", "rundir.archive", "rundir.stranded", "diagnosis.stacks",
    "diagnosis.engine", "diagnosis.run", "diagnosis.host", "preflight.checks", "render.report", "run.prometheus",
    "run.notify", "run.commands", "run.teardown", "run.stacks", "config.schema", "cli.slurm_up", "render.terminal",
)] + ["textual", "rich", "pynvml"]

# Runs the CLI in this interpreter; a thread waits for three `started` in the journal, prints sys.modules, and
# interrupts the run (a SIGINT: the orderly end, the components stopped).
PROBE = """
import json, os, runpy, signal, sys, threading, time
run_dir = sys.argv[sys.argv.index("--run-dir") + 1]
def watch():
    while True:
        try:
            with open(os.path.join(run_dir, "events.jsonl"), "rb") as f:
                if f.read().count(b'"kind": "started"') >= 3:
                    break
        except OSError:
            pass
        time.sleep(0.01)
    print("MODULES " + json.dumps(sorted(sys.modules)), flush=True)
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=watch, daemon=True).start()
sys.argv[0] = "rlsup"
runpy.run_module("rlsup.supervisor.cli", run_name="__main__")
"""

CONFIG = "name: start\ncomponents:\n" + "".join(
    f"  c{i}:\n    command: [\"sleep\", \"600\"]\n    restart: {{policy: never}}\n" for i in range(3))


def test_the_start_leaves_later_modules_unimported(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    r = subprocess.run([sys.executable, "-c", PROBE, "up", str(cfg), "--headless", "--skip-checks",
                        "--run-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=90,
                       env={**os.environ, "RLSUP_GPU_SAMPLER": "none"}, cwd=tmp_path)
    said = [line for line in r.stdout.splitlines() if line.startswith("MODULES ")]
    assert said, f"no report (rc {r.returncode}): {r.stdout[-2000:]}{r.stderr[-2000:]}"
    modules = set(json.loads(said[0].removeprefix("MODULES ")))
    assert "rlsup.supervisor.run.run" in modules  # the probe saw the start itself
    assert not [m for m in DEFERRED if m in modules]


def test_every_deferred_module_exists() -> None:
    """The list above is not vacuous: each rlsup name is a module that exists (a rename would otherwise pass)."""
    import importlib.util

    assert [m for m in DEFERRED if m.startswith("rlsup.") and importlib.util.find_spec(m) is None] == []
