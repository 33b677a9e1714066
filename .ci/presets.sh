#!/usr/bin/env bash
# CI stage (issue 28, Deliver 3): every preset in configs/presets/ launched through its framework's real
# entry point, as far as a machine without a GPU allows. Each framework gets its own venv under
#   $HOME/.cache/rlsup-ci/presets/<name>-<version>/
# built from PyPI with the local CPU torch (torch==2.13.0 first, then a constraints file pins it, so pip
# never pulls a CUDA build), reused while its spec file matches. The tests are tests/presets/
# test_entry_points.py: they take each preset's command from the preset file itself and assert the line
# or file that shows how far it got (see docs/frameworks.md, "Launched for real").
#   .ci/presets.sh install   only builds the venvs (.ci/run starts this in the background at once)
# prime-rl is not on PyPI and GitHub is out of reach: its pinned source ships in the repository
# (tests/presets/prime-rl/, unpacked here; RLSUP_PRIME_RL_SRC=/path/to/a checkout at 559b447 overrides it).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="$HOME/.cache/rlsup-ci/presets"
mkdir -p "$CACHE"
t_stage=$(date +%s)

# venv NAME VERSION "CONSTRAINTS (one per line)" PIP-ARGS... [--- PIP-ARGS...]: builds $CACHE/NAME-VERSION
# (one `pip install` per group of arguments, all under the constraints), or reuses it while its spec matches.
venv() {
    local name=$1 version=$2 constraints=$3; shift 3
    local dir="$CACHE/$name-$version" spec t0 group=()
    spec=$(printf '%s\n--\n%s\n' "$constraints" "$*")
    if [ -f "$dir/spec" ] && [ "$(cat "$dir/spec")" = "$spec" ]; then
        echo "== presets: $name $version: cached venv $dir ($(du -sh "$dir" | cut -f1))"
        return 0
    fi
    if [ "$PYPI" = 0 ] && [[ "$*" != *"--ignore-requires-python"* ]]; then
        echo "== presets: $name $version: SKIPPED: PyPI is unreachable and no cached venv (its tests skip)"
        return 0
    fi
    t0=$(date +%s)
    # Built in place (a venv's scripts name their interpreter by absolute path: it cannot be moved);
    # the spec file, written last, marks it complete.
    rm -rf "$dir"
    python3 -m venv "$dir"
    printf '%s\n' "$constraints" > "$dir/constraints.txt"
    "$dir/bin/pip" install -q torch==2.13.0 || { rm -rf "$dir"; return 1; }
    for arg in "$@" ---; do
        if [ "$arg" = "---" ]; then
            PIP_CONSTRAINT="$dir/constraints.txt" "$dir/bin/pip" install -q "${group[@]}" \
                || { rm -rf "$dir"; echo "== presets: $name $version: pip install failed" >&2; return 1; }
            group=()
        else
            group+=("$arg")
        fi
    done
    printf '%s' "$spec" > "$dir/spec"
    echo "== presets: $name $version: installed in $(( $(date +%s) - t0 )) s, $(du -sh "$dir" | cut -f1)"
}

failed=()
# Can PyPI be reached at all? (Without it, only cached venvs can run; that is a skip, not a failure.)
PYPI=1
probe=$(mktemp -d)
python3 -m pip download -q --no-deps trl==1.9.0 -d "$probe" >/dev/null 2>&1 || PYPI=0
rm -rf "$probe"

# TRL v1.9.0: the published wheel with its requirements and those of its `vllm` extra except vLLM itself
# (GPU only; TRL 1.9.0 supports vLLM 0.17.0 - 0.25.1). rlsup goes in too, without dependencies: the
# preset's trainer command runs `python -m rlsup.trainer.sync close-communicator` in the trainer's python.
venv trl 1.9.0 "torch==2.13.0" trl==1.9.0 fastapi pydantic "aiohttp>=3.13.3" requests uvicorn || failed+=(trl)

# verl v0.7.0: the wheel with its own requirements; transformers, numpy, pyarrow and datasets pinned to
# what verl 0.7.0 imports (it needs transformers < 5: AutoModelForVision2Seq; numpy < 2, which pyarrow
# 26 refuses). No vLLM (GPU only).
venv verl 0.7.0 "torch==2.13.0
transformers==4.57.6
numpy<2
pyarrow==21.0.0
datasets==4.4.1" verl==0.7.0 || failed+=(verl)

