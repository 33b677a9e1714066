"""Which tier of the suite runs: the fast tier (`pytest -m "not e2e"`) or the whole suite.

Property tests ask :func:`examples` how many examples to run: all of them in the whole suite (the
README's test command, CI), a tenth (at least 25) in the fast tier, which is for a quick check while
editing, under a minute on 2 cores. Set by tests/conftest.py before any test module is imported.
"""

from __future__ import annotations

FAST = False


def examples(n: int) -> int:
    return max(25, n // 10) if FAST else n
