"""Machines without cgroup v2 or inotify (old kernels, some containers): rlsup tracks processes through
the monitors' subtrees and polls the logs, and nothing else changes."""

from __future__ import annotations

import json

from tests.conftest import PATIENCE, pid_alive, read_events, wait_for, write_config


def test_without_cgroups_and_inotify_everything_still_works(tmp_path, headless):
    cfg = write_config(tmp_path, """
        components:
          stepper:
            command: ["{py}", "-c", "import os, time\\nfor i in range(1, 6):\\n    print(f'Step {i}/5 | loss 0.5', flush=True)\\n    time.sleep(0.1)\\nif os.fork() == 0:\\n    os.setsid()\\n    open('grandchild.pid', 'w').write(str(os.getpid()))\\n    os.execve('/bin/sleep', ['sleep', '300'], {{}})\\ntime.sleep(0.5)\\nraise SystemExit(2)"]
            progress: {preset: rlsup}
            restart: {policy: never}
    """)
    h = headless(cfg, env={"RLSUP_CGROUPS": "off", "RLSUP_INOTIFY": "off"})
    assert h.wait(60) == 1
    ev = read_events(tmp_path / "run")
    run = next(e for e in ev if e["kind"] == "run_started")
    assert run["tracking"].startswith("monitor subreaper (disabled by RLSUP_CGROUPS=off)")
    exited = next(e for e in ev if e["kind"] == "exited")
    assert exited["exit_code"] == 2 and exited["step"] == 5  # output read by polling, to the last line
    state = json.loads((tmp_path / "run" / "state.json").read_text())
    assert state["components"]["stepper"]["step"] == 5
    # The grandchild it left (setsid, environment cleared: no marker to find it by) was found through the
    # monitor's subtree, its subreaper, and ended.
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    wait_for(lambda: not pid_alive(grandchild), PATIENCE, what="the grandchild to be ended")
    assert "inotify unavailable (disabled by RLSUP_INOTIFY=off); polling logs" in h.output
