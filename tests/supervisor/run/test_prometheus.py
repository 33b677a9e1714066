"""The Prometheus collector against a folded state: names, labels, units, what is left out."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from supervisor.records import events as ev
from supervisor.records import state as state_mod
from supervisor.run.prometheus import StateCollector, metric_name


def _state() -> dict:
    s = state_mod.initial({"name": "r"}, ["trainer", "infer"])
    # its last attempt killed by a signal, folded from the event as the journal holds it (the signal by name)
    state_mod.apply(s, ev.parse(ev.ComponentExited("trainer", signal="SIGKILL", attempt=2).to_dict(ts=90.0, seq=1)))
    t = s["components"]["trainer"]
    t.update(state="running", attempt=3, restarts=2, started_at=100.0, step=40, total=100, rate=2.0, eta_s=30.0,
             metrics={"reward": 0.5, "loss/policy": 1.25, "note": "text"},
             resources={"cpu_pct": 150.0, "rss_mb": 2.0, "gpu_mb": 1.0},
             log={"offset": 4096},
             flags=[{"type": "stall"}, {"type": "stall"}, {"type": "oom"}])
    s["gpus"] = [{"index": 0, "util_pct": 50.0, "mem_used_mb": 3.0, "mem_total_mb": 8.0}]
    return state_mod.view(s, 110.0)


def _samples(state: dict) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(StateCollector(lambda: state))
    text = generate_latest(reg).decode()
    return {(smp.name, tuple(sorted(smp.labels.items()))): smp.value
            for fam in text_string_to_metric_families(text) for smp in fam.samples}


def test_component_metrics_in_base_units() -> None:
    m = _samples(_state())
    tr = (("component", "trainer"),)
    assert m[("rlsup_component_state", (("component", "trainer"), ("state", "running")))] == 1.0
    assert m[("rlsup_component_state", (("component", "infer"), ("state", "pending")))] == 1.0
    assert m[("rlsup_component_state", (("component", "trainer"), ("state", "pending")))] == 0.0
    assert m[("rlsup_component_attempts_total", tr)] == 3.0
    assert m[("rlsup_component_restarts_total", tr)] == 2.0
    assert m[("rlsup_component_up_seconds", tr)] == 10.0
    assert m[("rlsup_component_last_exit_code", tr)] == -9.0
    assert m[("rlsup_component_step", tr)] == 40.0
    assert m[("rlsup_component_total_steps", tr)] == 100.0
    assert m[("rlsup_component_rss_bytes", tr)] == 2 * 1024 * 1024
    assert m[("rlsup_component_gpu_memory_bytes", tr)] == 1024 * 1024
    assert m[("rlsup_component_cpu_ratio", tr)] == 1.5
    assert m[("rlsup_component_log_bytes", tr)] == 4096.0
    assert m[("rlsup_metric_reward", tr)] == 0.5
    assert m[("rlsup_metric_loss_policy", tr)] == 1.25
    assert m[("rlsup_component_flags", (("component", "trainer"), ("type", "stall")))] == 2.0
    assert m[("rlsup_gpu_memory_used_bytes", (("gpu", "0"),))] == 3 * 1024 * 1024
    assert m[("rlsup_gpu_utilization_ratio", (("gpu", "0"),))] == 0.5


def test_unknown_values_are_left_out_not_zero() -> None:
    m = _samples(_state())
    infer = (("component", "infer"),)
    assert ("rlsup_component_step", infer) not in m  # no step parsed yet: no sample, never a fake 0
    assert ("rlsup_component_last_exit_code", infer) not in m
    assert not any(k[0] == "rlsup_metric_note" for k in m)  # text metrics are not numbers


def test_metric_names_are_prometheus_names() -> None:
    assert metric_name("loss/policy") == "rlsup_metric_loss_policy"
    assert metric_name("KL-div.mean") == "rlsup_metric_kl_div_mean"
