"""A small randomly initialised GPT-2 and a byte-level BPE tokenizer, for the GPU stack (no download).

    python tests/gpu/make_model.py DIR [--layers 6 --width 512]

The tokenizer is trained on tests/fixtures/hf/gsm8k_tiny.jsonl and the trainer's prompt template, as
tests/trainer/test_hf.py does for the CPU tests; the model is large enough to make the GPU work.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "gsm8k_tiny.jsonl"
EOS = "<|endoftext|>"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--width", type=int, default=512)
    args = ap.parse_args()
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from rlsup.trainer import hf

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    corpus = [r["question"] + " " + r["answer"] for r in rows] + [hf.PROMPT_TEMPLATE]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=320, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(fast), n_positions=512, n_embd=args.width, n_layer=args.layers,
                        n_head=8, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=fast.eos_token_id, eos_token_id=fast.eos_token_id)
    model = GPT2LMHeadModel(config)
    args.dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.dir, safe_serialization=True)
    fast.save_pretrained(args.dir)
    print(f"{args.dir}: GPT-2, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
