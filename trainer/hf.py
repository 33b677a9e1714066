"""The Hugging Face path of the reference stack: a real causal LM on GSM8K-style problems.

Used when the trainer or the inference server is given ``--model NAME_OR_PATH`` and when the
orchestrator runs ``--task gsm8k``.  ``transformers`` and ``safetensors`` are imported lazily
(``pip install 'rlsup[train]'``), so the tiny-policy path never needs them.

What it promises:

* **Data.** :func:`load_problems` reads GSM8K's format (a JSONL file or a ``datasets`` name); :func:`reward`
  is 1.0 exactly when the completion's final number equals the answer's.
* **Training.** :func:`train_main` runs the same loop as the tiny trainer (wait for
  ``OUT/rollouts/step_N``, clipped GRPO update, publish, checkpoint, ``Step N/T`` line) on an
  ``AutoModelForCausalLM``: fp32 master weights with bf16 autocast and gradient checkpointing on
  CUDA, gradient accumulation over ``--micro-batch`` sequences, sequences cut to ``--max-seq-len``.
* **Publishing.** ``OUT/weights/step_N/`` is a complete HF model directory (``config.json``,
  ``*.safetensors``, tokenizer files) plus ``meta.json`` and ``STABLE``; it appears atomically
  (``save_pretrained`` into a temp dir, fsync, rename), so SGLang's ``/update_weights_from_disk``
  with ``{"model_path": DIR}`` -- or a restarted server given ``--model-path DIR`` -- loads it as is.
* **Checkpoints.** ``OUT/checkpoints/step_N/`` (the prime-rl shape rlsup's ``prime-rl`` layout reads):
  ``model/`` (HF dir), ``optimizer.pt``, ``trainer_state.pt`` (RNG states, next step), ``STABLE`` last.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import torch

from rlsup.trainer import checkpoint as ckpt_mod
from rlsup.trainer import grpo, loop, rollouts, steplog
from rlsup.trainer import weights as weights_mod
from rlsup.trainer.policy import next_tokens, scaled_log_softmax
from rlsup.trainer.task import Problem

PROMPT_TEMPLATE = (
    "Solve the math problem. Think step by step, then give the final answer as a number after "
    "'####'.\n\nQuestion: {question}\nAnswer:"
)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


# ------------------------------------------------------------------------------------------ data


def final_number(text: str) -> str | None:
    """The final answer of a GSM8K-style text, normalised (``"1,000.00"`` -> ``"1000"``).

    The first number after the first ``####`` if there is one (a model that keeps writing after
    its answer does not change it), else the last number in the text; None when there is none.
    """
    head, sep, tail = text.partition("####")
    found = _NUMBER.findall(tail) if sep else _NUMBER.findall(head)
    if not found:
        return None
    value = Decimal((found[0] if sep else found[-1]).replace(",", ""))  # _NUMBER matches decimals only
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def reward(completion: str, answer: str) -> float:
    """1.0 when the completion's final number equals the reference answer's, else 0.0."""
    want = final_number(answer)
    return 1.0 if want is not None and final_number(completion) == want else 0.0


def load_problems(data: str, split: str = "train") -> list[Problem]:
    """Problems from a JSONL file (``question``/``answer`` per line) or a ``datasets`` name.

    A name may carry a config after a colon (``openai/gsm8k:main``; ``main`` is the default for
    names ending in ``gsm8k``).  ``Problem.answer`` keeps the full reference answer text.
    """
    path = Path(data)
    rows: list[dict[str, Any]]
    if path.is_file():
        rows = []
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{i}: not JSON: {exc}") from None
    else:
        try:
            import datasets  # optional: only for hub names
        except ImportError:
            raise ValueError(f"{data!r} is not a file, and the `datasets` package (needed to load it "
                             "by name) is not installed: pip install datasets") from None
        name, _, config = data.partition(":")
        config = config or ("main" if name.endswith("gsm8k") else None)
        rows = list(datasets.load_dataset(name, config, split=split))
    problems = []
    for i, row in enumerate(rows, 1):
        if "question" not in row or "answer" not in row:
            raise ValueError(f"{data}: row {i} lacks 'question' or 'answer' (keys: {sorted(row)})")
        if final_number(str(row["answer"])) is None:
            raise ValueError(f"{data}: row {i}: no final number in answer {row['answer']!r}")
        problems.append(Problem(PROMPT_TEMPLATE.format(question=str(row["question"]).strip()), str(row["answer"])))
    if not problems:
        raise ValueError(f"{data}: no problems")
    return problems


# ----------------------------------------------------------------------------------------- model


def _transformers():
    try:
        import transformers
    except ImportError:
        raise SystemExit("--model needs transformers and safetensors: pip install 'rlsup[train]'") from None
    return transformers


def pick_device(device: str | None = None) -> torch.device:
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_tokenizer(name_or_path: str):
    tok = _transformers().AutoTokenizer.from_pretrained(name_or_path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(name_or_path: str, device: torch.device, dtype: torch.dtype = torch.float32):
    """``AutoModelForCausalLM`` on ``device`` in ``dtype``, KV cache off (training uses none)."""
    tf = _transformers()
    major, minor = (int(x) for x in re.findall(r"\d+", tf.__version__)[:2])
    kw = {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}
    model = tf.AutoModelForCausalLM.from_pretrained(name_or_path, **kw)
    return model.to(device)


def chat_prompt(tokenizer: Any, prompt: str) -> str:
    """``prompt`` as the user turn of the tokenizer's chat template (unchanged without one)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
    return prompt


