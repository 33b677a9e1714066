"""A tiny random-initialised Qwen2-style causal LM with a byte-level BPE tokenizer, made on the spot (no hub
download): what the real engines serve in tests/engines/.

    python tests/engines/tiny.py DIR [--seed N] [--intermediate N] [--top-k N]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

EOS = "<|endoftext|>"
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "What is 12 plus 30? The answer is 42.",
    "Reinforcement learning from verifiable rewards trains a policy on sampled completions.",
    "A supervisor restarts what died and keeps the run going for a week.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
]


def make(path: Path, *, seed: int = 0, intermediate: int = 256, top_k: int | None = None,
         positions: int = 512) -> Path:
    """Write the model to ``path`` (config, safetensors, tokenizer). ``intermediate``: the MLP width (a
    different one gives a checkpoint of the wrong shape). ``top_k``: a generation_config.json setting it.
    ``positions``: max_position_embeddings (the engines refuse a context longer than it)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=320, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)
    torch.manual_seed(seed)
    # head_dim 64: a size every CPU attention backend of both engines supports.
    config = Qwen2Config(vocab_size=384, hidden_size=128, intermediate_size=intermediate, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=positions,
                         tie_word_embeddings=False, bos_token_id=fast.eos_token_id, eos_token_id=fast.eos_token_id,
                         torch_dtype="float32")
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():  # random weights large enough that the greedy output depends on them
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    fast.save_pretrained(path)
    gen = GenerationConfig(eos_token_id=fast.eos_token_id, **({"top_k": top_k, "do_sample": True} if top_k else {}))
    gen.save_pretrained(path)
    cfg = json.loads((path / "config.json").read_text())
    cfg["dtype"] = cfg["torch_dtype"] = "float32"
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    return path


def reshaped(src: Path, dst: Path, name: str, shape: tuple[int, ...]) -> Path:
    """A copy of the model at ``src`` whose tensor ``name`` has another ``shape`` (config.json unchanged): a
    checkpoint of the wrong shape for a server serving ``src``."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    assert name in tensors, sorted(tensors)
    tensors[name] = torch.ones(shape, dtype=tensors[name].dtype)
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--intermediate", type=int, default=256)
    ap.add_argument("--top-k", type=int, default=None)
    a = ap.parse_args()
    print(make(a.dir, seed=a.seed, intermediate=a.intermediate, top_k=a.top_k))
