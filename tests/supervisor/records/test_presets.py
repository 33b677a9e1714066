"""Progress presets against real log excerpts (tests/fixtures/presets/<name>.log) and lines that must not match."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from rlsup.supervisor.records.presets import PRESETS, Extractor, Preset, safe_name
from tests.supervisor.records.preset_reference import parse_line

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "presets"


def fixture_lines(name: str) -> list[str]:
    text = (FIXTURES / f"{name}.log").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0].startswith("# source: "), f"{name}.log must start with a '# source:' line"
    return [ln for ln in lines[1:] if not ln.startswith("# ")]


def matches(name: str) -> list[tuple[str, tuple[int | None, int | None, dict[str, float]]]]:
    """(line, parse result) for every fixture line the preset reads anything from."""
    out = []
    for line in fixture_lines(name):
        step, total, metrics = parse_line(PRESETS[name], line)
        if step is not None or total is not None or metrics:
            out.append((line, (step, total, metrics)))
    return out


def assert_metrics(got: dict[str, float], want: dict[str, float]) -> None:
    for k, v in want.items():
        assert k in got, f"metric {k!r} missing from {sorted(got)}"
        if math.isnan(v):
            assert math.isnan(got[k]), k
        else:
            assert got[k] == pytest.approx(v), k


def test_preset_registry() -> None:
    assert set(PRESETS) == {"rlsup", "prime-rl", "areal", "verl", "trl", "hf"}
    assert PRESETS["hf"] is PRESETS["trl"]
    for key, preset in PRESETS.items():
        assert isinstance(preset, Preset) and preset.extractors
        assert preset.versions and preset.source
        assert key == preset.name or key == "hf"
        for ex in preset.extractors:
            assert ex.kind in ("regex", "pydict")
            re.compile(ex.pattern)  # every pattern compiles with the stdlib
            if ex.keys:
                assert {"key", "value"} <= set(re.compile(ex.keys).groupindex)
            if ex.kind == "pydict":
                assert "dict" in re.compile(ex.pattern).groupindex
        assert (FIXTURES / f"{preset.name}.log").is_file()


def test_rlsup_fixture() -> None:
    got = matches("rlsup")
    assert [r[:2] for _, r in got] == [(11, 200), (12, 200), (13, 200), (200, 200)]
    assert got[1][1][2] == {"reward": 0.412, "loss": -0.0213, "kl": 0.01}
    assert_metrics(got[2][1][2], {"grad_norm": 0.87, "tokens_per_s": 1523.4})
    assert math.isnan(got[3][1][2]["loss"])


def test_prime_rl_fixture() -> None:
    got = matches("prime-rl")
    assert [r[:2] for _, r in got] == [(0, None), (0, None), (1, None), (1, None)]
    orch_old, trainer_old, orch_new, trainer_new = (r[2] for _, r in got)
    assert orch_old == {
        "time": 98.02,
        "reward": 0.4353,
        "throughput": 1843.2,
        "seq_length": 2069.9,
        "async_level": 1.0,
        "max_off_policy_level": 0.0,
    }
    assert trainer_old == {"time": 289.52, "loss": -0.0036, "entropy": 1.0338, "mismatch_kl": 0.3523}
    assert orch_new == {"reward": 0.7812, "trainable": 64.0, "turns": 31.1, "error": 0.0, "truncation": 0.0}
    assert trainer_new == {
        "loss": -0.0003,
        "entropy": 0.3717,
        "mismatch_kl": 0.0249,
        "grad_norm": 0.056,
        "lr": 1e-06,
        "throughput": 8712.0,
        "mfu": 5.4,
        "peak_mem": 89.6,
        "max_vio": 6.0787,
        "routing_conf": 0.0992,
    }


def test_prime_rl_json_log_mode() -> None:
    """prime-rl's --log.json sink puts the same message inside a JSON object."""
    line = (
        '{"timestamp": "2026-01-05T05:02:21.123+00:00", "level": "SUCCESS", '
        '"message": "Step 7 | 1m 02s | Loss 0.0123 | Entropy 0.41", "module": "train", "line": 412}'
    )
    assert parse_line(PRESETS["prime-rl"], line) == (7, None, {"loss": 0.0123, "entropy": 0.41})


