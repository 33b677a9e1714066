"""The bench's report: held-out parts one by one and together, the figures as measured once, per
source kind, per category, benign false alarms and the first-listed share."""

from __future__ import annotations

import functools
import io
import json
from pathlib import Path

from tests.supervisor.diagnosis.bench import HELDOUT_ALL, HELDOUT_PARTS, main, measured_once, source_kind

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "diagnosis"


def _split() -> dict:
    return json.loads((FIXTURES / "split.json").read_text())


@functools.cache
def _report(*argv: str) -> str:
    """The bench's output for ``argv``, run once per module (each run diagnoses the whole corpus)."""
    out = io.StringIO()
    assert main(list(argv), out) == 0
    return out.getvalue()


def test_default_report_has_every_heldout_part_then_all_of_them_together_then_the_corpus() -> None:
    text = _report()
    heads = [ln.split(":")[0] for ln in text.splitlines() if ln.startswith("== ") and "fixtures right" in ln]
    assert heads == [f"== {p}" for p in (*HELDOUT_PARTS, HELDOUT_ALL, "all")]
    for needle in ("source kind", "precision", "recall", "benign false alarms:", "first-listed category the answer on"):
        assert needle in text


def test_heldout_all_is_the_union_of_the_parts() -> None:
    doc = json.loads(_report("--json"))
    split = _split()
    names = set()
    for p in HELDOUT_PARTS:
        v = split[p]
        names |= set(v["names"] if isinstance(v, dict) else v)
    assert doc[HELDOUT_ALL]["fixtures"] == len(names) == sum(doc[p]["fixtures"] for p in HELDOUT_PARTS)


def test_measured_once_figures_come_from_split_json_and_are_printed_apart() -> None:
    once = measured_once(FIXTURES)
    split = _split()
    assert once["heldout2"] == split["heldout2"]["measured_after_tuning"]
    assert once["heldout"]["right"] == 36 and once["heldout"]["fixtures"] == 37
    text = _report()
    assert "== held-out parts as measured once" in text
    block = text.split("== held-out parts as measured once", 1)[1]
    assert "heldout2       28/30      93.3%  benign false alarms 0" in block
    r = sum(m["right"] for m in once.values())
    n = sum(m["fixtures"] for m in once.values())
    assert f"together    {r:>5}/{n:<5}" in block
    assert json.loads(_report("--json"))["measured_once"] == once


def test_source_kinds() -> None:
    assert source_kind("# source: local run: python x.py") == "local_run"
    assert source_kind("# source: https://github.com/vllm-project/vllm/issues/1") == "github_issue"
    assert source_kind("# source: https://github.com/vllm-project/vllm/pull/2") == "github_other"
    assert source_kind("# source: https://discuss.ray.io/t/x/1") == "forum"
    assert source_kind("# source: https://docs.nesi.org.nz/General/FAQs/x") == "docs"
    assert source_kind("# source: https://www.osc.edu/documentation/knowledge_base/x") == "docs"
    assert source_kind("# source: https://velog.io/@a/b") == "blog"


def test_heldout5_to_7_keep_their_measured_once_figures_after_being_tuned_on() -> None:
    """Their misses were fixed after their one measurement (heldout7's in part): the bench's "now" rose,
    the recorded figures did not (38/60 with 3 benign false alarms; 32/35 and 11/16 with none)."""
    once = measured_once(FIXTURES)
    assert {k: once["heldout5"][k] for k in ("right", "fixtures", "benign_false_alarms", "engine_commit")} == {
        "right": 38, "fixtures": 60, "benign_false_alarms": 3, "engine_commit": "29d0f71"}
    assert {k: once["heldout6"][k] for k in ("right", "fixtures", "benign_false_alarms", "engine_commit")} == {
        "right": 32, "fixtures": 35, "benign_false_alarms": 0, "engine_commit": "f793ce1"}
    assert {k: once["heldout7"][k] for k in ("right", "fixtures", "benign_false_alarms", "engine_commit")} == {
        "right": 11, "fixtures": 16, "benign_false_alarms": 0, "engine_commit": "93cfe49"}
    split = _split()
    assert set(once["heldout6"]["misses"]) <= set(split["heldout6"]["names"])
    assert all(n.startswith("h6_") for n in split["heldout6"]["names"])
    older = set(split["heldout"]).union(*(split[p]["names"] for p in ("heldout2", "heldout3", "heldout4", "heldout5")))
    assert not set(split["heldout6"]["names"]) & older


def test_heldout8_keeps_its_measured_once_figure() -> None:
    """heldout8 (23 runs made here, frozen at e7c9357) measured once at engine f874ecd: 19/23 with 2
    benign false alarms of 5; its misses are known misses, not tuned on."""
    once = measured_once(FIXTURES)
    assert {k: once["heldout8"][k] for k in ("right", "fixtures", "benign_false_alarms", "engine_commit")} == {
        "right": 19, "fixtures": 23, "benign_false_alarms": 2, "engine_commit": "f874ecd"}
    split = _split()
    assert set(once["heldout8"]["misses"]) <= set(split["heldout8"]["names"])
    assert all(n.startswith("h8_") for n in split["heldout8"]["names"])
    older = set(split["heldout"]).union(*(split[p]["names"] for p in (
        "heldout2", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7")))
    assert not set(split["heldout8"]["names"]) & older


def test_heldout9_keeps_its_measured_once_figure() -> None:
    """heldout9 (14 GitHub-issue excerpts chosen by a query rule fixed before any was seen, 4 benign runs;
    frozen at 962e21f) measured once at engine 962e21f: 10/18, no benign false alarm; its misses are
    known misses, not tuned on."""
    once = measured_once(FIXTURES)
    assert {k: once["heldout9"][k] for k in ("right", "fixtures", "benign_false_alarms", "engine_commit")} == {
        "right": 10, "fixtures": 18, "benign_false_alarms": 0, "engine_commit": "962e21f"}
    split = _split()
    assert set(once["heldout9"]["misses"]) <= set(split["heldout9"]["names"])
    assert all(n.startswith("h9_") for n in split["heldout9"]["names"])
    older = set(split["heldout"]).union(*(split[p]["names"] for p in (
        "heldout2", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7", "heldout8")))
    assert not set(split["heldout9"]["names"]) & older


def test_heldout10_keeps_its_measured_once_figure() -> None:
    """heldout10 (10 GitHub-issue excerpts chosen by a query rule fixed before any was seen, 12 real
    vLLM/SGLang CPU runs fixed in produce/h10_engines.sh, 6 of them benign; frozen at de2e1b3) measured
    once at engine 16c2a34: 21/22, no benign false alarm; its miss is a known miss, not tuned on."""
    once = measured_once(FIXTURES)
    assert {k: once["heldout10"][k] for k in ("right", "fixtures", "benign_false_alarms", "engine_commit")} == {
        "right": 21, "fixtures": 22, "benign_false_alarms": 0, "engine_commit": "16c2a34"}
    split = _split()
    assert set(once["heldout10"]["misses"]) <= set(split["heldout10"]["names"])
    assert all(n.startswith("h10_") for n in split["heldout10"]["names"])
    older = set(split["heldout"]).union(*(split[p]["names"] for p in (
        "heldout2", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7", "heldout8", "heldout9")))
    assert not set(split["heldout10"]["names"]) & older
