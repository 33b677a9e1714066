"""Which pip extra of rlsup installs a missing module: one table for ``rlsup check`` and diagnosis hints.

A component that runs ``python -m sglang.launch_server`` without SGLang fails with Python's
``Error while finding module specification for 'sglang.launch_server' (ModuleNotFoundError: No module
named 'sglang')``; the hint says which command fixes it. Extras and the version ranges they pin are in
``pyproject.toml`` ``[project.optional-dependencies]`` (docs/frameworks.md explains the ranges).
"""

from __future__ import annotations

# top-level module -> (extra, what it is). The extra's name is what `pip install 'rlsup[EXTRA]'` takes.
MODULE_EXTRAS: dict[str, tuple[str, str]] = {
    "sglang": ("sglang", "the SGLang inference server"),
    "vllm": ("vllm", "the vLLM inference server"),
    "transformers": ("train", "Hugging Face models for rlsup's trainer"),
    "safetensors": ("train", "safetensors weights for rlsup's trainer"),
    "numpy": ("train", "numpy"),
    "datasets": ("gsm8k", "the `datasets` package (GSM8K loaded by name)"),
}

# Modules no rlsup extra installs, with the command that does. torch is deliberately no extra: a plain
# `torch` requirement would pull a multi-GB CUDA build chosen by pip, not by the user's driver.
OTHER_INSTALLS: dict[str, str] = {
    "torch": "pip install torch (the build for your CUDA driver: https://pytorch.org/get-started/locally/)",
    "trl": "pip install 'trl[vllm]'",
    "accelerate": "pip install accelerate",
    "verl": "pip install verl (or `pip install -e .` in a verl checkout)",
    "areal": "pip install areal (or `pip install -e .` in an AReaL checkout)",
    "prime_rl": "uv sync in your prime-rl checkout, and run the components with `uv run`",
}


def top_module(module: str) -> str:
    """``sglang.launch_server`` -> ``sglang``; ``rlsup.trainer.hf`` -> ``rlsup``."""
    return module.strip().split(".", 1)[0]


def install_hint(module: str) -> str | None:
    """The command that installs ``module``: ``pip install 'rlsup[sglang]'`` for sglang, a plain
    pip/uv command for packages no extra covers, None when rlsup knows none."""
    top = top_module(module)
    if top in MODULE_EXTRAS:
        return f"pip install 'rlsup[{MODULE_EXTRAS[top][0]}]'"
    return OTHER_INSTALLS.get(top)
