"""Watching directories for their newest step on an asyncio loop: real directories, real inotify."""

from __future__ import annotations

import asyncio
import resource
import shutil
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from rlsup.supervisor.rundir import dirwatch
from rlsup.supervisor.rundir.dirwatch import DirWatch, DirWatches


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[int | None, float | None]] = []

    def __call__(self, step: int | None, mtime: float | None) -> None:
        self.calls.append((step, mtime))

    async def wait_for(self, pred: Callable[[tuple[int | None, float | None]], bool], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not (self.calls and pred(self.calls[-1])):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; calls so far: {self.calls}")
            await asyncio.sleep(0.01)


def on_loop(scenario: Callable[[DirWatches], Awaitable[None]]) -> None:
    async def main() -> None:
        watcher = DirWatches(asyncio.get_running_loop())
        try:
            await scenario(watcher)
        finally:
            watcher.close()

    asyncio.run(main())


def test_reports_a_new_step_its_removal_and_the_directory_going_and_coming_back(tmp_path: Path) -> None:
    d = tmp_path / "rollouts"
    (d / "step_12").mkdir(parents=True)
    rec = Recorder()

    async def scenario(watcher: DirWatches) -> None:
        w = watcher.add(DirWatch(d, r"step_(?P<step>\d+)", rec))
        await rec.wait_for(lambda c: c[0] == 12)
        (d / ".step_13.tmp-1").mkdir()
        (d / ".step_13.tmp-1").rename(d / "step_13")  # the reference stack's publish
        await rec.wait_for(lambda c: c[0] == 13)
        assert rec.calls[-1][1] == pytest.approx((d / "step_13").lstat().st_mtime)
        assert w.newest[0] == 13
        assert all(c[0] != 13 for c in rec.calls[:-1])  # the hidden staging name never counted
        shutil.rmtree(d / "step_13")
        await rec.wait_for(lambda c: c[0] == 12)
        shutil.rmtree(d)  # the directory itself goes away
        await rec.wait_for(lambda c: c == (None, None))
        d.mkdir()  # and comes back (a new inode: watched anew)
        (d / "step_2").mkdir()
        await rec.wait_for(lambda c: c[0] == 2)
        (d / "step_3").mkdir()
        await rec.wait_for(lambda c: c[0] == 3)
        assert w.error is None

    on_loop(scenario)


def test_a_directory_that_does_not_exist_yet_is_found_when_it_appears(tmp_path: Path) -> None:
    d = tmp_path / "outputs" / "run1" / "rollouts"
    rec = Recorder()

    async def scenario(watcher: DirWatches) -> None:
        w = watcher.add(DirWatch(d, on_change=rec))
        await rec.wait_for(lambda c: c == (None, None))
        (tmp_path / "outputs").mkdir()
        (tmp_path / "outputs" / "unrelated").mkdir()
        (tmp_path / "outputs" / "run1").mkdir()
        d.mkdir()
        (d / "step_5").mkdir()  # right after: the watch is set up anew, then scans again
        await rec.wait_for(lambda c: c[0] == 5)
        (d / "step_6").mkdir()
        await rec.wait_for(lambda c: c[0] == 6)
        assert w.error is None

    on_loop(scenario)


def test_watches_sharing_a_parent_each_see_their_own_directory(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "rollouts").mkdir(parents=True)
    (work / "checkpoints").mkdir()
    rollouts, ckpts = Recorder(), Recorder()

    async def scenario(watcher: DirWatches) -> None:
        watcher.add(DirWatch(work / "rollouts", r"step_(\d+)", rollouts))
        watcher.add(DirWatch(work / "checkpoints", r"global_step_(\d+)", ckpts))
        await rollouts.wait_for(lambda c: c == (None, None))
        await ckpts.wait_for(lambda c: c == (None, None))
        (work / "rollouts" / "step_1").mkdir()
        await rollouts.wait_for(lambda c: c[0] == 1)
        shutil.rmtree(work / "checkpoints")  # one replaced: the other keeps its watch
        (work / "checkpoints").mkdir()
        (work / "checkpoints" / "global_step_4").mkdir()
        await ckpts.wait_for(lambda c: c[0] == 4)
        (work / "rollouts" / "step_2").mkdir()
        await rollouts.wait_for(lambda c: c[0] == 2)
        assert all(c[0] in (None, 4) for c in ckpts.calls)

    on_loop(scenario)


def test_idle_watches_add_no_thread_per_directory_and_never_wake(tmp_path: Path) -> None:
    """Twenty watched directories: one scanning thread in all, and nothing runs while nothing changes
    (the process's voluntary context switches, counted over a second, stay near zero; a watcher that
    polled or checked a stop flag every 100 ms would make 200)."""
    recs = [Recorder() for _ in range(20)]
    out: dict[str, int] = {}

    async def scenario(watcher: DirWatches) -> None:
        before = threading.active_count()
        for i, r in enumerate(recs):
            (tmp_path / f"d{i}").mkdir()
            watcher.add(DirWatch(tmp_path / f"d{i}", on_change=r))
        for r in recs:
            await r.wait_for(lambda c: c == (None, None))
        await asyncio.sleep(0.5)  # the second scans after arming
        out["threads"] = threading.active_count() - before
        r0 = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
        await asyncio.sleep(1.0)
        out["switches"] = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - r0
        (tmp_path / "d7" / "step_9").mkdir()
        await recs[7].wait_for(lambda c: c[0] == 9)

    on_loop(scenario)
    assert out["threads"] <= 1, out
    assert out["switches"] < 20, out
    assert [len(r.calls) for i, r in enumerate(recs) if i != 7] == [1] * 19  # no spurious reports


def test_a_failing_consumer_does_not_end_the_watch(tmp_path: Path) -> None:
    seen: list[int | None] = []

    def flaky(step: int | None, mtime: float | None) -> None:
        seen.append(step)
        raise RuntimeError("consumer bug")

    async def scenario(watcher: DirWatches) -> None:
        watcher.add(DirWatch(tmp_path, on_change=flaky))
        (tmp_path / "step_1").mkdir()
        deadline = time.monotonic() + 5
        while 1 not in seen and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        (tmp_path / "step_2").mkdir()
        while 2 not in seen and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert 2 in seen, seen

    on_loop(scenario)


def test_without_inotify_each_directory_is_scanned_every_few_seconds(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RLSUP_INOTIFY", "off")
    monkeypatch.setattr(dirwatch, "POLL_S", 0.2)
    rec = Recorder()

    async def scenario(watcher: DirWatches) -> None:
        w = watcher.add(DirWatch(tmp_path, on_change=rec))
        await rec.wait_for(lambda c: c == (None, None))
        (tmp_path / "step_3").mkdir()
        await rec.wait_for(lambda c: c[0] == 3)
        assert w.error and "RLSUP_INOTIFY=off" in w.error

    on_loop(scenario)


def test_closing_stops_reports(tmp_path: Path) -> None:
    rec = Recorder()

    async def scenario(watcher: DirWatches) -> None:
        watcher.add(DirWatch(tmp_path, on_change=rec))
        await rec.wait_for(lambda c: c == (None, None))
        watcher.close()
        n = len(rec.calls)
        (tmp_path / "step_1").mkdir()
        await asyncio.sleep(dirwatch.DEBOUNCE_S + 0.3)
        assert len(rec.calls) == n

    on_loop(scenario)