# AReaL v1.0.4: the wheel without its dependencies (they pin torch < 2.11 and pull SGLang, Megatron,
# OpenHands, litellm ...), plus what the single-controller GSM8K example imports up to starting its
# workers. The example script and its YAML are not in the wheel: tests/presets/areal/ holds them as
# published at tag v1.0.4 (Apache-2.0).
venv areal 1.0.4 "torch==2.13.0
transformers==5.3.0" --no-deps areal==1.0.4 --- "datasets>=3.0.0" "omegaconf==2.4.0.dev2" \
    "hydra-core==1.4.0.dev1" torchdata "peft<=0.18.1" pyzmq "aiohttp>=3.13.3,<4" "httpx>=0.28.1" uvloop fastapi \
    uvicorn flask orjson msgspec pybase64 tabulate colorlog colorama tensorboardx psutil einops pydantic pyyaml \
    pandas tqdm rich packaging lark regex python-dateutil setproctitle prettytable "math-verify==0.8.0" \
    "networkx==3.3" aiofiles tenacity blosc zstandard pylatexenc word2number pebble timeout-decorator \
    "ray[default]" numba "pillow>=12.1.1" openai wandb trackio "swanlab==0.6.12" transformers==5.3.0 \
    || failed+=(areal)

# prime-rl 559b447: not on PyPI, and CI cannot reach GitHub. Built from its pinned source, which the
# repository carries (tests/presets/prime-rl/prime-rl-559b447.tar.gz: src/, packages/, examples/ and the
# deps/verifiers submodule's package and reverse_text environment, as published; see its README), unpacked
# once under $CACHE/src/; RLSUP_PRIME_RL_SRC points at another checkout instead. Its pyproject wants
# Python 3.12, the launcher and config code run on this machine's 3.11 (--ignore-requires-python). Only
# what `rl --dry-run` imports is installed.
PRIME_TGZ=tests/presets/prime-rl/prime-rl-559b447.tar.gz
PRIME_SRC="${RLSUP_PRIME_RL_SRC:-$CACHE/src/prime-rl-559b447}"
if [ -z "${RLSUP_PRIME_RL_SRC:-}" ] && [ ! -f "$PRIME_SRC/.sha256" -o "$(cat "$PRIME_SRC/.sha256" 2>/dev/null)" != "$(sha256sum "$PRIME_TGZ" | cut -d' ' -f1)" ]; then
    rm -rf "$PRIME_SRC" && mkdir -p "$CACHE/src"
    tar -xzf "$PRIME_TGZ" -C "$CACHE/src"
    sha256sum "$PRIME_TGZ" | cut -d' ' -f1 > "$PRIME_SRC/.sha256"  # written last: the unpack is complete
    echo "== presets: prime-rl 559b447: unpacked $PRIME_TGZ into $PRIME_SRC"
fi
if [ -f "$PRIME_SRC/examples/basic/reverse-text/rl.toml" ] && [ -d "$PRIME_SRC/deps/verifiers/environments/reverse_text" ]; then
    venv prime-rl 559b447 "torch==2.13.0" pydantic "prime-pydantic-config>=0.4.3" tomli tomli-w loguru psutil transformers==5.6.2 \
        setproctitle "mcp<2" verifiers --- --ignore-requires-python --no-deps --force-reinstall \
        "$PRIME_SRC/packages/prime-rl-configs" "$PRIME_SRC" "$PRIME_SRC/deps/verifiers" \
        "$PRIME_SRC/deps/verifiers/environments/reverse_text" || failed+=(prime-rl)
else
    echo "== presets: prime-rl 559b447: no source at $PRIME_SRC (RLSUP_PRIME_RL_SRC): FAILED" >&2
    failed+=(prime-rl)
fi

echo "== presets: installs done after $(( $(date +%s) - t_stage )) s"
if [ "${1:-}" = install ]; then  # (.ci/run builds the venvs in the background first; the stage reuses them)
    [ ${#failed[@]} -eq 0 ] || { echo "== presets: install FAILED: ${failed[*]}" >&2; exit 1; }
    exit 0
fi
# rlsup itself into TRL's venv (here, not in the background install: it builds in this checkout, as the README's
# own install does meanwhile)
[ -f "$CACHE/trl-1.9.0/spec" ] && "$CACHE/trl-1.9.0/bin/pip" install -q --no-deps -e . >/dev/null
. .venv/bin/activate 2>/dev/null || true
RLSUP_PRESET_VENVS="$CACHE" RLSUP_PRIME_RL_SRC="$PRIME_SRC" python -m pytest -n 0 -q -rs tests/presets/test_entry_points.py || failed+=(tests)
echo "== presets: stage took $(( $(date +%s) - t_stage )) s"
if [ ${#failed[@]} -gt 0 ]; then
    echo "== presets: FAILED: ${failed[*]}" >&2
    exit 1
fi
