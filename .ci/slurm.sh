#!/usr/bin/env bash
# CI stage: multi-node runs against a real Slurm. Installs Debian's slurm-wlm and munge (the .debs are
# cached under $HOME/.cache/rlsup-ci/slurm-debs-<packages>) and a real Ray for the Ray-on-Slurm test
# (cached under $HOME/.cache/rlsup-ci/ray-<version>), then runs tests/slurm, which start their own
# munged, slurmctld and two slurmd in a temp dir and stop them (and every job process) at the end.
# Needs root (slurmd runs as root). A stage that cannot install or run its real Slurm (or Ray) FAILS: green
# means the tests ran against the real thing.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
pkgs=(slurm-wlm munge slurm-client)
cache="$HOME/.cache/rlsup-ci/slurm-debs-$(echo "${pkgs[*]}" | tr ' ' '_')"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo -n"
have() { command -v "$1" >/dev/null || [ -x "/usr/sbin/$1" ]; }
if ! { have slurmctld && have slurmd && have munged && have sbatch; }; then
    echo "== apt-get install ${pkgs[*]} (debs cached in $cache)"
    mkdir -p "$cache/partial"
    export DEBIAN_FRONTEND=noninteractive
    opts=(-y -q -o "Dir::Cache::archives=$cache")
    $SUDO apt-get install "${opts[@]}" "${pkgs[@]}" >/dev/null 2>&1 || {
        $SUDO apt-get update -q >/dev/null && $SUDO apt-get install "${opts[@]}" "${pkgs[@]}" >/dev/null
    } || { echo "== slurm stage FAILED: cannot install ${pkgs[*]} from apt"; exit 1; }
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "== slurm stage FAILED: slurmd must run as root and this CI user is not"; exit 1
fi
[ -d .venv ] || { python3 -m venv .venv && . .venv/bin/activate && pip install -q torch==2.13.0 -e '.[test]'; }
. .venv/bin/activate
echo "== slurm: $(slurmctld -V)"
# A real Ray for tests/slurm/test_slurm_ray.py (a Ray head and worker as components), in a venv of its own
# cached by version; the stage fails where it cannot be installed.
ray_ver=2.60.0
ray_venv="$HOME/.cache/rlsup-ci/ray-$ray_ver"
if [ ! -f "$ray_venv/.installed" ]; then
    echo "== pip install 'ray[default]==$ray_ver' into $ray_venv"
    for try in 1 2 3; do  # a registry hiccup is tried again; pip's cache keeps what it got
        rm -rf "$ray_venv"
        if python3 -m venv "$ray_venv" && "$ray_venv/bin/pip" install -q "ray[default]==$ray_ver" >/dev/null 2>&1; then
            touch "$ray_venv/.installed"; break
        fi
        echo "== installing ray[default]==$ray_ver failed (try $try of 3)"; sleep $((try * 20))
    done
    [ -f "$ray_venv/.installed" ] || { echo "== slurm stage FAILED: cannot install ray[default]==$ray_ver"; exit 1; }
fi
export RLSUP_RAY_VENV="$ray_venv"
RLSUP_SLURM=1 python -m pytest -n 0 -q -p no:cacheprovider tests/slurm tests/supervisor/slurm
echo "== slurm stage took $(( $(date +%s) - start ))s"
