"""resume.clean (deleting future artefacts safely) and the artefact watch, on real files and inotify."""

from __future__ import annotations

import os
import resource
import shutil
import threading
import time
from pathlib import Path

import pytest

from rlsup.supervisor.artifacts import ArtifactWatch, CleanRefused, clean_after, scan_newest

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
# scan_newest / ArtifactWatch


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


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[int | None, float | None]] = []
        self.cond = threading.Condition()

    def __call__(self, step: int | None, mtime: float | None) -> None:
        with self.cond:
            self.calls.append((step, mtime))
            self.cond.notify_all()

    def wait_for(self, pred, timeout: float = 5.0) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: bool(self.calls) and pred(self.calls[-1]), timeout)


def test_watch_reports_new_step_then_removal(tmp_path: Path) -> None:
    d = tmp_path / "rollouts"
    (d / "step_12").mkdir(parents=True)
    rec = Recorder()
    w = ArtifactWatch(d, r"step_(?P<step>\d+)", rec).start()
    try:
        assert rec.calls[0][0] == 12  # initial scan, synchronous in start()
        t0 = time.monotonic()
        (d / ".step_13.tmp-1").mkdir()
        (d / ".step_13.tmp-1").rename(d / "step_13")  # the reference stack's publish
        assert rec.wait_for(lambda c: c[0] == 13), rec.calls
        latency = time.monotonic() - t0
        assert rec.calls[-1][1] == pytest.approx((d / "step_13").lstat().st_mtime)
        assert w.newest[0] == 13
        assert all(c[0] != 13 for c in rec.calls[:-1])  # the hidden staging name never counted
        shutil.rmtree(d / "step_13")
        assert rec.wait_for(lambda c: c[0] == 12), rec.calls
        shutil.rmtree(d)  # the directory itself goes away
        assert rec.wait_for(lambda c: c == (None, None)), rec.calls
        d.mkdir()  # and comes back (a new inode: watched anew)
        (d / "step_2").mkdir()
        assert rec.wait_for(lambda c: c[0] == 2), rec.calls
    finally:
        t1 = time.monotonic()
        w.stop()
        stop_s = time.monotonic() - t1
    assert w._thread is not None and not w._thread.is_alive()
    assert stop_s < 1.0
    print(f"new step reported after {latency * 1000:.0f} ms; stop took {stop_s * 1000:.0f} ms")


def test_watch_missing_directory_appearing_later(tmp_path: Path) -> None:
    d = tmp_path / "outputs" / "run1" / "rollouts"
    rec = Recorder()
    with ArtifactWatch(d, on_change=rec) as w:
        assert rec.calls == [(None, None)]
        (tmp_path / "outputs").mkdir()
        (tmp_path / "outputs" / "unrelated").mkdir()
        (tmp_path / "outputs" / "run1").mkdir()
        d.mkdir()
        (d / "step_5").mkdir()  # right after: the watch is set up anew, then scans
        assert rec.wait_for(lambda c: c[0] == 5), rec.calls
        (d / "step_6").mkdir()
        assert rec.wait_for(lambda c: c[0] == 6), rec.calls
        assert w.error is None


def test_watch_costs_no_cpu_when_idle(tmp_path: Path) -> None:
    (tmp_path / "step_1").mkdir()
    w = ArtifactWatch(tmp_path).start()
    try:
        time.sleep(0.2)  # let it settle into its wait
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        time.sleep(1.0)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        w.stop()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    assert cpu < 0.05, f"idle watch used {cpu:.3f} s CPU in 1 s"


def test_watch_callback_errors_do_not_end_it(tmp_path: Path) -> None:
    seen: list[int | None] = []
    done = threading.Event()

    def flaky(step: int | None, mtime: float | None) -> None:
        seen.append(step)
        if step == 2:
            done.set()
        raise RuntimeError("consumer bug")

    with ArtifactWatch(tmp_path, on_change=flaky):
        (tmp_path / "step_1").mkdir()
        time.sleep(0.05)
        (tmp_path / "step_2").mkdir()
        assert done.wait(5.0), seen
