"""Accuracy of the diagnosis engine on the labelled corpus of real failure logs.

``python -m rlsup.supervisor.diagnosis.bench [--fixtures DIR] [--json] [--subset all|heldout|fresh|tuning]``

Every ``*.log`` under ``tests/fixtures/diagnosis`` is an excerpt quoted from a public issue (its
first line names the URL); ``expected.json`` holds its label: the category, and where the log
shows them the exception type, the location (``file:line``) and the last step. A fixture is
right when all four agree. ``split.json`` names the held-out excerpts, frozen before the engine
was tuned: the figure on those is the one that says how the engine does on logs nobody tuned it
to; ``fresh_after_tuning`` names excerpts collected after it was tuned. A label may carry
``known_miss`` (a reason); it still counts as a miss.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .model import CATEGORIES
from .offline import diagnose_file

FIELDS = ("category", "exception_type", "location", "step")
DEFAULT_FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "diagnosis"


@dataclass(frozen=True)
class Case:
    name: str
    expected: dict[str, Any]
    known_miss: str | None = None


@dataclass
class Result:
    case: Case
    got: dict[str, Any]

    @property
    def right(self) -> bool:
        return all(self.got[f] == self.case.expected.get(f) for f in FIELDS)

    @property
    def wrong_fields(self) -> list[str]:
        return [f for f in FIELDS if self.got[f] != self.case.expected.get(f)]


@dataclass
class Report:
    results: list[Result]
    subset: str = "all"
    confusion: dict[str, Counter[str]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def right(self) -> int:
        return sum(r.right for r in self.results)

    @property
    def category_right(self) -> int:
        return sum(r.got["category"] == r.case.expected["category"] for r in self.results)

    @property
    def accuracy(self) -> float:
        return self.right / self.total if self.total else 0.0

    def benign_false_alarms(self) -> list[Result]:
        return [r for r in self.results if r.case.expected["category"] == "none" and r.got["category"] != "none"]

    def per_category(self) -> dict[str, tuple[int, int, int]]:
        """category -> (true positives, labelled, predicted), on the category alone."""
        tp: Counter[str] = Counter()
        labelled: Counter[str] = Counter()
        predicted: Counter[str] = Counter()
        for r in self.results:
            e, g = r.case.expected["category"], r.got["category"]
            labelled[e] += 1
            predicted[g] += 1
            if e == g:
                tp[e] += 1
        cats = [c for c in CATEGORIES if labelled[c] or predicted[c]]
        return {c: (tp[c], labelled[c], predicted[c]) for c in cats}

    def to_dict(self) -> dict[str, Any]:
        return {
            "subset": self.subset,
            "fixtures": self.total,
            "right": self.right,
            "accuracy": round(self.accuracy, 4),
            "category_right": self.category_right,
            "benign": sum(r.case.expected["category"] == "none" for r in self.results),
            "benign_false_alarms": [r.case.name for r in self.benign_false_alarms()],
            "per_category": {c: {"tp": t, "labelled": n, "predicted": p}
                             for c, (t, n, p) in self.per_category().items()},
            "misses": [{"fixture": r.case.name, "fields": r.wrong_fields, "expected": r.case.expected,
                        "got": r.got, "known_miss": r.case.known_miss}
                       for r in self.results if not r.right],
        }


def load_cases(fixtures: Path = DEFAULT_FIXTURES) -> list[Case]:
    """Every labelled fixture, sorted by name. Raises if a log has no label or vice versa."""
    labels: dict[str, dict[str, Any]] = json.loads((fixtures / "expected.json").read_text())
    logs = sorted(p.name for p in fixtures.glob("*.log"))
    if sorted(labels) != logs:
        missing = sorted(set(logs) ^ set(labels))
        raise ValueError(f"fixtures and expected.json disagree: {missing[:5]}")
    cases = []
    for name in logs:
        lab = dict(labels[name])
        miss = lab.pop("known_miss", None)
        cases.append(Case(name, {f: lab.get(f) for f in FIELDS}, miss))
    return cases


def heldout_names(fixtures: Path = DEFAULT_FIXTURES) -> set[str]:
    p = fixtures / "split.json"
    return set(json.loads(p.read_text())["heldout"]) if p.exists() else set()


def fresh_names(fixtures: Path = DEFAULT_FIXTURES) -> set[str]:
    """Excerpts collected after the engine was tuned (split.json ``fresh_after_tuning``)."""
    p = fixtures / "split.json"
    if not p.exists():
        return set()
    return set((json.loads(p.read_text()).get("fresh_after_tuning") or {}).get("names") or [])


def run_case(case: Case, fixtures: Path = DEFAULT_FIXTURES) -> Result:
    d = diagnose_file(fixtures / case.name)
    got = {"category": d.category, "exception_type": d.exception_type, "location": d.location, "step": d.step}
    return Result(case, got)


def evaluate(fixtures: Path = DEFAULT_FIXTURES, subset: str = "all") -> Report:
    cases = load_cases(fixtures)
    held = heldout_names(fixtures)
    fresh = fresh_names(fixtures)
    if subset == "heldout":
        cases = [c for c in cases if c.name in held]
    elif subset == "fresh":
        cases = [c for c in cases if c.name in fresh]
    elif subset == "tuning":
        cases = [c for c in cases if c.name not in held and c.name not in fresh]
    results = [run_case(c, fixtures) for c in cases]
    confusion: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        confusion[r.case.expected["category"]][r.got["category"]] += 1
    return Report(results, subset, dict(confusion))


def timing(fixtures: Path = DEFAULT_FIXTURES, lines: int = 1000, repeat: int = 5) -> str:
    """Milliseconds diagnose() takes on a ``lines``-line tail of benign and of mixed corpus lines
    (the best of ``repeat`` runs: a shared machine adds noise, never speed)."""
    import time

    from .engine import diagnose
    from .offline import read_tail

    def tail_of(paths: list[Path]) -> list[str]:
        out: list[str] = []
        while len(out) < lines:
            for p in paths:
                out.extend(read_tail(p)[1:])
        return out[:lines]

    logs = sorted(fixtures.glob("*.log"))
    rows = []
    for label, paths in (("benign", [p for p in logs if p.name.startswith("neg_")]), ("mixed", logs)):
        tail = tail_of(paths)
        best = float("inf")
        for _ in range(repeat):
            t = time.perf_counter()
            diagnose(tail, exit_code=1)
            best = min(best, time.perf_counter() - t)
        rows.append(f"{label}: {best * 1000:.1f} ms for {lines} lines")
    return "; ".join(rows)


def _pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:5.1f}%" if b else "    -"


def format_report(rep: Report, out: TextIO, misses: bool = True) -> None:
    w = out.write
    w(f"== {rep.subset}: {rep.right}/{rep.total} fixtures right ({_pct(rep.right, rep.total).strip()}); "
      f"category right on {rep.category_right}/{rep.total}; "
      f"benign false alarms: {len(rep.benign_false_alarms())}\n\n")
    w(f"{'category':<24}{'labelled':>9}{'predicted':>10}{'precision':>11}{'recall':>9}\n")
    for cat, (tp, n, p) in rep.per_category().items():
        w(f"{cat:<24}{n:>9}{p:>10}{_pct(tp, p):>11}{_pct(tp, n):>9}\n")
    cats = list(rep.per_category())
    short = {c: c[:6] for c in cats}
    w("\nconfusion (rows: label, columns: diagnosis)\n")
    w(" " * 24 + "".join(f"{short[c]:>7}" for c in cats) + "\n")
    for c in cats:
        row = rep.confusion.get(c, Counter())
        if not sum(row.values()):
            continue
        w(f"{c:<24}" + "".join(f"{(row[d] or '.')!s:>7}" for d in cats) + "\n")
    if misses:
        wrong = [r for r in rep.results if not r.right]
        w(f"\nmisses ({len(wrong)}):\n")
        for r in wrong:
            note = f"  [known miss: {r.case.known_miss}]" if r.case.known_miss else ""
            w(f"  {r.case.name}{note}\n")
            for f in r.wrong_fields:
                w(f"      {f}: expected {r.case.expected.get(f)!r}, got {r.got[f]!r}\n")
    w("\n")


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    ap = argparse.ArgumentParser(prog="python -m rlsup.supervisor.diagnosis.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES)
    ap.add_argument("--subset", choices=("all", "heldout", "fresh", "tuning"), default=None,
                    help="one subset only (default: the held-out part, then the whole corpus)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--timing", action="store_true",
                    help="also time diagnose() on a 1,000-line tail made of the corpus (no other output)")
    args = ap.parse_args(argv)
    if args.timing:
        out.write(timing(args.fixtures) + "\n")
        return 0
    subsets = [args.subset] if args.subset else ["heldout", "all"]
    reports = [evaluate(args.fixtures, s) for s in subsets]
    if args.json:
        json.dump({r.subset: r.to_dict() for r in reports}, out, indent=2)
        out.write("\n")
    else:
        for r in reports:
            format_report(r, out, misses=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