def save_model_dir(model: Any, tokenizer: Any, directory: Path, dtype: torch.dtype | None = None) -> None:
    """``save_pretrained`` model (safetensors) and tokenizer into ``directory`` (not fsynced).

    With ``dtype`` the tensors are cast to it AND ``config.json`` says it: SGLang's ``--dtype auto``
    (python/sglang/srt/configs/model_config.py _get_and_verify_dtype, 0.4.6 through 0.5.23: "we use
    float16 for float32 models", Gemma excepted) serves a config that says float32 in float16, so the fp32
    master's own ``"dtype": "float32"`` next to bf16 tensors would make every restarted SGLang run the
    policy in fp16. (vLLM's _resolve_auto_dtype, vllm/config/model.py, takes the platform's first supported
    dtype instead: bfloat16 on compute capability >= 8.0, float16 below.) SGLang 0.5.23 reads the
    config's ``dtype``, 0.4.6 ``torch_dtype``: both are written (transformers >= 4.56 writes ``dtype``;
    save_pretrained writes the dtype of the live model's parameters, the fp32 master, whatever it was given).
    """
    state = None if dtype is None else {k: v.detach().to(dtype) for k, v in model.state_dict().items()}
    model.save_pretrained(directory, safe_serialization=True, state_dict=state)
    if dtype is not None:
        path = Path(directory) / "config.json"
        cfg = json.loads(path.read_text(encoding="utf-8"))
        cfg["dtype"] = cfg["torch_dtype"] = str(dtype).removeprefix("torch.")
        path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tokenizer.save_pretrained(directory)


def latest_model_path(weights_dir: Path, default: str) -> str:
    """The newest complete published weights dir that no server rejected, else ``default`` (what a restarted
    server loads).

    Not ``latest.json``: that records what the server had loaded, which lags when it was stale. A dir marked
    ``REJECTED`` (a reload of it broke or killed the server, see ``rlsup.trainer.sync``) is skipped: loading it
    again would kill the restarted server too."""
    found = weights_mod.published(weights_dir, good=True)
    if found is not None and (found[1] / "config.json").exists():
        return str(found[1])
    return default


# ----------------------------------------------------------------------------------- generation