def test_areal_fixture() -> None:
    got = matches("areal")
    steps = [r[:2] for _, r in got]
    assert steps == [(5, 400), (None, None), (None, None), (None, None), (6, 400)]
    assert got[0][1][2] == {}
    assert got[1][1][2] == {"grpo_actor_task_reward_avg": 0.4125, "grpo_actor_update_successful": 1.0}
    assert got[2][1][2] == {"timeperf_train_step": 12.345, "grpo_actor_seq_len_max": 4312.0}
    assert got[3][1][2] == {
        "ppo_actor_new_logp_avg": -0.28348,
        "ppo_actor_behave_imp_weight_max": 1.1531,
        "ppo_actor_advantages_avg": 0.0,
        "ppo_actor_head_offpolicyness_avg": 1.0,
    }


def test_verl_fixture() -> None:
    got = matches("verl")
    assert [r[:2] for _, r in got] == [(4, None), (5, None), (5, 235)]
    first = got[0][1][2]
    assert len(first) == 18
    assert_metrics(
        first,
        {
            "actor_pg_loss": 0.025936965830624104,
            "actor_lr": 1e-06,
            "global_seqlen_min": 192519.0,
            "perf_mfu_actor": 0.45631487346036326,
            "val_aux_omni_math_reward_mean_1": 0.16129032258064516,
            "val_core_math_acc_mean_1": 0.706,
        },
    )
    assert "step" not in first
    assert got[1][1][2] == {
        "training_global_step": 5.0,
        "training_epoch": 0.0,
        "actor_entropy": 0.412,
        "actor_pg_loss": -0.003,
        "critic_score_mean": 0.584,
        "response_length_mean": 231.93,
        "timing_s_step": 61.207,
    }
    assert got[2][1][2] == {}


def test_trl_fixture() -> None:
    got = matches("trl")
    assert [r[:2] for _, r in got] == [
        (3, 1562),
        (None, None),
        (None, None),
        (57, 570),
        (None, None),
        (None, None),
        (570, 570),
    ]
    assert_metrics(
        got[1][1][2],
        {
            "loss": 0.0,
            "grad_norm": 0.08656957000494003,
            "rewards_format_reward2": 1.0,
            "reward": 1.7171093285083772,
            "kl": 0.0005371240986278281,
            "epoch": 0.31,
        },
    )
    assert len(got[2][1][2]) == 12
    assert_metrics(got[4][1][2], {"loss": float("nan"), "grad_norm": float("nan"), "learning_rate": 4.5e-06})
    assert_metrics(got[5][1][2], {"train_runtime": 5732.1, "train_loss": 0.0021, "epoch": 1.0})
    assert PRESETS["hf"] is PRESETS["trl"]


NEGATIVES = {
    "rlsup": [
        "Micro Step 3/8 | loss 0.12",
        "Stepping 5/10 | loss 1",
        "epoch Step 5 of 10",
        "reward 0.412 | loss -0.0213",
    ],
    "prime-rl": [
        "05:01:50   DEBUG Micro Step 0/4 | Loss: -0.0012 | Entropy: 1.0338 [train.py::301]",
        "05:02:22    INFO Evaluated gsm8k (Step 0) | Reward 0.6120",
        "05:02:22    INFO Step 3/10 | Loss 0.1",
        "INFO Starting step 5 of training",
    ],
    "areal": [
        "[AReaL] 20251020-10:33:44.123 StatsLogger INFO: Epoch 1/10 Step 5/40",
        "├──────────────────┼─────────────┤",
        "╒══════════════════╤═════════════╕",
        "│ name │ value │",
        "Train step 5 done.",
    ],
    "verl": [
        "(WorkerDict pid=2121460) [Rank 0] actor step: 5, grad_norm: 0.49",
        "training/global_step:5 - actor/pg_loss:0.1",
        "Processed prompts: 100%|██████████| 8/8 [00:05<00:00,  1.42it/s]",
        "mystep:5 - a:1",
    ],
    "trl": [
        "Map: 100%|██████████| 7473/7473 [00:01<00:00, 5123.45 examples/s]",
        "Loading checkpoint shards: 100%|██████████| 2/2 [00:03<00:00,  1.52s/it]",
        "Processed prompts: 100%|██████████| 8/8 [00:05<00:00,  1.42it/s, est. speed input: 212.09 toks/s]",
        "Generating train split: 100%|██████████| 7473/7473 [00:00<00:00, 210000.00 examples/s]",
        " 50%|█████     | 1/2 [00:00<00:00, 12.3ba/s]",
        "{'model_name_or_path': 'Qwen/Qwen2.5-1.5B-Instruct', 'learning_rate': 5e-06}",
        "[INFO] [logging.py:107:log_dist] [Rank 0] time (ms) | fwd: 114577.10 | step: 105.42",
        "{'loss': 0.1, 'epoch': 0.5",  # truncated line: not a literal
    ],
}


