from __future__ import annotations

import math

import pytest
import torch

from rlsup.trainer import grpo
from rlsup.trainer.steplog import format_step


def test_advantages_are_zero_mean_unit_std_per_group() -> None:
    adv = grpo.group_advantages([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    for group in adv:
        assert sum(group) == pytest.approx(0.0, abs=1e-9)
        assert math.sqrt(sum(a * a for a in group) / len(group)) == pytest.approx(1.0, abs=1e-4)
    assert adv[0] == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-4)
    # the one success in a group of four gets the largest advantage
    assert adv[1][3] == pytest.approx(3 / math.sqrt(3), abs=1e-4)
    assert adv[1][0] == pytest.approx(-1 / math.sqrt(3), abs=1e-4)


def test_uniform_group_has_no_signal_and_unnormalised_option() -> None:
    assert grpo.group_advantages([[1.0, 1.0, 1.0]]) == [[0.0, 0.0, 0.0]]
    assert grpo.group_advantages([[0.0, 0.0]]) == [[0.0, 0.0]]
    assert grpo.group_advantages([[1.0, 0.0]], normalize_std=False) == [[0.5, -0.5]]


def test_loss_gradient_raises_logprob_of_positive_advantage() -> None:
    logits = torch.zeros(2, 3, requires_grad=True)
    tokens = torch.tensor([0, 1])
    logp = torch.log_softmax(logits, -1).gather(1, tokens[:, None]).squeeze(1)
    loss, stats = grpo.policy_loss(logp, logp.detach(), torch.tensor([1.0, -1.0]))
    loss.backward()
    # gradient descent moves logits along -grad: token 0 (A>0) up in row 0, token 1 (A<0) down in row 1
    assert -logits.grad[0, 0] > 0
    assert -logits.grad[1, 1] < 0
    assert loss.item() == pytest.approx(0.0, abs=1e-7)  # ratio 1, advantages sum to zero
    assert stats["clip_frac"] == 0.0


def test_loss_value_and_clipping() -> None:
    old = torch.log(torch.tensor([0.5, 0.5]))
    new = torch.log(torch.tensor([0.9, 0.5])).requires_grad_(True)  # ratio 1.8 on token 0
    loss, stats = grpo.policy_loss(new, old, torch.tensor([1.0, 1.0]), clip_eps=0.2)
    # clipped: token 0 contributes 1.2, token 1 contributes 1.0
    assert loss.item() == pytest.approx(-(1.2 + 1.0) / 2, abs=1e-6)
    assert stats["clip_frac"] == 0.5
    loss.backward()
    assert new.grad[0].item() == 0.0  # beyond the clip range a positive advantage pushes no further
    assert new.grad[1].item() < 0.0


def test_step_line_shape() -> None:
    line = format_step(12, 200, {"reward": 0.4123, "loss": -0.02134, "tokens": 7, "bad": float("nan")})
    assert line == "Step 12/200 | reward 0.412 | loss -0.0213 | tokens 7"
    with pytest.raises(ValueError):
        format_step(1, 2, {"Bad-Name": 1.0})