class HFGenerator:
    """Sampling for the inference server: per-row temperature, a seeded generator, stop at EOS."""

    def __init__(self, name_or_path: str, device: str | None = None) -> None:
        self.device = pick_device(device)
        self.dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        self.tokenizer = load_tokenizer(name_or_path)
        self.model = load_model(name_or_path, self.device, self.dtype).eval()

    def load(self, path: Path) -> None:
        """Replace the weights with a published HF dir (same architecture)."""
        self.model = load_model(str(path), self.device, self.dtype).eval()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def token(self, tid: int) -> str:
        return self.tokenizer.decode([tid])

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_tokens: int, temperatures: list[float],
                 generator: torch.Generator | None = None):
        """Sample up to ``max_tokens`` per row; returns (ids, logprobs, top-5 alternatives, finish
        reasons) per row, the EOS token itself left out of ``ids``."""
        pad = self.tokenizer.pad_token_id
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        eos = {self.tokenizer.eos_token_id, *(gen_eos if isinstance(gen_eos, list) else [gen_eos])}
        eos.discard(None)
        width = max(len(p) for p in prompts)
        step_ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=self.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        temps = torch.tensor(temperatures, dtype=torch.float32, device=self.device)
        n = len(prompts)
        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_lp: list[list[float]] = [[] for _ in range(n)]
        out_top: list[list[list[tuple[int, float]]]] = [[] for _ in range(n)]
        finish = ["length"] * n  # "stop": done
        past = None
        for _ in range(max_tokens):
            positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -step_ids.shape[1]:]
            out = self.model(input_ids=step_ids, attention_mask=mask, position_ids=positions,
                             past_key_values=past, use_cache=True)
            past = out.past_key_values
            chosen = next_tokens(scaled_log_softmax(out.logits[:, -1, :].float(), temps), temps, generator)
            for i, (tok, lp, top) in enumerate(chosen):
                if finish[i] == "stop":
                    continue
                if tok in eos:
                    finish[i] = "stop"
                    continue
                out_ids[i].append(tok)
                out_lp[i].append(lp)
                out_top[i].append(top)
            if all(f == "stop" for f in finish):
                break
            step_ids = torch.tensor([[pad if f == "stop" else c[0]] for f, c in zip(finish, chosen, strict=True)],
                                    device=self.device)
            mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=self.device)], dim=1)
        return out_ids, out_lp, out_top, finish


# ------------------------------------------------------------------------------------- training


@dataclass
class Batch:
    """Token ids of prompt + completion per sample, and where each completion starts."""

    input_ids: list[list[int]]
    starts: list[int]


def completion_ids(tokenizer: Any, s: rollouts.Sample) -> list[int]:
    """The completion's token ids as trained: the ids the server sampled when the rollout has them
    (re-tokenising the text can give other ids than were sampled), else the text re-tokenised -- ending
    with the token that stopped it, so the decision to stop is trained. A ``stop`` finish on a token
    (``stop_reason`` an int: that id; None: the tokenizer's EOS) gets that token appended unless the ids
    already end with it: vLLM and SGLang keep the stop token in ``token_ids`` (vLLM v1/engine/detokenizer.py
    appends the skipped stop token back; SGLang Req.output_ids_through_stop includes it), rlsup's server and
    every completion text leave it out. A stop string (``stop_reason`` a str) or a ``length`` finish adds
    nothing: no stop token was sampled."""
    ids = list(s.completion_ids) if s.completion_ids is not None else tokenizer(s.completion,
                                                                                add_special_tokens=False)["input_ids"]
    if s.finish_reason != "stop" or isinstance(s.stop_reason, str):
        return ids
    stop = s.stop_reason if isinstance(s.stop_reason, int) else tokenizer.eos_token_id
    if stop is not None and (not ids or ids[-1] != stop):
        ids.append(stop)
    return ids


