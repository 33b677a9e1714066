"""A component whose backoff is over is judged at once against its dependencies (issue 44 item 3): its restart
does not wait for the run's next evaluation of every component, which is batched for bursts of first starts."""

from __future__ import annotations

import asyncio

import pytest

from rlsup.supervisor.config.loader import load_config
from rlsup.supervisor.run import ticker
from rlsup.supervisor.run.run import Run
from tests.conftest import write_config


def test_a_restart_does_not_wait_for_the_evaluation_of_the_run(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = write_config(tmp_path, """
        components:
          base:
            command: ["{py}", "-c", "import time; time.sleep(60)"]
          a:
            command: ["/bin/sh", "-c", "exit 1"]
            depends_on: [base]
            restart: {policy: always, backoff: {initial: 0.01, factor: 1, max: 0.01, jitter: 0},
                      max_restarts: 1000, window: 3600}
    """)
    run = Run(load_config(str(cfg), run_dir=str(tmp_path / "run")), serve=False)
    run.prepare()
    started: list[dict] = []

    def seen(e: dict) -> None:
        if e["kind"] == "started" and e["component"] == "a":
            started.append(e)
            # From a's first start on, the run's batched evaluation would come only an hour later.
            monkeypatch.setattr(ticker, "EVALUATE_EVERY_S", 3600.0)
            if len(started) == 3:
                run.request_shutdown("test done")

    run.subscribers.append(seen)

    async def main() -> int:
        asyncio.get_running_loop().call_later(30, run.request_shutdown, "test timeout")
        return await run.run()

    asyncio.run(main())
    assert len(started) >= 3, f"a's restarts waited for the run's evaluation: {len(started)} start(s)"
    assert [e["attempt"] for e in started[:3]] == [1, 2, 3]
