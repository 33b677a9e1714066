from __future__ import annotations

import torch

from rlsup.trainer import task
from rlsup.trainer.policy import VOCAB, Policy, decode, encode, generate


def test_reward_is_exact_match() -> None:
    assert task.reward("7", "7") == 1.0
    assert task.reward(" 7 ", "7") == 1.0
    assert task.reward("8", "7") == 0.0
    assert task.reward("77", "7") == 0.0
    assert task.reward("", "7") == 0.0


def test_problems_are_correct_and_deterministic_per_step() -> None:
    problems = task.all_problems()
    assert len(problems) == 55
    for p in problems:
        a, b = p.prompt.rstrip("=").split("+")
        assert int(p.answer) == int(a) + int(b) <= 9
        encode(p.prompt + p.answer)  # everything is in the vocabulary
    assert task.problems_for_step(0, 5, 16) == task.problems_for_step(0, 5, 16)
    assert task.problems_for_step(0, 5, 16) != task.problems_for_step(0, 6, 16)


def test_untrained_policy_scores_about_chance() -> None:
    torch.manual_seed(0)
    policy = Policy()
    problems = task.problems_for_step(0, 1, 200)
    ids, lps, _ = generate(policy, [encode(p.prompt) for p in problems], 1, [1.0] * 200,
                           torch.Generator().manual_seed(0))
    mean = sum(task.reward(decode(i), p.answer) for i, p in zip(ids, problems, strict=True)) / 200
    assert 0.0 < mean < 0.25  # chance is 1/13
    assert all(len(lp) == 1 and lp[0] < 0 for lp in lps)


def test_tokenizer_round_trip_and_rejects_unknown() -> None:
    assert decode(encode("3+4=7")) == "3+4=7"
    assert len(VOCAB) == 13
    try:
        encode("x")
    except ValueError as exc:
        assert "'x'" in str(exc)
    else:
        raise AssertionError("encode accepted a character outside the vocabulary")
