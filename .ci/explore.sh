#!/usr/bin/env bash
# The real-process fault explorer with a longer budget (issue 38): RLSUP_EXPLORE_SEQUENCES seeded sequences
# of real faults and user actions against the demo stack (default 60), from a stretch of seeds that moves
# every day (RLSUP_EXPLORE_BASE to pin it). The suite itself runs seeds 0-11 on every CI run; a failure
# prints its replay line: RLSUP_EXPLORE_SEED=N python -m pytest -n 0 tests/explorer/test_explorer.py
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
base=${RLSUP_EXPLORE_BASE:-$(( $(date +%s) / 86400 * 1000 ))}
n=${RLSUP_EXPLORE_SEQUENCES:-60}
echo "== fault explorer: $n sequences from seed $base"
RLSUP_EXPLORE_SEQUENCES=$n RLSUP_EXPLORE_BASE=$base python -m pytest tests/explorer/test_explorer.py -n 2 --dist load
