#!/usr/bin/env bash
# The real-process fault explorer's CI budget (issue 38): RLSUP_EXPLORE_SEQUENCES seeded sequences of real
# faults and user actions against the demo stack (default 20: seeds 1-20; the README's test command runs
# seeds 0-1). Fixed seeds, so that a red stage is a bug to replay, not the day's luck; to explore further,
# move the stretch: RLSUP_EXPLORE_BASE=1000 RLSUP_EXPLORE_SEQUENCES=100 .ci/explore.sh. A failure prints
# its replay line: RLSUP_EXPLORE_SEED=N python -m pytest -n 0 tests/explorer/test_explorer.py
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
base=${RLSUP_EXPLORE_BASE:-1}
n=${RLSUP_EXPLORE_SEQUENCES:-20}
echo "== fault explorer: $n sequences from seed $base"
RLSUP_EXPLORE_SEQUENCES=$n RLSUP_EXPLORE_BASE=$base python -m pytest tests/explorer/test_explorer.py -n 2 --dist load
