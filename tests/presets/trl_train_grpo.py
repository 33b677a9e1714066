"""The GRPO script configs/presets/trl.yaml expects as TRL_SCRIPT (its header): TRL's server mode
(GRPOConfig(use_vllm=True, vllm_mode="server")), `save_steps` checkpoints, and
trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint) so the --resume_from_checkpoint
rlsup appends on a restart is used (transformers' Trainer does not read it from the arguments by itself).
Written after TRL's docs (docs/source/grpo_trainer.md, vllm_integration.md at v1.9.0); the model and the
data come from the environment so the CI stage can run it offline: MODEL (a path or hub id) and
TRL_DATA (a GSM8K-layout dataset directory or hub id)."""

import os
import sys

import torch
from datasets import load_dataset
from trl import GRPOConfig, GRPOTrainer, TrlParser


def reward_len(completions, **kwargs):
    return [-abs(20 - len(c)) for c in completions]


def main() -> None:
    # GRPOConfig defaults to bf16, which TrainingArguments refuses without a GPU: on CPU (the CI stage) the
    # script runs in fp32 on the CPU so it gets as far as the vLLM server.
    cpu = [] if torch.cuda.is_available() else ["--bf16", "false", "--use_cpu", "true"]
    (training_args,) = TrlParser((GRPOConfig,)).parse_args_and_config(args=sys.argv[1:] + cpu)
    training_args.use_vllm = True
    training_args.vllm_mode = "server"
    training_args.vllm_server_port = int(os.environ.get("TRL_PORT", "8000"))
    dataset = load_dataset(os.environ.get("TRL_DATA", "openai/gsm8k"), "main", split="train")
    dataset = dataset.rename_column("question", "prompt")
    trainer = GRPOTrainer(model=os.environ.get("MODEL", "Qwen/Qwen2.5-0.5B-Instruct"), reward_funcs=reward_len,
                          args=training_args, train_dataset=dataset)
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)


if __name__ == "__main__":
    main()
