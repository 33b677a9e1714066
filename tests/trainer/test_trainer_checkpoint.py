from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from rlsup.trainer import checkpoint, grpo, rollouts, task, train
from rlsup.trainer.policy import Policy, decode, encode, generate


def _write_rollouts(out: Path, steps: int, batch: int = 8, group: int = 4) -> None:
    """Rollouts from a fixed policy, as the orchestrator would write them."""
    torch.manual_seed(123)
    policy = Policy()
    gen = torch.Generator().manual_seed(7)
    for step in range(1, steps + 1):
        problems = task.problems_for_step(0, step, batch)
        prompts = [encode(p.prompt) for p in problems for _ in range(group)]
        ids, lps, _ = generate(policy, prompts, 1, [1.0] * len(prompts), gen)
        rewards = [[task.reward(decode(ids[i * group + j]), p.answer) for j in range(group)]
                   for i, p in enumerate(problems)]
        adv = grpo.group_advantages(rewards)
        samples = [rollouts.Sample(prompt=p.prompt, completion=decode(ids[i * group + j]),
                                   tokens=[decode(ids[i * group + j])], logprobs=lps[i * group + j],
                                   reward=rewards[i][j], advantage=adv[i][j], group=i)
                   for i, p in enumerate(problems) for j in range(group)]
        rollouts.write_step(out, step, samples, {"temperature": 1.0, "weights_step": step - 1})


def _tensors(directory: Path) -> tuple[dict, dict]:
    return (torch.load(directory / "model.pt", weights_only=True),
            torch.load(directory / "optimizer.pt", weights_only=True))


def test_resume_continues_bit_identically(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_rollouts(tmp_path, 6)
    args = ["--out", str(tmp_path), "--steps", "6", "--ckpt-every", "3", "--minibatches", "2"]
    assert train.main(args) == 0
    assert checkpoint.complete_steps(tmp_path) == [3, 6]
    straight_model, straight_opt = _tensors(checkpoint.checkpoint_dir(tmp_path, 6))
    straight_out = capsys.readouterr().out
    shutil.rmtree(checkpoint.checkpoint_dir(tmp_path, 6))

    torch.manual_seed(999)  # the checkpoint, not the caller, must decide the RNG state
    assert train.main(args + ["--resume-step", "3"]) == 0
    resumed_model, resumed_opt = _tensors(checkpoint.checkpoint_dir(tmp_path, 6))
    for name, value in straight_model.items():
        assert torch.equal(value, resumed_model[name]), name
    for key, state in straight_opt["state"].items():
        for name, value in state.items():
            assert torch.equal(value, resumed_opt["state"][key][name]), (key, name)
    # the progress lines of steps 4..6 are identical too (loss, entropy, grad norm, ...)
    resumed_out = capsys.readouterr().out
    def step_lines(text: str) -> list[str]:
        return [line.rsplit(" | wait_s", 1)[0] for line in text.splitlines() if line.startswith("Step ")]
    assert step_lines(resumed_out) == step_lines(straight_out)[3:]
    assert len(step_lines(resumed_out)) == 3


def test_training_changes_weights_and_incomplete_checkpoint_is_refused(tmp_path: Path) -> None:
    _write_rollouts(tmp_path, 2)
    assert train.main(["--out", str(tmp_path), "--steps", "2", "--ckpt-every", "1"]) == 0
    first = torch.load(checkpoint.checkpoint_dir(tmp_path, 1) / "model.pt", weights_only=True)
    second = torch.load(checkpoint.checkpoint_dir(tmp_path, 2) / "model.pt", weights_only=True)
    assert any(not torch.equal(first[k], second[k]) for k in first)
    (checkpoint.checkpoint_dir(tmp_path, 2) / checkpoint.MARKER).unlink()
    assert checkpoint.complete_steps(tmp_path) == [1]
    with pytest.raises(FileNotFoundError, match="STABLE"):
        checkpoint.read(tmp_path, 2)
