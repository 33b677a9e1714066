"""A damaged journal line is one damaged line (issue 43 item 4).

Real journals (the recorded run dirs of tests/fixtures/report) are damaged at random: a line replaced by
any JSON (``{"seq":"x","kind":5}`` and friends), a field of a line given a value of any type (nested fields
too), a line cut short, NUL bytes and invalid UTF-8 put in, a huge line, lines duplicated, swapped and moved.
Then every reader of a run dir reads it: the journal itself, the replay (status of an ended run, resume,
the fleet and bridge through the archive), the report, ``why``, ``events`` and ``diagnose RUN_DIR``. None
may raise; the events read go up in ``seq``; every damaged line is named with its line number, and only
lines that were damaged (or sit next to a moved one) are; every other line is read.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsup.supervisor.cli.why import as_json, explain, format_why
from rlsup.supervisor.diagnosis.offline import diagnose_command
from rlsup.supervisor.records.events import human
from rlsup.supervisor.render.report import build_report
from rlsup.supervisor.rundir import journal
from rlsup.supervisor.rundir.archive import Archive
from rlsup.supervisor.rundir.layout import RunPaths
from rlsup.supervisor.rundir.replay import read_run
from tests.tier import examples

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "report"
RUNS = sorted(p for p in FIXTURES.iterdir() if (p / "events.jsonl").exists())
SMALL_MAX_LINE = 4096  # the huge-line case without writing 16 MiB per example

_scalar = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=12)
_any_json = st.recursive(_scalar, lambda inner: st.lists(inner, max_size=3)
                         | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)


def _dumps(v: Any) -> bytes:
    return json.dumps(v, allow_nan=True).encode()


def _set_path(d: Any, path: list[Any], value: Any) -> None:
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value


def _paths(v: Any, prefix: list[Any]) -> list[list[Any]]:
    """Every key path into a JSON value (so a nested field can get a wrong type too)."""
    out = []
    items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else []
    for k, x in items:
        out.append(prefix + [k])
        out += _paths(x, prefix + [k])
    return out


@st.composite
def damaged(draw: st.DrawFn, lines: list[bytes]) -> tuple[list[bytes], set[int]]:
    """The journal's lines with a few damages; the (0-based) indexes of the lines touched in the result."""
    out = list(lines)
    touched = [False] * len(out)
    reorders = 0
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(out) - 1))
        how = draw(st.sampled_from(["replace", "field", "cut", "nul", "utf8", "huge", "dup", "swap", "move",
                                    "seqx"]))
        if how == "replace":
            out[i] = _dumps(draw(_any_json)) + b"\n"
        elif how == "seqx":
            out[i] = b'{"seq":"x","kind":5}\n'
        elif how == "field":
            try:
                d = json.loads(out[i])
            except ValueError:
                continue
            keys = _paths(d, [])
            if not keys:
                continue
            key = draw(st.sampled_from(keys))
            _set_path(d, key, draw(_any_json))
            reorders += key == ["seq"]  # another number there moves the line
            out[i] = _dumps(d) + b"\n"
        elif how == "cut":
            out[i] = out[i][:draw(st.integers(0, max(0, len(out[i]) - 2)))] + b"\n"
        elif how == "nul":
            k = draw(st.integers(0, len(out[i]) - 1))
            out[i] = out[i][:k] + b"\x00" * draw(st.integers(1, 3)) + out[i][k:]
        elif how == "utf8":
            k = draw(st.integers(0, len(out[i]) - 1))
            out[i] = out[i][:k] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xfe\xfe"])) + out[i][k:]
        elif how == "huge":
            out[i] = out[i][:-2] + b" " * (SMALL_MAX_LINE + 10) + out[i][-2:]
        elif how == "dup":
            out.insert(i, out[i])
            touched.insert(i, True)
        elif how in ("swap", "move"):
            reorders += 1
        if how == "swap":
            j = draw(st.integers(0, len(out) - 1))
            out[i], out[j] = out[j], out[i]
            touched[i], touched[j] = touched[j], touched[i]
            touched[j] = True
        if how == "move":
            j = draw(st.integers(0, len(out) - 1))
            line, t = out.pop(i), touched.pop(i)
            out.insert(j, line)
            touched.insert(j, True)
            del t
            continue
        touched[i] = True
    if reorders > 1:  # two lines moved: which of them and their neighbours is "out of order" is a matter of taste
        touched = [True] * len(out)
    return out, {k for k, t in enumerate(touched) if t}


