"""Trainer: GRPO updates on the orchestrator's rollouts; publishes weights and checkpoints.

    python -m rlsup.trainer.train --out OUT --steps 200 --server http://127.0.0.1:8731

Each step (``rlsup.trainer.loop``, SIGUSR1 included) waits for ``OUT/rollouts/step_N``, does a clipped
policy-gradient update, publishes ``OUT/weights/step_N`` and tells the server (``rlsup.trainer.sync``); every
``--ckpt-every`` steps it writes ``OUT/checkpoints/step_N``, from which ``--resume-step N`` continues
bit-identically on CPU given the same rollouts, which the orchestrator keeps.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from rlsup.trainer import checkpoint, grpo, loop, rollouts
from rlsup.trainer import weights as weights_mod
from rlsup.trainer.chaos import Chaos
from rlsup.trainer.policy import Policy, PolicyConfig, encode, load_weights, save_weights, sequence_logprobs
from rlsup.trainer.stopping import install_sigterm_exit


def train_step(policy: Policy, optimizer: torch.optim.Optimizer, samples: list[rollouts.Sample],
               temperature: float, minibatches: int, clip_eps: float) -> dict[str, float]:
    """One GRPO update over ``samples`` in ``minibatches`` shuffled optimizer steps (torch RNG)."""
    prompts = [encode(s.prompt) for s in samples]
    completions = [encode(s.completion) for s in samples]
    for s, c in zip(samples, completions, strict=True):
        if len(s.logprobs) != len(c):
            raise ValueError(f"sample {s.prompt!r}: {len(s.logprobs)} logprobs for {len(c)} tokens")
    adv = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    totals = {"loss": 0.0, "entropy": 0.0, "grad_norm": 0.0, "clip_frac": 0.0}
    policy.train()
    chunks = [c.tolist() for c in torch.randperm(len(samples)).chunk(minibatches)]
    for chunk in chunks:
        logp, entropy, rows = sequence_logprobs(
            policy, [prompts[i] for i in chunk], [completions[i] for i in chunk], temperature)
        old_lp = torch.tensor([lp for i in chunk for lp in samples[i].logprobs], dtype=torch.float32)
        loss, stats = grpo.policy_loss(logp, old_lp, adv[chunk][rows], clip_eps)
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        optimizer.step()
        for k, v in {"loss": loss.item(), "entropy": entropy.mean().item(), "grad_norm": float(grad_norm),
                     **stats}.items():
            totals[k] += v
    return {k: v / len(chunks) for k, v in totals.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--server", default=None, help="inference server base URL to push weights to")
    ap.add_argument("--lr", type=float, default=None, help="default: 5e-3 (tiny policy), 1e-6 (--model)")
    ap.add_argument("--minibatches", type=int, default=2)
    ap.add_argument("--clip-eps", type=float, default=0.2)
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--keep-ckpts", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resume-step", type=int, default=None)
    ap.add_argument("--chaos", default=None, help="crash@N,hang@N,oom@N,exit0@N,slow@N")
    hf = ap.add_argument_group("Hugging Face model (--model; see rlsup.trainer.hf)")
    hf.add_argument("--model", default=None,
                    help="HF causal LM name or path: train it instead of the tiny policy (needs rlsup[train])")
    hf.add_argument("--micro-batch", type=int, default=8, help="sequences per forward/backward pass")
    hf.add_argument("--max-seq-len", type=int, default=1024, help="prompt + completion tokens kept per sample")
    hf.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    hf.add_argument("--bf16", choices=("auto", "on", "off"), default="auto", help="bf16 autocast (auto: on CUDA)")
    hf.add_argument("--gradient-checkpointing", choices=("auto", "on", "off"), default="auto",
                    help="auto: on CUDA")
    hf.add_argument("--weight-sync", choices=("sglang", "vllm", "none"), default="sglang",
                    help="how the server is told about new weights: sglang = POST /update_weights_from_disk "
                         "(also rlsup's server), vllm = the reload its version supports (VLLM_SERVER_DEV_MODE=1; "
                         "see rlsup.trainer.sync), none = nothing (a restarted server loads the newest)")
    ap.add_argument("--restart-server", metavar="NAME", default=None,
                    help="the rlsup component name of the inference server: when a reload leaves it broken (a failed "
                         "vLLM reload, an SGLang that died loading), run `rlsup restart NAME` so it comes back with "
                         "the last good weights. Without it such a server is flagged (rlsup-flag: engine_broken) "
                         "and a vLLM stays paused")
    ap.add_argument("--stale-after", type=int, default=3,
                    help="print 'rlsup-flag: weights_stale: ...' once the server is more than this many "
                         "steps behind the published weights")
    args = ap.parse_args(argv)
    install_sigterm_exit()  # `finally` blocks run; a weight reload or an asked-for checkpoint is finished first
    loop.CHECKPOINT.install()  # SIGUSR1: a checkpoint now (rlsup's preemption), not the default death
    if args.lr is None:
        args.lr = 1e-6 if args.model else 5e-3  # a pretrained LM wants a far smaller step
    if args.micro_batch < 1 or args.max_seq_len < 2:
        ap.error("--micro-batch must be >= 1 and --max-seq-len >= 2")
    try:
        Chaos(args.chaos, args.out / "chaos", "trainer")
    except ValueError as exc:
        ap.error(str(exc))
    if not (args.model and torch.cuda.is_available() and args.device != "cpu"):
        torch.set_num_threads(1)
        torch.use_deterministic_algorithms(True)  # CPU (the tiny policy always): exact resume
    if args.model:
        from rlsup.trainer import hf as hf_mod  # imports transformers lazily

        return hf_mod.train_main(args)
    return train_tiny(args)


def train_tiny(args: argparse.Namespace) -> int:
    """The trainer loop for the tiny policy (no ``--model``), bit-identical on resume (``main`` made torch
    single-threaded and deterministic)."""
    d, state = checkpoint.begin(args)  # seeded as the server's initial policy is
    policy = load_weights(d) if d else Policy(PolicyConfig())
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr)
    start = checkpoint.restore(d, state, optimizer)
    return loop.run(args, start,
                    lambda samples, temperature: train_step(policy, optimizer, samples, temperature,
                                                            args.minibatches, args.clip_eps),
                    lambda step: weights_mod.write(args.out / "weights", step, lambda d: save_weights(policy, d),
                                                   {"step": step, "total": args.steps}),
                    lambda d: save_weights(policy, d), optimizer)


if __name__ == "__main__":
    raise SystemExit(main())