def tokenize_samples(tokenizer: Any, samples: list[rollouts.Sample], max_seq_len: int) -> Batch:
    """Prompt ids + completion ids per sample, cut to ``max_seq_len`` (prompt cut from the left,
    completion from the right; at least one completion token is kept). Server-sampled ids and the EOS
    of a ``stop`` finish are used where the rollout has them (:func:`completion_ids`)."""
    seqs, starts = [], []
    for s in samples:
        p = list(s.prompt_ids) if s.prompt_ids is not None else tokenizer(s.prompt, add_special_tokens=False)["input_ids"]
        c = completion_ids(tokenizer, s)
        # An empty completion is the model stopping at once: score that EOS.
        c = c[: max(1, max_seq_len - 1)] or [tokenizer.pad_token_id if tokenizer.eos_token_id is None
                                             else tokenizer.eos_token_id]
        p = p[-max(1, max_seq_len - len(c)):] if p else []
        seqs.append(p + c)
        starts.append(len(p))
    return Batch(seqs, starts)


def completion_logprobs(model: Any, batch: Batch, rows: list[int], temperature: float, pad_id: int,
                        device: torch.device, autocast: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities (with grad) and entropies of the completion tokens of ``rows``,
    flattened in row order, under the sampling distribution at ``temperature``."""
    seqs = [batch.input_ids[r] for r in rows]
    width = max(len(s) for s in seqs)
    ids = torch.tensor([s + [pad_id] * (width - len(s)) for s in seqs], device=device)
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs], device=device)
    keep = torch.zeros((len(seqs), width - 1), dtype=torch.bool, device=device)
    for i, (r, s) in enumerate(zip(rows, seqs, strict=True)):
        keep[i, max(batch.starts[r] - 1, 0): len(s) - 1] = True
    ctx = torch.autocast(device_type=device.type, dtype=torch.bfloat16) if autocast else nullcontext()
    with ctx:
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    # Only completion positions go through the (vocab-sized) log-softmax: prompts can be most tokens.
    logp_all = scaled_log_softmax(logits[:, :-1][keep].float(), temperature)
    logp = logp_all.gather(1, ids[:, 1:][keep].unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():  # logged only: keep it out of the autograd graph
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def train_step(model: Any, optimizer: torch.optim.Optimizer, tokenizer: Any, samples: list[rollouts.Sample],
               temperature: float, minibatches: int, micro_batch: int, max_seq_len: int, clip_eps: float,
               device: torch.device, autocast: bool) -> dict[str, float]:
    """One GRPO update: old log-probs recomputed before the update (the inference engine may
    tokenise differently), then ``minibatches`` optimizer steps, each accumulating gradients over
    micro-batches of ``micro_batch`` sequences; the loss is the token mean over the minibatch.
    Samples with zero advantage carry no gradient and are skipped."""
    use = [i for i, s in enumerate(samples) if s.advantage != 0.0]
    stats: dict[str, float] = {"loss": 0.0, "entropy": 0.0, "grad_norm": 0.0, "clip_frac": 0.0, "trained": len(use),
                               "tokens": 0}
    if not use:
        return stats
    batch = tokenize_samples(tokenizer, [samples[i] for i in use], max_seq_len)
    adv_all = [samples[i].advantage for i in use]
    pad = tokenizer.pad_token_id
    n_tok = [len(s) - max(b, 1) for s, b in zip(batch.input_ids, batch.starts, strict=True)]
    stats["tokens"] = sum(n_tok)
    old: list[torch.Tensor] = [torch.empty(0)] * len(use)
    model.eval()
    with torch.no_grad():
        for at in range(0, len(use), micro_batch):
            rows = list(range(at, min(at + micro_batch, len(use))))
            lp, _ = completion_logprobs(model, batch, rows, temperature, pad, device, autocast)
            for r, chunk in zip(rows, lp.split([n_tok[r] for r in rows]), strict=True):
                old[r] = chunk.detach()
    model.train()
    chunks = [c.tolist() for c in torch.randperm(len(use)).chunk(minibatches)]
    for chunk in chunks:
        total = sum(n_tok[r] for r in chunk)
        optimizer.zero_grad(set_to_none=True)
        for at in range(0, len(chunk), micro_batch):
            rows = chunk[at: at + micro_batch]
            lp, ent = completion_logprobs(model, batch, rows, temperature, pad, device, autocast)
            old_lp = torch.cat([old[r] for r in rows])
            adv = torch.cat([torch.full((n_tok[r],), adv_all[r], device=device) for r in rows])
            loss, st = grpo.policy_loss(lp, old_lp, adv, clip_eps)
            share = lp.numel() / total
            (loss * share).backward()
            for k, v in {"loss": loss.item(), "entropy": ent.mean().item(), **st}.items():
                stats[k] += v * share / len(chunks)
        stats["grad_norm"] += float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)) / len(chunks)
        optimizer.step()
    return stats


def train_main(args: argparse.Namespace) -> int:
    """The trainer loop for ``--model`` (see the module docstring); ``args`` from ``train.main``."""
    device = pick_device(args.device)
    cuda = device.type == "cuda"
    autocast = cuda if args.bf16 == "auto" else args.bf16 == "on"
    checkpointing = cuda if args.gradient_checkpointing == "auto" else args.gradient_checkpointing == "on"
    d, state = ckpt_mod.begin(args)
    source = str(d / "model") if d else args.model
    tokenizer = load_tokenizer(source)
    model = load_model(source, device, torch.float32)  # fp32 master weights; bf16 via autocast
    if checkpointing:
        model.gradient_checkpointing_enable()
    model.config.use_cache = False
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    start = ckpt_mod.restore(d, state, optimizer)
    n_params = sum(p.numel() for p in model.parameters())
    steplog.log(f"Model {args.model} ({n_params / 1e6:.1f}M parameters) on {device}; bf16 autocast {autocast}, "
                f"gradient checkpointing {checkpointing}, micro-batch {args.micro_batch}, "
                f"max-seq-len {args.max_seq_len}")

    def publish_weights(step: int) -> Path:  # an HF dir + meta.json + STABLE
        # Published weights are bf16 on every device, config.json included: what SGLang/vLLM serve the
        # policy in (--dtype auto reads it); the fp32 master weights stay in the checkpoints.
        return weights_mod.write(args.out / "weights", step,
                                 lambda d: save_model_dir(model, tokenizer, d, torch.bfloat16),
                                 {"step": step, "total": args.steps, "format": "hf"})

    def update(samples: list[rollouts.Sample], temperature: float) -> dict[str, float]:
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        return train_step(model, optimizer, tokenizer, samples, temperature, args.minibatches, args.micro_batch,
                          args.max_seq_len, args.clip_eps, device, autocast)

    def peak_memory() -> dict[str, float]:
        return {"peak_mem_gb": torch.cuda.max_memory_allocated(device) / 1e9} if cuda else {}

    return loop.run(args, start, update, publish_weights,
                    lambda d: save_model_dir(model, tokenizer, d / "model"),  # OUT/checkpoints/step_N/model/: an HF dir
                    optimizer, peak_memory, cuda_rng=True)


# ------------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    """``python -m rlsup.trainer.hf latest WEIGHTS_DIR --default MODEL``: print the model path a
    (re)started inference server should load -- for ``--model-path "$(...)"`` in a shell command."""
    ap = argparse.ArgumentParser(prog="python -m rlsup.trainer.hf")
    sub = ap.add_subparsers(dest="cmd", required=True)
    lp = sub.add_parser("latest", help="newest complete published weights dir, else --default")
    lp.add_argument("weights_dir", type=Path)
    lp.add_argument("--default", required=True)
    args = ap.parse_args(argv)
    print(latest_model_path(args.weights_dir, args.default))
    return 0


if __name__ == "__main__":
    sys.exit(main())
