#!/usr/bin/env bash
# The property tests at their full example counts (tests/tier.py: the README's test command runs a third of
# them, the fast tier a tenth): config fuzzing, adversarial secrets, journal damage, terminal rendering and the
# TUI's model. Run by .ci/run beside the Slurm stage, whose tests mostly wait on Slurm.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
echo "== property tests at their full example counts"
RLSUP_DEEP_PROPERTIES=1 python -m pytest -o addopts="" -q -p no:cacheprovider --timeout 3600 \
    tests/faults/test_config_fuzz.py tests/supervisor/records/test_redact_adversarial.py \
    tests/supervisor/rundir/test_journal_damage.py tests/supervisor/render/test_terminal.py tests/tui/test_tui_model.py
