"""Issue 42: a command a component of the run sends (the trainer's `rlsup restart inference` after a reload broke
the engine) is that component's in the journal, with its reason; the user's own commands stay the user's."""

from __future__ import annotations

from tests.conftest import write_config

CLIENT = ("import os, subprocess, sys, time\\n"
          "if not os.path.exists(sys.argv[1]):\\n"
          "    open(sys.argv[1], 'w').close()\\n"
          "    subprocess.run([sys.executable, '-m', 'rlsup.supervisor.cli', 'restart', 'server', '--reason', "
          "'its reload broke it'], check=True)\\n"
          "time.sleep(600)")


def test_a_restart_sent_by_a_component_names_it(tmp_path, headless) -> None:
    cfg = write_config(tmp_path, f"""
        components:
          server:
            command: ["{{py}}", "-c", "import time; print('up', flush=True); time.sleep(600)"]
            ready: {{log: up, timeout: 30}}
          client:
            command: ["{{py}}", "-c", "{CLIENT}", "{tmp_path / 'sent'}"]
            depends_on: {{server: ready}}
    """)
    h = headless(cfg)
    cmd = h.wait_event(lambda e: e["kind"] == "command" and e["component"] == "server", timeout=60,
                       what="the client's restart")
    assert cmd["by"] == "component client" and cmd["reason"] == "its reload broke it", cmd
    again = h.wait_event(lambda e: e["kind"] == "started" and e["component"] == "server" and e["attempt"] == 2,
                         timeout=60, what="the server restarted")
    cause = again["cause"]
    assert cause["by"] == "component" and cause["component"] == "client" and cause["seq"] == cmd["seq"], cause
    assert "its reload broke it" in cause["reason"]
    stopped = [e for e in h.events() if e["kind"] in ("stopping", "stopped") and e["component"] == "server"]
    assert stopped and all(e["by"] == "component client" for e in stopped), stopped
