"""The `probe: {ray: ...}` key of a component: validated with FILE:LINE:COL like every other key."""

from __future__ import annotations

import pytest

from rlsup.supervisor.config.loader import ConfigError, load_config


def load(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return load_config(p)


def problems(tmp_path, text):
    with pytest.raises(ConfigError) as ei:
        load(tmp_path, text)
    return [str(p) for p in ei.value.problems]


def test_ray_probe_is_read_with_defaults_and_interpolation(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADHOST", "node-1")
    cfg = load(tmp_path, "components:\n  driver:\n    command: 'true'\n"
                         "    probe: {ray: {url: 'http://${HEADHOST}:8265/'}}\n")
    ray = cfg.components["driver"].probe.ray
    assert ray.url == "http://node-1:8265" and ray.interval == 2.0 and ray.timeout == 5.0 and ray.token_file is None
    assert load(tmp_path, "components:\n  d:\n    command: 'true'\n").components["d"].probe is None


def test_ray_probe_url_must_be_http(tmp_path):
    out = problems(tmp_path, "components:\n  d:\n    command: 'true'\n    probe:\n      ray: {url: 'head:8265'}\n")
    assert len(out) == 1 and out[0].startswith(f"{tmp_path}/c.yaml:5:") and "components.d.probe.ray.url" in out[0]
    assert "http://HEAD:8265" in out[0]


def test_ray_probe_unknown_key_and_bad_interval(tmp_path):
    out = problems(tmp_path, "components:\n  d:\n    command: 'true'\n    probe:\n"
                             "      ray: {url: 'http://h:8265', intervall: 2}\n")
    assert any(o.startswith(f"{tmp_path}/c.yaml:5:") and "intervall" in o and "interval" in o for o in out), out
    out = problems(tmp_path, "components:\n  d:\n    command: 'true'\n    probe:\n"
                             "      ray: {url: 'http://h:8265', interval: 0}\n")
    assert any("components.d.probe.ray.interval" in o for o in out), out


def test_probe_without_a_kind_says_what_to_write(tmp_path):
    out = problems(tmp_path, "components:\n  d:\n    command: 'true'\n    probe: {}\n")
    assert any(o.startswith(f"{tmp_path}/c.yaml:4:") and "ray: {url: http://HEAD:8265}" in o for o in out), out


def test_the_verl_ray_slurm_preset_loads_with_the_probe_and_ray_readiness():
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    cfg = load_config(root / "configs" / "presets" / "verl-ray-slurm.yaml")
    c = cfg.components
    head = "verl-ray-slurm-node-0"  # the login node's placeholder for the head's node
    assert c["ray-head"].ready.http == f"http://{head}:8265/api/gcs_healthz"
    assert c["ray-workers"].ready.log == "Ray runtime started" and c["ray-workers"].depends_on == {"ray-head": "ready"}
    assert c["trainer"].depends_on == {"ray-head": "ready", "ray-workers": "ready"}
    assert c["trainer"].probe.ray.url == f"http://{head}:8265"
    assert c["trainer"].env["RAY_ADDRESS"] == f"{head}:6379" and cfg.env["RAY_AUTH_MODE"] == "token"
