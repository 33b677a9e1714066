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
    states = [{"job_id": "7", "state": "COMPLETING", "reason": "None"},
              {"job_id": "7", "state": "PENDING", "reason": "BeginTime"},
              {"job_id": "7", "state": "PENDING", "reason": "Resources"}]
    asked: list[str] = []

    def job(job_id: str):
        asked.append(job_id)
        return states[min(len(asked), len(states)) - 1]

    monkeypatch.setattr(jobs, "job", job)

    async def refused():
        raise ConnectionRefusedError("no supervisor listens yet")

    said = Said()

    async def scenario() -> None:
        s = Session(slurm_up.JobLink({"job_id": "7"}, tmp_path, direct=lambda j: refused).connect, said,
                    backoff=(0.01, 0.02))
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
    monkeypatch.setattr(jobs, "job", lambda job_id: {"job_id": job_id, "state": "RUNNING", "reason": "None", "nodes": "rn1"})

    async def refused():
        raise ConnectionRefusedError("no supervisor listens yet")

    async def once() -> str:
        try:
            await slurm_up.JobLink({"job_id": "7"}, tmp_path, direct=lambda j: refused).connect()
        except ConnectionError as e:
            return str(e)
        return "connected"

    assert asyncio.run(once()) == "no supervisor listens yet"


def test_a_view_whose_job_ended_follows_the_run_into_the_job_its_resume_submitted(tmp_path, monkeypatch):
    """`rlsup up CONFIG` (the TUI on job 7), the run ends, then `rlsup up CONFIG --resume` from another shell
    submits job 8: the view looks again after the end and attaches to job 8's supervisor (it stayed on job 7's
    ended run, read back from the run dir, for good). Until then the run read back once, not at every look."""
    (tmp_path / "events.jsonl").write_text('{"seq": 1, "kind": "run_ended"}\n')
    later: list[dict] = []  # squeue's live job of the run dir: none until the resume submits one
    monkeypatch.setattr(jobs, "job", lambda job_id: {"job_id": job_id, "state": "COMPLETED", "reason": "None"}
                        if job_id == "7" else later[-1])
    monkeypatch.setattr(slurm_up, "run_job", lambda run_dir: later[-1] if later else None)
    read_back: list[str] = []
    live: list[str] = []

    class Ended:
        server = {"ended": True}

    def archive(argv, name="tui"):
        async def connect():
            read_back.append(argv[-1])
            return Ended()
        return connect

    monkeypatch.setattr(slurm_up, "command_connector", archive)

    def direct(j):
        async def connect():
            if j["job_id"] == "8" and j["state"] == "RUNNING":
                live.append(j["job_id"])
                return "job 8's supervisor"
            raise ConnectionRefusedError(f"no supervisor of job {j['job_id']} listens")
        return connect

    link = slurm_up.JobLink({"job_id": "7", "state": "RUNNING"}, tmp_path, direct=direct)

    async def dial():
        try:
            return await link.connect()
        except Exception as e:
            return f"{type(e).__name__}: {e}"

    assert isinstance(asyncio.run(dial()), Ended)  # job 7 ended: its run read back from the run dir
    assert asyncio.run(dial()).startswith("RunOver: job 7 has ended")  # looked again: nothing new, nothing read
    assert read_back == [str(tmp_path)]
    later.append({"job_id": "8", "state": "PENDING", "reason": "Priority", "restarts": 0})
    assert asyncio.run(dial()) == "ConnectionError: job 8 is PENDING (Priority), not running yet"
    later.append({"job_id": "8", "state": "RUNNING", "reason": "None", "restarts": 0, "nodes": "n1"})
    assert asyncio.run(dial()).startswith("ConnectionRefusedError")  # its supervisor not up yet: tried again
    assert asyncio.run(dial()) == "job 8's supervisor" and live == ["8"]
    assert link.job["job_id"] == "8"
