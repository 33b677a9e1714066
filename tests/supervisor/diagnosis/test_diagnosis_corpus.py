"""The fixture corpus: real failure texts from public issue trackers, each with its expected diagnosis.

A labelled fixture that stops being diagnosed right fails here (``known_miss`` ones are reported by
the bench instead, and must carry a reason).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from rlsup.supervisor.diagnosis import CATEGORIES, diagnose_file
from rlsup.supervisor.diagnosis.bench import evaluate, load_cases

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "diagnosis"
CASES = {c.name: c for c in load_cases(FIXTURES)}
SPLIT = json.loads((FIXTURES / "split.json").read_text())


def test_corpus_is_complete_and_sourced() -> None:
    cats = Counter(c.expected["category"] for c in CASES.values())
    assert len(CASES) >= 150
    assert cats["none"] >= 30, "benign excerpts"
    # every category has real examples, four or more
    assert {c for c in CATEGORIES if c != "none" and cats[c] < 4} == set()
    assert set(cats) <= set(CATEGORIES)
    for name in CASES:
        first = (FIXTURES / name).read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# source: https://"), name
    assert set(SPLIT["heldout"]) <= set(CASES)
    fresh = set(SPLIT["fresh_after_tuning"]["names"])
    assert fresh <= set(CASES) and not fresh & set(SPLIT["heldout"])


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if not c.known_miss))
def test_fixture_diagnosis(name: str) -> None:
    d = diagnose_file(FIXTURES / name)
    got = {"category": d.category, "exception_type": d.exception_type, "location": d.location, "step": d.step}
    assert got == CASES[name].expected, d.summary
    assert d.summary and "\n" not in d.summary
    assert len(d.evidence) <= 12
    if d.category != "none":
        assert d.evidence, "a failure comes with the lines that prove it"
        assert d.hint, "a failure comes with what to do next"
    if d.location is not None:
        assert d.library_location == (not _is_user(d.location))


def _is_user(loc: str) -> bool:
    from rlsup.supervisor.diagnosis.tracebacks import is_user_frame

    return is_user_frame(loc.rpartition(":")[0])


def test_known_misses_have_reasons_and_no_benign_false_alarm() -> None:
    for c in CASES.values():
        if c.known_miss is not None:
            assert len(c.known_miss) > 20, c.name
    rep = evaluate(FIXTURES, "all")
    assert rep.benign_false_alarms() == []
    missed = {r.case.name for r in rep.results if not r.right}
    assert missed == {n for n, c in CASES.items() if c.known_miss}


def test_bench_prints_figures_table_confusion_and_misses() -> None:
    import io

    from rlsup.supervisor.diagnosis.bench import main

    out = io.StringIO()
    assert main(["--subset", "all"], out) == 0
    text = out.getvalue()
    assert text.startswith("== all: ") and "precision" in text and "recall" in text
    assert "confusion (rows: label, columns: diagnosis)" in text
    for name, c in CASES.items():
        if c.known_miss:
            assert f"{name}  [known miss: " in text
    out = io.StringIO()
    assert main(["--json"], out) == 0
    report = json.loads(out.getvalue())
    assert set(report) == {"heldout", "all"}
    assert report["all"]["fixtures"] == len(CASES)
    assert report["heldout"]["fixtures"] == len(SPLIT["heldout"])
    assert {m["fixture"] for m in report["all"]["misses"]} == {n for n, c in CASES.items() if c.known_miss}
