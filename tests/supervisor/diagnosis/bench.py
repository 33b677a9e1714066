"""Accuracy of the diagnosis engine on the labelled corpus of real failure logs (a tool beside the tests that
use it, run from the repository root; the figures in docs/diagnosis.md come from it).

``python -m tests.supervisor.diagnosis.bench [--fixtures DIR] [--json] [--subset all|heldout|heldout2|...|heldout10|heldout_all|fresh|tuning]``

Every ``*.log`` under ``tests/fixtures/diagnosis`` is a real excerpt: quoted from a public page
(its first line ``# source: URL`` names it: an issue, a forum thread, a documentation page, a blog
post) or produced here by running real software (``# source: local run: COMMAND``, the exact
command; see ``produce/``). ``expected.json`` holds its label: the category, and where the log
shows them the exception type, the location (``file:line``) and the last step. A fixture is
right when all four agree. Where more than one category is honest (a Ray actor that died while its
process printed a memory error), the label lists them, the most specific first: any of them is
right, and the bench also reports how often the first-listed one is the answer.

``split.json`` names held-out parts, each frozen (committed) before the engine was tuned for it:
the figure on those is the one that says how the engine does on logs nobody tuned it to;
``fresh_after_tuning`` names excerpts collected after it was tuned. A label may carry
``known_miss`` (a reason); it still counts as a miss. Each part's ``measured_after_tuning`` records the
figure measured once, before anyone looked at its misses: the bench prints those apart ("measured
once"), since a part's figure measured later, after its misses were fixed, no longer says how the
engine does on logs nobody tuned it to.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rlsup.supervisor.diagnosis.offline import diagnose_file
from rlsup.supervisor.records.diagnosis import CATEGORIES

FIELDS = ("category", "exception_type", "location", "step")
# held-out parts of split.json, each frozen before the engine was tuned for it (issue 18; issue 29:
# beyond GitHub issues, then the runs collected after that tuning)
HELDOUT_PARTS = ("heldout", "heldout2", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7",
                "heldout8", "heldout9", "heldout10")
HELDOUT_ALL = "heldout_all"  # every held-out part together
DEFAULT_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "diagnosis"


# Where an excerpt comes from, by its first line: the bench reports each kind apart, so a figure
# measured on GitHub issues is not taken for one on forums, documentation or real runs.
SOURCE_KINDS = ("github_issue", "github_other", "forum", "docs", "blog", "local_run")


def source_kind(first_line: str) -> str:
    """The kind of source a fixture's first line (``# source: ...``) names."""
    src = first_line.removeprefix("# source:").strip()
    if src.startswith("local run:"):
        return "local_run"
    low = src.lower()
    host = low.split("//", 1)[-1].split("/", 1)[0]
    if host.endswith("github.com") and "/issues/" in low:
        return "github_issue"
    if host.endswith("github.com") or host == "gist.github.com":
        return "forum" if "/discussions/" in low else "github_other"
    if host.startswith(("discuss.", "forum.", "forums.")) or "stackoverflow.com" in host or "/t/" in low or "/forum/" in low:
        return "forum"
    if (host.startswith("docs.") or "readthedocs" in host or "/docs/" in low or host.startswith("git.")
            or "/documentation/" in low):
        return "docs"
    return "blog"


@dataclass(frozen=True)
class Case:
    name: str
    expected: dict[str, Any]
    known_miss: str | None = None
    # every acceptable category, the most specific first (expected["category"] is the first)
    categories: tuple[str, ...] = ()
    source: str = "github_issue"


@dataclass
class Result:
    case: Case
    got: dict[str, Any]

    def _field_right(self, f: str) -> bool:
        if f == "category" and self.case.categories:
            return self.got[f] in self.case.categories
        return self.got[f] == self.case.expected.get(f)

    @property
    def right(self) -> bool:
        return all(self._field_right(f) for f in FIELDS)

    @property
    def category_ok(self) -> bool:
        return self._field_right("category")

    @property
    def first_listed(self) -> bool:
        """Right, with the first-listed (most specific) category as the answer."""
        return self.right and self.got["category"] == self.case.expected["category"]

    @property
    def wrong_fields(self) -> list[str]:
        return [f for f in FIELDS if not self._field_right(f)]


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
        return sum(r.category_ok for r in self.results)

    @property
    def first_listed(self) -> int:
        return sum(r.first_listed for r in self.results)

    def per_source(self) -> dict[str, tuple[int, int]]:
        """source kind -> (right, fixtures)."""
        out: dict[str, list[int]] = {}
        for r in self.results:
            row = out.setdefault(r.case.source, [0, 0])
            row[0] += r.right
            row[1] += 1
        return {k: (v[0], v[1]) for k, v in sorted(out.items(), key=lambda kv: SOURCE_KINDS.index(kv[0]))}

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
            if r.category_ok:
                e = g  # an acceptable alternative counts for the category it named
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
            "first_listed": self.first_listed,
            "per_source": {k: {"right": a, "fixtures": b} for k, (a, b) in self.per_source().items()},
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
        cats = lab.get("category")
        cats = tuple(cats) if isinstance(cats, list) else (cats,)
        expected = {f: lab.get(f) for f in FIELDS}
        expected["category"] = cats[0]
        with open(fixtures / name, encoding="utf-8", errors="replace") as fh:
            first = fh.readline()
        cases.append(Case(name, expected, miss, cats, source_kind(first)))
    return cases


