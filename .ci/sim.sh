#!/usr/bin/env bash
# The deterministic run simulator's CI budget (issue 38): RLSUP_SIM_EXAMPLES random schedules of faults and
# actions against rlsup's real decisions (default 10,000; the README's test command runs 500), every promise
# of docs/lifecycle.md checked after every step. Derandomized: a red stage replays as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
n=${RLSUP_SIM_EXAMPLES:-10000}
echo "== run simulator: $n schedules"
RLSUP_SIM_EXAMPLES=$n python -m pytest tests/sim/test_sim.py -n 0 -o addopts="" -q --timeout 3600
