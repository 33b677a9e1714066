"""dependency_down on real processes: a consumer logging connection errors toward a dead server."""

from __future__ import annotations

from tests.conftest import free_port, kinds, write_config

CONSUMER = ("import socket, time\\n"
            "while True:\\n"
            "    try:\\n"
            "        socket.create_connection(('127.0.0.1', {port}), timeout=1).close()\\n"
            "        print('request ok', flush=True)\\n"
            "    except OSError as e:\\n"
            "        print(f'ConnectionRefusedError: {{e}}', flush=True)\\n"
            "    time.sleep(0.2)")


def test_dead_server_is_restarted_not_its_consumer(tmp_path, headless):
    port = free_port()
    cfg = write_config(tmp_path, f"""
        name: dep
        components:
          server:
            command: ["{{py}}", "{{scripts}}/http_server.py", "{port}", "{tmp_path}/down"]
            ready: {{tcp: "127.0.0.1:{port}", timeout: 20}}
            restart: {{policy: never}}
          client:
            command: ["{{py}}", "-u", "-c", "{CONSUMER.format(port=port)}"]
            depends_on: {{server: ready}}
    """)
    h = headless(cfg)
    h.wait_event(lambda e: e["kind"] == "started" and e["component"] == "client", what="client started")
    server_pid = next(e["pid"] for e in h.events() if e["kind"] == "started" and e["component"] == "server")
    import os
    import signal

    os.kill(server_pid, signal.SIGKILL)  # the inference server dies; policy never: it stays down
    flag = h.wait_event(lambda e: e["kind"] == "flag" and e["type"] == "dependency_down", what="dependency_down")
    assert flag["component"] == "client"
    assert "server" in flag["message"] and "restarting server, not client" in flag["action"]
    assert any("ConnectionRefusedError" in line for line in flag["evidence"])
    h.wait_event(lambda e: e["kind"] == "started" and e["component"] == "server" and e["attempt"] == 2,
                 what="server restarted by rlsup")
    h.wait_event(lambda e: e["kind"] == "flag_cleared" and e["component"] == "client", what="flag cleared")
    assert "exited" not in kinds(h.events(), "client")  # the victim was left alone
    h.terminate()
    assert h.wait() == 0


def test_consumers_stopped_when_the_dependency_stays_down(tmp_path, headless):
    port = free_port()
    cfg = write_config(tmp_path, f"""
        name: dep2
        dependency_budget: 3
        components:
          server:
            command: ["{{py}}", "-c", "import sys, time; time.sleep(1.5); sys.exit(3)"]
            restart: {{policy: never}}
          client:
            command: ["{{py}}", "-u", "-c", "{CONSUMER.format(port=port)}"]
            depends_on: [server]
    """)
    h = headless(cfg)
    stop = h.wait_event(lambda e: e["kind"] == "flag" and e["type"] == "dependency_down"
                        and e["component"] == "server", timeout=40, what="consumers stopped")
    assert "stopping client" in stop["message"]
    h.wait_event(lambda e: e["kind"] == "stopped" and e["component"] == "client", what="client stopped")
    assert h.wait(30) == 1  # the server is fatal and nothing else runs: the run ends as failed