@pytest.mark.parametrize(("name", "line"), [(n, ln) for n, lines in NEGATIVES.items() for ln in lines])
def test_negatives(name: str, line: str) -> None:
    assert parse_line(PRESETS[name], line) == (None, None, {})


def test_presets_do_not_cross_match_each_others_fixtures() -> None:
    """A step line of one stack gives no step under another stack's preset (metrics may overlap)."""
    owners = ["rlsup", "prime-rl", "areal", "verl", "trl"]
    for owner in owners:
        for line in fixture_lines(owner):
            for other in owners:
                if other == owner:
                    continue
                step, total, _ = parse_line(PRESETS[other], line)
                assert step is None, f"{other} read a step from {owner} line {line!r}"


def test_pydict_semantics_step_keys_and_string_numbers() -> None:
    p = Preset("t", (Extractor(kind="pydict", pattern=r"(?P<dict>\{.*\})"),), "v", "s")
    assert parse_line(p, "{'global_step': 7, 'loss': '0.25', 'flag': True, 'name': 'x'}") == (
        7,
        None,
        {"loss": 0.25},
    )
    assert parse_line(p, '{"step": 3, "reward/mean": 1}') == (3, None, {"reward_mean": 1.0})
    assert parse_line(p, "{'loss': -inf, 'kl': inf}")[2] == {"loss": float("-inf"), "kl": float("inf")}
    assert parse_line(p, "{not a dict}") == (None, None, {})


def test_regex_named_numeric_groups_become_metrics() -> None:
    p = Preset(
        "t",
        (Extractor(pattern=r"it (?P<step>\d+) of (?P<total>\d+) loss=(?P<loss>\S+) tag=(?P<tag>\w+)"),),
        "v",
        "s",
    )
    assert parse_line(p, "it 4 of 9 loss=0.5 tag=abc") == (4, 9, {"loss": 0.5})


def test_safe_name() -> None:
    assert safe_name("actor/pg_loss") == "actor_pg_loss"
    assert safe_name("val-core/math/acc/mean@1") == "val_core_math_acc_mean_1"
    assert safe_name("Grad. Norm") == "grad_norm"
    assert safe_name("Peak Mem.") == "peak_mem"
    assert safe_name("1st") == "m_1st"
    assert safe_name("///") == "value"


def test_verl_numpy2_scalar_reprs_are_metrics() -> None:
    """numpy >= 2: verl's concat_dict_to_str (pprint.pformat) prints np.float64(0.026); real log lines."""
    from rlsup.supervisor.records.progress import ProgressMatcher

    lines = [ln for ln in (FIXTURES / "verl_numpy2.log").read_text().splitlines() if not ln.startswith("#")]
    step, total, metrics = parse_line(PRESETS["verl"], lines[0])
    assert step == 71 and total is None
    assert metrics["actor_pg_loss"] == pytest.approx(-0.0006611689302644663)
    assert metrics["critic_vf_loss"] == pytest.approx(0.007003280876688223)
    assert metrics["actor_lr"] == pytest.approx(1e-06)
    assert metrics["actor_entropy"] == pytest.approx(0.1194450631737709)  # bare floats still read
    assert metrics["critic_score_mean"] == pytest.approx(0.63671875)
    assert parse_line(PRESETS["verl"], lines[1])[:2] == (71, 435)
    # the supervisor's chunk-level reader compiles the same patterns
    obs = ProgressMatcher(preset="verl").scan("\n".join(lines))
    assert obs[0].step == 71 and obs[0].metrics["actor_pg_loss"] == pytest.approx(-0.0006611689302644663)