def heldout_names(fixtures: Path = DEFAULT_FIXTURES, part: str = "heldout") -> set[str]:
    """The excerpts of a held-out part of split.json: ``heldout`` (frozen for issue 18) or
    ``heldout2`` (frozen for issue 29, before the engine was changed for it)."""
    p = fixtures / "split.json"
    if not p.exists():
        return set()
    data = json.loads(p.read_text())
    value = data.get(part) or []
    return set(value["names"] if isinstance(value, dict) else value)


def fresh_names(fixtures: Path = DEFAULT_FIXTURES) -> set[str]:
    """Excerpts collected after the engine was tuned (split.json ``fresh_after_tuning``)."""
    p = fixtures / "split.json"
    if not p.exists():
        return set()
    return set((json.loads(p.read_text()).get("fresh_after_tuning") or {}).get("names") or [])


def measured_once(fixtures: Path = DEFAULT_FIXTURES) -> dict[str, dict[str, Any]]:
    """Each held-out part's figure as measured once, before its misses were looked at (split.json
    ``measured_after_tuning``): part -> {right, fixtures, benign_false_alarms, engine_commit, misses}."""
    p = fixtures / "split.json"
    if not p.exists():
        return {}
    data = json.loads(p.read_text())
    out: dict[str, dict[str, Any]] = {}
    for part in HELDOUT_PARTS:
        value = data.get(part)
        if part == "heldout":
            # issue 18's part: measured once as the "fresh" figure of the first engine run on it
            first = data.get("heldout_measured_once")
            if first:
                out[part] = first
            continue
        if isinstance(value, dict) and value.get("measured_after_tuning"):
            out[part] = value["measured_after_tuning"]
    return out


def format_measured_once(once: dict[str, dict[str, Any]], out: TextIO) -> None:
    if not once:
        return
    w = out.write
    w("== held-out parts as measured once (split.json; before any of their misses were looked at)\n")
    right = total = fas = 0
    for part, m in once.items():
        r, n, fa = m.get("right", 0), m.get("fixtures", 0), m.get("benign_false_alarms", 0)
        right, total, fas = right + r, total + n, fas + fa
        w(f"{part:<12}{r:>5}/{n:<5}{_pct(r, n):>8}  benign false alarms {fa}  (engine {m.get('engine_commit', '?')})\n")
    w(f"{'together':<12}{right:>5}/{total:<5}{_pct(right, total):>8}  benign false alarms {fas}\n\n")


def run_case(case: Case, fixtures: Path = DEFAULT_FIXTURES) -> Result:
    return Result(case, dict(_diagnosed(fixtures / case.name)))


@functools.cache
def _diagnosed(path: Path) -> tuple[tuple[str, Any], ...]:
    """The four fields of a fixture's diagnosis, computed once per process: the report of every part and of
    the whole corpus reads each fixture several times, and diagnosis is a pure function of the file."""
    d = diagnose_file(path)
    return (("category", d.category), ("exception_type", d.exception_type), ("location", d.location), ("step", d.step))


def evaluate(fixtures: Path = DEFAULT_FIXTURES, subset: str = "all") -> Report:
    cases = load_cases(fixtures)
    parts = {p: heldout_names(fixtures, p) for p in HELDOUT_PARTS}
    fresh = fresh_names(fixtures)
    if subset in parts:
        cases = [c for c in cases if c.name in parts[subset]]
    elif subset == HELDOUT_ALL:
        held = set().union(*parts.values())
        cases = [c for c in cases if c.name in held]
    elif subset == "fresh":
        cases = [c for c in cases if c.name in fresh]
    elif subset == "tuning":
        held_any = set().union(*parts.values())
        cases = [c for c in cases if c.name not in held_any | fresh]
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
      f"first-listed category the answer on {rep.first_listed}/{rep.total} "
      f"({_pct(rep.first_listed, rep.total).strip()}); "
      f"benign false alarms: {len(rep.benign_false_alarms())} of "
      f"{sum(r.case.expected['category'] == 'none' for r in rep.results)} benign\n\n")
    w(f"{'source kind':<24}{'right':>9}{'fixtures':>10}{'share':>9}\n")
    for kind, (a, b) in rep.per_source().items():
        w(f"{kind:<24}{a:>9}{b:>10}{_pct(a, b):>9}\n")
    w("\n")
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
    ap = argparse.ArgumentParser(prog="python -m tests.supervisor.diagnosis.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES)
    ap.add_argument("--subset", choices=("all", *HELDOUT_PARTS, HELDOUT_ALL, "fresh", "tuning"), default=None,
                    help="one subset only (default: the held-out parts, all of them together, then the "
                         "whole corpus, and the held-out figures as measured once)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--timing", action="store_true",
                    help="also time diagnose() on a 1,000-line tail made of the corpus (no other output)")
    args = ap.parse_args(argv)
    if args.timing:
        out.write(timing(args.fixtures) + "\n")
        return 0
    subsets = [args.subset] if args.subset else [*HELDOUT_PARTS, HELDOUT_ALL, "all"]
    reports = [evaluate(args.fixtures, s) for s in subsets]
    once = measured_once(args.fixtures) if not args.subset else {}
    if args.json:
        doc: dict[str, Any] = {r.subset: r.to_dict() for r in reports}
        if once:
            doc["measured_once"] = once
        json.dump(doc, out, indent=2)
        out.write("\n")
    else:
        for r in reports:
            format_report(r, out, misses=True)
        format_measured_once(once, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
