"""The reload record and per-sample weight labels (issue 42): which weights made each completion."""

from __future__ import annotations

import json
from pathlib import Path

from rlsup.trainer import pausewatch, reloads, rollouts
from rlsup.trainer.reloads import Label, Record


def test_a_completion_between_reloads_has_exactly_one_version() -> None:
    r = Record(seq=4, step=3)
    assert reloads.label(r, r) == Label(3)
    assert reloads.label(Record(), Record()) == Label(0)  # nothing loaded yet: the weights the server started with


def test_a_completion_across_a_paused_reload_straddles_but_is_not_mixed() -> None:
    before = Record(seq=4, step=3)
    during = Record(seq=6, step=3, state=reloads.RELOADING, to_step=4, paused=True)
    after = Record(seq=7, step=4)
    assert reloads.label(before, after) == Label(3, straddled=True)  # the old weights or the new, never both
    assert reloads.label(during, after) == Label(3, straddled=True)
    assert reloads.label(before, during) == Label(3, straddled=True)


def test_a_completion_across_an_unpaused_reload_is_mixed() -> None:
    before = Record(seq=4, step=3, unpaused=1)
    pausing = Record(seq=5, step=3, state=reloads.PAUSING, to_step=4, unpaused=1)  # /pause then failed
    during = Record(seq=6, step=3, state=reloads.RELOADING, to_step=4, paused=False, unpaused=1)
    after = Record(seq=8, step=4, unpaused=2)  # the server answered the reload (7), then runs again (8)
    assert reloads.label(before, after) == Label(3, straddled=True, mixed=True)
    assert reloads.label(pausing, after) == Label(3, straddled=True, mixed=True)
    assert reloads.label(during, after) == Label(3, straddled=True, mixed=True)
    assert reloads.label(before, during) == Label(3, straddled=True, mixed=True)  # answered while it swaps
    assert reloads.label(after, after) == Label(4)  # one set of weights once it is over


def test_a_completion_while_the_server_was_away_is_not_mixed() -> None:
    """vLLM died as the trainer pushed step 4 (its /pause failed, the reload got a 500): the trainer waits for the
    restarted server. Completions the restarted server made meanwhile come from one set of weights (seen on the
    real vLLM: 64 samples of a step were called mixed when the dead server's unpaused attempt was counted)."""
    failed = Record(seq=6, step=3, state=reloads.RELOADING, to_step=4, paused=False)
    waiting = Record(seq=7, step=3, state=reloads.RELOADING, to_step=4, paused=True)
    beat = Record(seq=9, step=3, state=reloads.RELOADING, to_step=4, paused=True)
    after = Record(seq=12, step=4)
    assert reloads.label(waiting, beat) == Label(3, straddled=True)
    assert reloads.label(waiting, after) == Label(3, straddled=True)
    assert reloads.label(failed, after).mixed  # sent while the attempt might swap weights under it


def test_the_engines_own_versions_win_and_a_foreign_version_is_none() -> None:
    assert reloads.from_versions([{"version": "5", "start": 0, "end": 9}]) == Label(5)
    assert reloads.from_versions([{"version": "4", "start": 0, "end": 3}, {"version": "5", "start": 3, "end": 9}]) \
        == Label(4, straddled=True, mixed=True)
    assert reloads.from_versions("7") == Label(7)
    assert reloads.from_versions("default") is None  # a server started on its own weights: the record decides
    assert reloads.from_versions([{"version": "default"}, {"version": "5"}]) is None


def test_the_recorder_brackets_each_reload_and_survives_a_restart(tmp_path: Path) -> None:
    rec = reloads.Recorder(tmp_path)
    rec.begin(1)
    assert reloads.read(tmp_path).state == reloads.PAUSING and reloads.read(tmp_path).to_step == 1
    rec.reloading(paused=False)
    got = reloads.read(tmp_path)
    assert (got.state, got.paused, got.unpaused) == (reloads.RELOADING, False, 0)
    rec.reloaded_unpaused()
    assert reloads.read(tmp_path).unpaused == 1
    rec.end(1)
    got = reloads.read(tmp_path)
    assert (got.state, got.step, got.to_step) == (reloads.SERVING, 1, None)
    again = reloads.Recorder(tmp_path)  # a restarted trainer continues the record
    again.begin(2)
    again.end(None)  # nothing loaded: still step 1
    assert reloads.read(tmp_path).step == 1 and reloads.read(tmp_path).seq > got.seq
    (tmp_path / reloads.NAME).write_text("{not json")
    assert reloads.read(tmp_path) == Record()


def test_off_policy_counts_each_sample_by_the_weights_that_made_it() -> None:
    def s(step: int | None, straddled: bool = False, mixed: bool = False) -> rollouts.Sample:
        return rollouts.Sample("p", "c", [], [], 0.0, 0.0, 0, weights_step=step, weights_straddled=straddled,
                               weights_mixed=mixed)

    # step 5 at async level 1: two samples by step 4's weights (on-policy), one by step 3's, one across the
    # reload from 3 to 4 without a pause
    got = rollouts.staleness([s(4), s(4), s(3), s(3, True, True)], 5, fallback=4)
    assert got == {"off_policy": 1, "off_policy_samples": 2, "straddled_samples": 1, "mixed_samples": 1}
    # what the step-level figure said before: the step read from latest.json after the batch, 0 here
    assert rollouts.staleness([s(None)] * 3, 5, fallback=4)["off_policy"] == 0
    # a straddle across a paused reload counts as off-policy, not as mixed
    assert rollouts.staleness([s(4, True)], 5, 4) == {"off_policy": 0, "off_policy_samples": 1,
                                                      "straddled_samples": 1, "mixed_samples": 0}


def test_samples_written_before_labels_existed_still_read(tmp_path: Path) -> None:
    d = tmp_path / "rollouts" / "step_1"
    d.mkdir(parents=True)
    (d / "rollouts.jsonl").write_text(json.dumps({"prompt": "p", "completion": "c", "tokens": [], "logprobs": [],
                                                  "reward": 1.0, "advantage": 0.0, "group": 0}) + "\n")
    (d / "meta.json").write_text(json.dumps({"step": 1, "num_samples": 1, "weights_step": 0}))
    samples, _ = rollouts.read_step(tmp_path, 1)
    assert samples[0].weights_step is None and not samples[0].weights_straddled


def test_a_pause_no_live_reload_explains_is_flagged_and_resumed_only_where_nothing_loaded() -> None:
    url = "http://127.0.0.1:1"
    live = Record(seq=9, step=3, state=reloads.PAUSING, to_step=4, owner="h:1")
    assert pausewatch.verdict(live, 1.0, url) is None  # a trainer draining the server right now
    msg, resume = pausewatch.verdict(live, pausewatch.PATIENCE_S, url)
    assert resume and "never began" in msg and "h:1" in msg
    msg, resume = pausewatch.verdict(Record(seq=9, step=3, state=reloads.RELOADING, to_step=4), 60.0, url)
    assert not resume and "half-loaded" in msg and "rlsup restart" in msg
    msg, resume = pausewatch.verdict(Record(seq=9, step=3), 0.0, url)
    assert not resume and f"curl -X POST {url}/resume" in msg
