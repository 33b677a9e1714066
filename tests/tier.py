"""Which tier of the suite runs: the fast tier (`pytest -m "not e2e"`), the whole suite (the README's test
command), or the deep property stage of CI (`.ci/properties.sh`, ``RLSUP_DEEP_PROPERTIES=1``).

Property tests ask :func:`examples` how many examples to run, giving their deep count: all of them in the deep
stage, a third in the whole suite (which must stay within its time on 2 cores), a tenth in the fast tier, for a
quick check while editing; never fewer than 25. ``FAST`` is set by tests/conftest.py before any test module is
imported.
"""

from __future__ import annotations

import os

FAST = False
DEEP = os.environ.get("RLSUP_DEEP_PROPERTIES") == "1"


def examples(n: int) -> int:
    if DEEP:
        return n
    return max(25, n // 10 if FAST else n // 3)
