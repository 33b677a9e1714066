"""Builds what the frameworks' entry points read before they need a GPU, offline: a tiny Qwen2 model with
its own word-level tokenizer and chat template, and GSM8K-shaped data in the layouts the examples read.
Run in the framework's venv (it needs that venv's transformers / datasets / pyarrow):

    python make_fixtures.py model DIR
    python make_fixtures.py gsm8k-hub DIR      # openai/gsm8k's layout: README configs, main/{train,test}-*.parquet
    python make_fixtures.py gsm8k-verl DIR     # verl's examples/data_preprocess/gsm8k.py output: {train,test}.parquet
"""

from __future__ import annotations

import sys
from pathlib import Path

QUESTIONS = [("What is 2 plus 3?", "2 + 3 = 5\n#### 5"), ("What is 7 minus 4?", "7 - 4 = 3\n#### 3"),
             ("What is 6 times 2?", "6 * 2 = 12\n#### 12"), ("What is 9 divided by 3?", "9 / 3 = 3\n#### 3")] * 80  # > one batch of 256
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def model(out: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    words = sorted({w for q, a in QUESTIONS for w in (q + " " + a).replace("\n", " ").split()}
                   | {"user", "assistant", "system", "Please", "put", "your", "final", "answer", "within", "\\boxed{}."})
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "[UNK]"]
    vocab = {t: i for i, t in enumerate(special + words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token="[UNK]", bos_token=None)
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    fast.chat_template = CHAT_TEMPLATE
    cfg = Qwen2Config(vocab_size=len(vocab) + 8, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                      eos_token_id=vocab["<|im_end|>"], pad_token_id=vocab["<|endoftext|>"], bos_token_id=None,
                      tie_word_embeddings=True)
    Qwen2ForCausalLM(cfg).save_pretrained(out)
    fast.save_pretrained(out)


def gsm8k_hub(out: Path) -> None:
    import pandas as pd

    (out / "main").mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame({"question": [q for q, _ in QUESTIONS], "answer": [a for _, a in QUESTIONS]})
    df.to_parquet(out / "main" / "train-00000-of-00001.parquet")
    df.to_parquet(out / "main" / "test-00000-of-00001.parquet")
    (out / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n"
        "  - split: test\n    path: main/test-*\n---\n")


def gsm8k_verl(out: Path) -> None:
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        rows = [{"data_source": "openai/gsm8k",
                 "prompt": [{"role": "user", "content": q + " Let's think step by step and output the final "
                                                            "answer after \"####\"."}],
                 "ability": "math",
                 "reward_model": {"style": "rule", "ground_truth": a.split("#### ")[1]},
                 "extra_info": {"split": split, "index": i, "answer": a, "question": q}}
                for i, (q, a) in enumerate(QUESTIONS)]
        pd.DataFrame(rows).to_parquet(out / f"{split}.parquet")


if __name__ == "__main__":
    what, where = sys.argv[1], Path(sys.argv[2])
    {"model": model, "gsm8k-hub": gsm8k_hub, "gsm8k-verl": gsm8k_verl}[what](where)
    print(f"wrote {what} to {where}")
