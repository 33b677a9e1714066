"""The fixture corpus: real failure texts from public issue trackers, each with its expected diagnosis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlsup.supervisor.diagnosis import CATEGORIES, diagnose_file

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "diagnosis"
EXPECTED: dict[str, dict] = json.loads((FIXTURES / "expected.json").read_text())


def test_corpus_is_complete_and_sourced() -> None:
    logs = sorted(p.name for p in FIXTURES.glob("*.log"))
    assert logs == sorted(EXPECTED), "every fixture has an expectation and vice versa"
    failures = [n for n, e in EXPECTED.items() if e["category"] != "none"]
    negatives = [n for n, e in EXPECTED.items() if e["category"] == "none"]
    assert len(failures) >= 30
    assert len(negatives) >= 5
    for name in logs:
        first = (FIXTURES / name).read_text().splitlines()[0]
        assert first.startswith("# source: https://github.com/"), name
    assert {e["category"] for e in EXPECTED.values()} <= set(CATEGORIES)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_diagnosis(name: str) -> None:
    d = diagnose_file(FIXTURES / name)
    got = {"category": d.category, "exception_type": d.exception_type, "location": d.location, "step": d.step}
    assert got == EXPECTED[name], d.summary
    assert d.summary and "\n" not in d.summary
    assert len(d.evidence) <= 12
    if d.category != "none":
        assert d.evidence, "a failure comes with the lines that prove it"