def _read_everything(run_dir: Path) -> list[dict[str, Any]]:
    """Every reader of a run dir, as the commands call them; what the journal reader let through."""
    paths = RunPaths(run_dir)
    records = list(journal.read_records(paths.events))
    events = [r.to_dict() for r in records]
    journal.last_seq(paths.events)
    rp = read_run(paths)
    rp.final_state()
    rp.last_run  # noqa: B018 - the property is read by `status` and the archive
    archive = Archive(run_dir)  # status of an ended run, bridge, the fleet's view of an ended pod
    archive.snapshot_state()
    archive.describe()
    archive.hello()
    build_report(run_dir)
    for e in events:
        human(e)
    for name in {e.get("component") for e in events if e.get("kind") == "started"}:
        x = explain(records, str(name))
        if x is not None:
            format_why(x)
            json.dumps(as_json(x), default=str)
    out = io.StringIO()
    diagnose_command([str(run_dir)], True, out)
    diagnose_command([str(run_dir)], False, out)
    return events


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_damaged_journals_are_read_line_by_line(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal, "MAX_LINE", SMALL_MAX_LINE, raising=False)  # raising: the old reader had none
    lines = (run / "events.jsonl").read_bytes().splitlines(keepends=True)

    @settings(max_examples=examples(int(os.environ.get("H_EX", "60"))), deadline=None, derandomize=not os.environ.get("H_EX"),
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(damaged(lines))
    def check(case: tuple[list[bytes], set[int]]) -> None:
        out, touched = case
        with tempfile.TemporaryDirectory() as tmp:
            rd = Path(tmp) / "run"
            shutil.copytree(run, rd)
            (rd / "events.jsonl").write_bytes(b"".join(out))
            getattr(journal, "DAMAGE", {}).clear()
            events = _read_everything(rd)
            seqs = [e["seq"] for e in events]
            assert seqs == sorted(set(seqs)), "events read go up in seq"
            damage = getattr(journal, "DAMAGE", {}).get(str(rd / "events.jsonl"), {})
            near = {k + d for k in touched for d in (-1, 0, 1)}
            wrong = {n: why for n, why in damage.items() if n - 1 not in near}
            assert not wrong, f"sound lines named as damaged: {wrong}"
            read = {json.dumps(e, sort_keys=True) for e in events}
            for k, line in enumerate(out):
                if k not in near and k - 1 not in touched and k + 1 not in touched:
                    assert json.dumps(json.loads(line), sort_keys=True) in read, f"sound line {k + 1} not read"

    check()


def test_the_issues_line_is_skipped_counted_and_said_once(tmp_path: Path) -> None:
    """`{"seq":"x","kind":5}` in a real journal: status, report, events, why and diagnose all answer (exit
    0, no traceback), each saying once which line was skipped; resume (`up --resume`) reads past it too."""
    rd = tmp_path / "run"
    shutil.copytree(FIXTURES / "chaos", rd)
    lines = (rd / "events.jsonl").read_bytes().splitlines(keepends=True)
    lines.insert(5, b'{"seq":"x","kind":5}\n')
    (rd / "events.jsonl").write_bytes(b"".join(lines))
    env = {**os.environ, "COLUMNS": "200"}
    for cmd in (["status"], ["status", "--json"], ["report"], ["events"], ["events", "--json"], ["why", "trainer"],
                ["diagnose", str(rd)]):
        argv = [sys.executable, "-m", "rlsup.supervisor.cli", *cmd]
        if cmd[0] != "diagnose":
            argv += ["--run-dir", str(rd)]
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        assert p.returncode == 0, (cmd, p.stdout[-2000:], p.stderr[-2000:])
        assert "Traceback" not in p.stderr
        assert p.stderr.count("damaged line") == 1, (cmd, p.stderr)
        assert 'line 6: seq "x" is not a positive integer' in p.stderr, (cmd, p.stderr)


def test_events_json_prints_each_line_as_it_was_in_its_key_order(tmp_path: Path) -> None:
    """`rlsup events --json` gives each sound line back as the line had it, keys in its order: a field this
    version has no name for (an older or newer writer's) stays where the line has it, not at the end; a field of
    the wrong type is left out (said once on stderr), a damaged line skipped."""
    rd = tmp_path / "run"
    shutil.copytree(FIXTURES / "chaos", rd)
    lines = (rd / "events.jsonl").read_bytes().splitlines(keepends=True)
    first = json.loads(lines[0])
    odd = {"ts": first["ts"] + 0.5, "seq": 0, "kind": "started", "component": "trainer", "pid": 7,
           "gone_field": {"kept": [1, 2]}, "attempt": 9, "cause": {"reason": "old shape", "by": "user"}}
    mistyped = {"ts": first["ts"] + 0.6, "seq": 0, "kind": "exited", "component": "trainer", "exit_code": "one",
                "later": 1}
    seqs = [json.loads(x)["seq"] for x in lines]
    odd["seq"], mistyped["seq"] = max(seqs) + 1, max(seqs) + 2
    lines += [json.dumps(odd).encode() + b"\n", b'{"torn": \n', json.dumps(mistyped).encode() + b"\n"]
    (rd / "events.jsonl").write_bytes(b"".join(lines))
    p = subprocess.run([sys.executable, "-m", "rlsup.supervisor.cli", "events", "--json", "--run-dir", str(rd)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    want = [json.dumps(json.loads(x)) for x in lines[:-3]] + [json.dumps(odd)]
    want.append(json.dumps({k: v for k, v in mistyped.items() if k != "exit_code"}))
    assert p.stdout.splitlines() == want
    assert p.stderr.count("damaged line") == 1


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_a_reader_that_chooses_kinds_gets_the_same_records_and_the_same_damage(run: Path, tmp_path: Path) -> None:
    """``read_records(kinds=...)`` (the server's preload takes only lifecycle events, unparsed lines being most of
    a long journal's cost) gives what reading all and keeping those kinds gives, with the same damage noted,
    the line held back to judge its ``seq`` included."""
    from rlsup.supervisor.records.events import is_lifecycle

    lines = (run / "events.jsonl").read_bytes().splitlines(keepends=True)
    lines.insert(3, b'{"seq":"x","kind":5}\n')
    lines.insert(len(lines) // 2, lines[len(lines) // 3])  # a duplicate seq
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(lines))
    journal.DAMAGE.pop(str(path), None)
    every = [r.to_dict() for r in journal.read_records(path) if is_lifecycle(r.kind)]
    damage = dict(journal.DAMAGE.pop(str(path)))
    chosen = [r.to_dict() for r in journal.read_records(path, kinds=is_lifecycle)]
    assert chosen == every and every
    assert journal.DAMAGE.pop(str(path)) == damage and damage
    since = every[len(every) // 2]["seq"]
    assert [r.to_dict() for r in journal.read_records(path, since, kinds=is_lifecycle)] == \
        [e for e in every if e["seq"] > since]
