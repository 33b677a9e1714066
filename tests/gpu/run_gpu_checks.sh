#!/usr/bin/env bash
# rlsup on a real NVIDIA GPU: one figure per item of docs/gpu.md, in about five minutes on one GPU.
#   tests/gpu/run_gpu_checks.sh [OUT_DIR]        (default runs/gpu-checks; needs rlsup installed,
#                                                  torch with CUDA, transformers, tmux)
# Without a GPU every item says so and why, and the script exits 0. Exit 1 if an item found a problem.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${1:-runs/gpu-checks}"
mkdir -p "$out"
exec python3 -u tests/gpu/gpu_checks.py --out "$out"
