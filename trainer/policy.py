"""The tiny character-level policy served by the inference server and trained by the trainer.

An MLP over a fixed window of the last ``window`` tokens (left-padded with ``PAD``): small enough to
sample and train in milliseconds on one CPU core, big enough to learn the task.  The tokenizer is
one token per character of ``VOCAB``, so text and tokens convert both ways without loss — which is
what lets the trainer recompute log-probabilities from the completion *text* the OpenAI API returns.

Weights on disk (a published weights dir or a checkpoint): ``model.pt`` (state dict) and
``config.json`` (the constructor arguments).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

VOCAB = "0123456789+= "
PAD = len(VOCAB)  # padding id: has an embedding, is never produced
_INDEX = {ch: i for i, ch in enumerate(VOCAB)}


def encode(text: str) -> list[int]:
    """Token ids of ``text``; raises ``ValueError`` naming the first character outside ``VOCAB``."""
    try:
        return [_INDEX[ch] for ch in text]
    except KeyError as exc:
        raise ValueError(f"character {exc.args[0]!r} is not in the vocabulary {VOCAB!r}") from None


def decode(ids: list[int]) -> str:
    return "".join(VOCAB[i] for i in ids)


@dataclass(frozen=True)
class PolicyConfig:
    window: int = 8
    embed: int = 16
    hidden: int = 128


class Policy(nn.Module):
    """Next-token distribution given the last ``window`` tokens."""

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__()
        self.config = config or PolicyConfig()
        c = self.config
        self.embed = nn.Embedding(len(VOCAB) + 1, c.embed)
        self.mlp = nn.Sequential(
            nn.Linear(c.window * c.embed, c.hidden), nn.ReLU(), nn.Linear(c.hidden, len(VOCAB))
        )

    def forward(self, context: torch.Tensor) -> torch.Tensor:
        """``context``: LongTensor [B, window] -> logits [B, len(VOCAB)]."""
        return self.mlp(self.embed(context).flatten(1))

    def windows(self, sequences: list[list[int]]) -> torch.Tensor:
        """Left-padded last-``window`` contexts of each sequence, as LongTensor [B, window]."""
        w = self.config.window
        rows = [([PAD] * w + seq)[-w:] for seq in sequences]
        return torch.tensor(rows, dtype=torch.long)


def scaled_log_softmax(logits: torch.Tensor, temperature: float | torch.Tensor) -> torch.Tensor:
    """Log-probabilities of the sampling distribution at ``temperature`` (0 means greedy, scored at 1)."""
    t = torch.as_tensor(temperature, dtype=logits.dtype)  # a float: a CPU scalar, which divides as the number did
    t = torch.where(t > 0, t, torch.ones_like(t))
    return torch.log_softmax(logits / (t.unsqueeze(-1) if t.ndim else t), dim=-1)


@torch.no_grad()
def generate(
    policy: Policy,
    prompts: list[list[int]],
    max_tokens: int,
    temperatures: list[float],
    generator: torch.Generator | None = None,
) -> tuple[list[list[int]], list[list[float]], list[list[list[tuple[int, float]]]]]:
    """Sample ``max_tokens`` tokens for every prompt in one batched pass per position.

    Returns per row the sampled ids, their log-probabilities under the sampling distribution, and
    the top-5 (id, logprob) alternatives at each position.
    """
    temps = torch.tensor(temperatures, dtype=torch.float32)
    seqs = [list(p) for p in prompts]
    out_lp: list[list[float]] = [[] for _ in prompts]
    out_top: list[list[list[tuple[int, float]]]] = [[] for _ in prompts]
    for _ in range(max_tokens):
        logp = scaled_log_softmax(policy(policy.windows(seqs)), temps)
        for i, (tok, lp, top) in enumerate(next_tokens(logp, temps, generator)):
            seqs[i].append(tok)
            out_lp[i].append(lp)
            out_top[i].append(top)
    return [s[len(p):] for s, p in zip(seqs, prompts, strict=True)], out_lp, out_top


def next_tokens(logp: torch.Tensor, temps: torch.Tensor,
                generator: torch.Generator | None) -> list[tuple[int, float, list[tuple[int, float]]]]:
    """One token per row of ``logp`` [B, V] (log-probabilities at the rows' ``temps``): sampled (on the CPU, where
    the generator is), greedy at temperature 0; each with its log-probability and the top-5 (id, logprob)."""
    sampled = torch.multinomial(logp.exp().cpu(), 1, generator=generator).squeeze(1).to(logp.device)
    chosen = torch.where(temps > 0, sampled, logp.argmax(dim=-1))
    chosen_lp = logp.gather(1, chosen.unsqueeze(1)).squeeze(1)
    top_lp, top_id = logp.topk(min(5, logp.shape[1]), dim=-1)
    return [(tok, lp, list(zip(ids, lps, strict=True))) for tok, lp, ids, lps
            in zip(chosen.tolist(), chosen_lp.tolist(), top_id.tolist(), top_lp.tolist(), strict=True)]


def sequence_logprobs(
    policy: Policy, prompts: list[list[int]], completions: list[list[int]], temperature: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probabilities (with grad) of every completion token given its prefix.

    Returns ``(logprobs [N], entropy [N], row [N])`` flattened over all completion tokens, where
    ``row`` says which sequence each token belongs to.
    """
    tokens = [(r, list(prompt) + completion[:k], tok)
              for r, (prompt, completion) in enumerate(zip(prompts, completions, strict=True))
              for k, tok in enumerate(completion)]
    logp = scaled_log_softmax(policy(policy.windows([c for _, c, _ in tokens])), temperature)
    target = torch.tensor([t for _, _, t in tokens], dtype=torch.long)
    entropy = -(logp.exp() * logp).sum(-1)
    return logp.gather(1, target.unsqueeze(1)).squeeze(1), entropy, torch.tensor([r for r, _, _ in tokens])


def save_weights(policy: Policy, directory: Path) -> None:
    """Write ``model.pt`` and ``config.json`` into ``directory`` (the caller fsyncs and renames: a weights dir
    or checkpoint is published by ``atomic.publish_dir``, which fsyncs every file first)."""
    directory.mkdir(parents=True, exist_ok=True)
    torch.save(policy.state_dict(), directory / "model.pt")
    (directory / "config.json").write_text(json.dumps(asdict(policy.config)))


def load_weights(directory: Path) -> Policy:
    """A ``Policy`` built from ``config.json`` with the state dict of ``model.pt``."""
    config = PolicyConfig(**json.loads((Path(directory) / "config.json").read_text()))
    policy = Policy(config)
    policy.load_state_dict(torch.load(Path(directory) / "model.pt", weights_only=True))
    return policy
