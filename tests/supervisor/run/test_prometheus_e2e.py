"""The Prometheus endpoint of a live run (issue 41, item 2): the demo with `metrics:` on, scraped over HTTP, and
by a real Prometheus server (Debian's `prometheus`) whose HTTP API then shows the trainer's step advance."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import free_port, rlsup, wait_for

ROOT = Path(__file__).resolve().parents[3]
PROMETHEUS = shutil.which("prometheus")


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def _sample(text: str, name: str, component: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(f'{name}{{component="{component}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture
def demo(tmp_path):
    """The demo config with the endpoint on, up with -d; down at the end."""
    port = free_port()
    text = (ROOT / "configs" / "demo.yaml").read_text()
    cfg = tmp_path / "demo.yaml"
    cfg.write_text(text + f"\nmetrics: {{port: {port}}}\n")
    env = {"RLSUP_DEMO_PORT": str(free_port()), "RLSUP_DEMO_STEPS": "3000", "RLSUP_GPU_SAMPLER": "none"}
    run_dir = tmp_path / "runs" / "demo"
    shutil.copytree(ROOT / "configs", tmp_path / "configs", ignore=shutil.ignore_patterns("presets"))
    rlsup("up", str(cfg), "-d", "--run-dir", str(run_dir), cwd=tmp_path, env=env, check=True, timeout=120)
    try:
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        rlsup("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=120)


def test_a_live_run_serves_its_components_metrics(demo):
    text = wait_for(lambda: (lambda t: t if (_sample(t, "rlsup_component_step", "trainer") or 0) > 0 else None)(
        _get(demo)), 120, 0.5, what="the trainer's step on the endpoint")
    assert 'rlsup_component_state{component="trainer",state="running"} 1.0' in text, text
    assert _sample(text, "rlsup_component_attempts_total", "trainer") == 1.0
    assert (_sample(text, "rlsup_component_total_steps", "trainer") or 0) == 3000
    assert any(line.startswith("rlsup_metric_reward{") for line in text.splitlines()), text


def test_a_real_prometheus_scrapes_a_live_run_and_sees_the_step_advance(demo, tmp_path):
    if PROMETHEUS is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is not installed: .ci/run installs Debian's `prometheus`")
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    target = urllib.parse.urlparse(demo).netloc
    (tmp_path / "prom.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs:\n  - job_name: rlsup\n    static_configs: [{{targets: ['{target}']}}]\n")
    web = free_port()
    prom = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prom.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{web}"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"))
    try:
        query = f"http://127.0.0.1:{web}/api/v1/query?" + urllib.parse.urlencode(
            {"query": 'rlsup_component_step{component="trainer"}'})

        def step() -> float | None:
            try:
                result = json.loads(_get(query))["data"]["result"]
            except OSError:
                return None
            return float(result[0]["value"][1]) if result else None

        first = wait_for(step, 120, 0.5, what="Prometheus to have scraped the trainer's step")
        later = wait_for(lambda: (lambda s: s if s is not None and s > first else None)(step()), 120, 0.5,
                         what="the step to advance in Prometheus")
        assert later > first
    finally:
        prom.terminate()
        prom.wait(timeout=30)


def test_check_refuses_a_metrics_port_in_use_with_its_line(tmp_path):
    import socket

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = held.getsockname()[1]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"components:\n  a:\n    command: ['true']\nmetrics:\n  port: {port}\n")
    try:
        r = rlsup("check", str(cfg), "--run-dir", str(tmp_path / "run"), cwd=tmp_path)
    finally:
        held.close()
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"c.yaml:5: error [metrics] metrics port {port} on 127.0.0.1 is already in use: held by" in r.stdout, r.stdout
    assert "fix: choose another `metrics: port:`" in r.stdout
