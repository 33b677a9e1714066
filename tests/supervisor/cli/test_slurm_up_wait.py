"""A session waiting through a requeue (issue 40, item 5): what it says at every try is Slurm's state of the job
then (COMPLETING, then PENDING with its reason), not the state seen when the requeue was first noticed."""

from __future__ import annotations

import asyncio

from rlsup.supervisor.cli import slurm_up
from rlsup.supervisor.client.session import Session
from rlsup.supervisor.slurm import jobs


class Said:
    def __init__(self) -> None:
        self.details: list[str] = []

    def on_connection(self, status: str, detail: str) -> None:
        self.details.append(f"{status}: {detail}")

    def __getattr__(self, name: str):  # on_event, on_snapshot, ...: nothing happens in this test
        return lambda *a, **k: None


def test_each_retry_says_the_requeued_jobs_state_now(tmp_path, monkeypatch):
    states = [{"state": "COMPLETING", "reason": "None"}, {"state": "PENDING", "reason": "BeginTime"},
              {"state": "PENDING", "reason": "Resources"}]
    asked: list[str] = []

    def job(job_id: str):
        asked.append(job_id)
        return states[min(len(asked), len(states)) - 1]

    monkeypatch.setattr(jobs, "job", job)

    async def refused():
        raise ConnectionRefusedError("no supervisor listens yet")

    said = Said()

    async def scenario() -> None:
        s = Session(slurm_up.across_requeues(refused, "7", tmp_path), said, backoff=(0.01, 0.02))
        task = asyncio.ensure_future(s.run())
        while len(asked) < 3:
            await asyncio.sleep(0.01)
        s.close()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    text = "\n".join(said.details)
    assert "job 7 is COMPLETING, not running yet" in text, text
    assert "job 7 is PENDING (BeginTime), not running yet" in text, text
    assert "job 7 is PENDING (Resources), not running yet" in text, text


def test_a_running_job_whose_supervisor_is_not_up_yet_is_the_connection_error_itself(tmp_path, monkeypatch):
    monkeypatch.setattr(jobs, "job", lambda job_id: {"state": "RUNNING", "reason": "None", "nodes": "rn1"})

    async def refused():
        raise ConnectionRefusedError("no supervisor listens yet")

    async def once() -> str:
        try:
            await slurm_up.across_requeues(refused, "7", tmp_path)()
        except ConnectionError as e:
            return str(e)
        return "connected"

    assert asyncio.run(once()) == "no supervisor listens yet"
