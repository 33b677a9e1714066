"""resume.clean (deleting future artefacts safely) and the newest step of a directory, on real files.

Watching a directory for its newest step: test_dirwatch.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlsup.supervisor.rundir.artifacts import CleanRefused, clean_after, scan_newest

# ---------------------------------------------------------------------------------------------
# clean_after


def make_rollouts(out: Path, steps: range) -> None:
    for n in steps:
        d = out / "rollouts" / f"step_{n}"
        d.mkdir(parents=True)
        (d / "rollouts.jsonl").write_text("{}\n")
        (d / "meta.json").write_text("{}")


def test_clean_deletes_exactly_the_future_artefacts(tmp_path: Path) -> None:
    out = tmp_path / "out"
    make_rollouts(out, range(1, 8))
    (out / "rollouts" / "README").write_text("no step here")
    (out / "samples").mkdir()
    for n in (3, 4, 5, 6):
        (out / "samples" / f"samples_{n:04d}.jsonl").write_text("x")
    deleted = clean_after(
        ["rollouts/step_*", "samples/*.jsonl", "missing/step_*"], 4, base=out, allowed_roots=[out]
    )
    assert deleted == sorted(
        [out / "rollouts" / f"step_{n}" for n in (5, 6, 7)]
        + [out / "samples" / f"samples_{n:04d}.jsonl" for n in (5, 6)]
    )
    assert sorted(p.name for p in (out / "rollouts").iterdir()) == ["README", "step_1", "step_2", "step_3", "step_4"]
    assert sorted(p.name for p in (out / "samples").iterdir()) == ["samples_0003.jsonl", "samples_0004.jsonl"]
    assert (out / "rollouts" / "step_4" / "meta.json").is_file()
    # nothing newer left: a second run deletes nothing
    assert clean_after(["rollouts/step_*"], 4, base=out, allowed_roots=[out]) == []


def test_clean_named_step_group_and_recursive_glob(tmp_path: Path) -> None:
    out = tmp_path
    for run in ("a", "b"):
        for n in (9, 10, 11):
            p = out / "buf" / run / f"v2_step{n}.pt"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(b"x")
    deleted = clean_after(["buf/**/*.pt"], 10, base=out, allowed_roots=[out], step_pattern=r"step(?P<step>\d+)")
    assert deleted == [out / "buf" / "a" / "v2_step11.pt", out / "buf" / "b" / "v2_step11.pt"]
    assert (out / "buf" / "a" / "v2_step10.pt").exists()


def test_clean_does_not_follow_symlinks_out(tmp_path: Path) -> None:
    out = tmp_path / "run"
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.bin").write_text("keep")
    make_rollouts(out, range(1, 4))
    # a future step that is a symlink to somewhere else, and one with a symlink inside it
    (out / "rollouts" / "step_9").symlink_to(outside, target_is_directory=True)
    (out / "rollouts" / "step_3" / "shared").symlink_to(outside, target_is_directory=True)
    (out / "rollouts" / "step_8.jsonl").symlink_to(outside / "keep.bin")
    deleted = clean_after(["rollouts/step_*"], 2, base=out, allowed_roots=[out])
    assert deleted == [out / "rollouts" / n for n in ("step_3", "step_8.jsonl", "step_9")]
    assert (outside / "keep.bin").read_text() == "keep"  # nothing behind the links touched
    assert sorted(p.name for p in outside.iterdir()) == ["keep.bin"]
    assert sorted(p.name for p in (out / "rollouts").iterdir()) == ["step_1", "step_2"]


def test_clean_refuses_globs_escaping_with_dotdot(tmp_path: Path) -> None:
    out = tmp_path / "run"
    make_rollouts(out, range(1, 4))
    other = tmp_path / "other_run"
    make_rollouts(other, range(1, 4))
    with pytest.raises(CleanRefused) as exc:
        clean_after(["rollouts/step_*", "../other_run/rollouts/step_*"], 1, base=out, allowed_roots=[out])
    assert "outside the run's directories" in str(exc.value)
    assert exc.value.deleted == []
    # all or nothing: the allowed glob did not run either
    assert sorted(p.name for p in (out / "rollouts").iterdir()) == ["step_1", "step_2", "step_3"]
    assert sorted(p.name for p in (other / "rollouts").iterdir()) == ["step_1", "step_2", "step_3"]
    # an absolute glob elsewhere is refused the same way, even with no match
    with pytest.raises(CleanRefused):
        clean_after([str(tmp_path / "nowhere" / "step_*")], 1, base=out, allowed_roots=[out])
    # ../ that stays inside an allowed root is fine
    assert clean_after(["rollouts/../rollouts/step_*"], 2, base=out, allowed_roots=[out]) == [
        out / "rollouts" / "step_3"
    ]


def test_clean_refuses_a_directory_symlinked_outside(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    elsewhere = tmp_path / "scratch"
    make_rollouts(elsewhere, range(1, 4))
    (out / "rollouts").symlink_to(elsewhere / "rollouts", target_is_directory=True)
    with pytest.raises(CleanRefused):
        clean_after(["rollouts/step_*"], 1, base=out, allowed_roots=[out])
    assert len(list((elsewhere / "rollouts").iterdir())) == 3
    # allowed once the real place is one of the run's directories
    deleted = clean_after(["rollouts/step_*"], 1, base=out, allowed_roots=[out, elsewhere])
    assert [p.name for p in deleted] == ["step_2", "step_3"]


def test_clean_never_deletes_an_allowed_root(tmp_path: Path) -> None:
    run = tmp_path / "step_99"  # an unlucky name for the run dir
    run.mkdir()
    with pytest.raises(CleanRefused, match="is \\(or contains\\) one of the run's directories"):
        clean_after(["../step_*"], 1, base=run, allowed_roots=[tmp_path, run])
    assert run.is_dir()


def test_clean_bad_pattern(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a valid regex"):
        clean_after(["*"], 1, base=tmp_path, allowed_roots=[tmp_path], step_pattern="(")


# ---------------------------------------------------------------------------------------------
# scan_newest


def test_scan_newest(tmp_path: Path) -> None:
    assert scan_newest(tmp_path / "missing") == (None, None)
    assert scan_newest(tmp_path) == (None, None)
    for n in (3, 12, 7):
        (tmp_path / f"step_{n}").mkdir()
    os.utime(tmp_path / "step_12", (1000.0, 1000.0))
    (tmp_path / ".step_13.tmp-77").mkdir()  # being staged: not a step yet
    (tmp_path / "step_14.partial").write_text("x")
    (tmp_path / "notes").write_text("x")
    assert scan_newest(tmp_path) == (12, 1000.0)
    assert scan_newest(tmp_path, r"step_(\d+)") == (12, 1000.0)
    assert scan_newest(tmp_path, r"^step_(?P<step>[37])$")[0] == 7
