"""The journal's fsync runs in the pool, once per turn of the loop (issue 44 item 3): events are written at once
(a kill -9 of the supervisor loses none), and the loop does not wait for the disk to carry on with a restart."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from rlsup.supervisor.config.loader import load_config
from rlsup.supervisor.run.run import Run
from rlsup.supervisor.rundir import journal as journal_mod
from tests.conftest import write_config


def test_the_journal_is_synced_off_the_loop_and_to_the_end(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = write_config(tmp_path, """
        components:
          a:
            command: ["/bin/sh", "-c", "exit 1"]
            restart: {policy: always, backoff: {initial: 0.01, factor: 1, max: 0.01, jitter: 0},
                      max_restarts: 3, window: 3600}
    """)
    run = Run(load_config(str(cfg), run_dir=str(tmp_path / "run")), serve=False)
    run.prepare()
    loop_thread = threading.get_ident()
    closing = threading.Event()
    syncs: list[tuple[bool, bool, int]] = []  # (on the loop's thread, in close(), size of the journal then)
    real_fsync, real_close = os.fsync, journal_mod.Journal.close

    def fsync(fd: int) -> None:
        if run.journal is not None and fd == run.journal._fd:
            syncs.append((threading.get_ident() == loop_thread, closing.is_set(), os.fstat(fd).st_size))
        real_fsync(fd)

    def close(self: journal_mod.Journal) -> int:
        closing.set()
        return real_close(self)

    monkeypatch.setattr(journal_mod.os, "fsync", fsync)
    monkeypatch.setattr(journal_mod.Journal, "close", close)

    async def main() -> int:
        asyncio.get_running_loop().call_later(30, run.request_shutdown, "test timeout")
        return await run.run()

    asyncio.run(main())
    size = (tmp_path / "run" / "events.jsonl").stat().st_size
    running = [s for s in syncs if not s[1]]
    assert running, "no fsync of the journal while the run ran"
    assert not [s for s in running if s[0]], "the loop waited for an fsync of the journal"
    assert any(s[1] and s[2] == size for s in syncs), "the journal's end was not synced when it closed"


def test_a_sync_after_close_does_nothing(tmp_path) -> None:
    j = journal_mod.Journal(tmp_path / "events.jsonl")
    j.append({"seq": 1, "kind": "x"}, sync=False)
    j.sync()
    assert j.close() == 0
    j.sync()  # a sync that was queued in the pool before the close: no fsync of a closed (or reused) fd
    assert j.error is None
