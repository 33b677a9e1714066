"""The zygote's spare monitor: forked ahead of need once the zygote is idle, handed the next start request,
and replaced by the two forks of old where it cannot take one (it died)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid

import psutil

from rlsup.supervisor.monitor import shim
from rlsup.supervisor.monitor.process import Monitors
from tests.conftest import PATIENCE, async_wait_for

TOKEN_VAR = "RLSUP_TEST_SPARE_TOKEN"


def _spec(tmp_path, attempt: int) -> dict:
    return {"protocol": 1, "component": "c", "attempt": attempt, "run_dir": str(tmp_path),
            "argv": ["/bin/echo", f"attempt {attempt}"], "env": dict(os.environ), "cwd": str(tmp_path),
            "log": {"path": str(tmp_path / "logs" / "c.log"), "max_bytes": 1 << 20, "backups": 2},
            "record": str(tmp_path / "monitors" / f"c.{attempt}.json"), "cgroup": None}


def _spares(token: str, known: set[int]) -> list[int]:
    """Processes forked from this test's zygote that are neither the zygote nor a monitor we started."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if "--zygote" not in (p.info["cmdline"] or []) or p.pid in known:
                continue
            if p.environ().get(TOKEN_VAR) == token and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


@contextlib.asynccontextmanager
async def _zygote_with_spare(tmp_path, monkeypatch):
    """A zygote that started attempt 1 and has forked its spare: (monitors, the pids of ours started so far,
    the spare's pid, attempt 1's reply). Afterwards every monitor told to finish, the zygote closed, the spare
    seen gone."""
    token = uuid.uuid4().hex
    monkeypatch.setenv(TOKEN_VAR, token)  # the zygote, its spare and its monitors inherit it
    (tmp_path / "logs").mkdir()
    (tmp_path / "monitors").mkdir()
    m = Monitors(tmp_path)
    shims: set[int] = set()
    try:
        r1 = await m.start(_spec(tmp_path, 1))
        assert m.zygote_pid is not None
        shims |= {m.zygote_pid, r1["shim_pid"]}
        spare = await async_wait_for(lambda: _spares(token, shims), PATIENCE, what="a spare")
        assert len(spare) == 1, spare
        yield m, shims, spare[0], r1, token
    finally:
        for pid in shims - {m.zygote_pid}:
            os.kill(pid, signal.SIGUSR1)
        m.close()
    # the zygote exits when its socket closes, and its spare when the zygote is gone
    await async_wait_for(lambda: not _spares(token, set()), PATIENCE, what="every monitor and the last spare gone")


def test_a_start_is_handed_to_the_spare_and_a_dead_spare_is_replaced(tmp_path, monkeypatch):
    async def scenario() -> None:
        async with _zygote_with_spare(tmp_path, monkeypatch) as (m, shims, spare, r1, token):
            r2 = await m.start(_spec(tmp_path, 2))
            assert r2["ok"] and r2["shim_pid"] == spare, "the request went to the spare"
            shims.add(r2["shim_pid"])
            (spare,) = await async_wait_for(lambda: _spares(token, shims), PATIENCE, what="the next spare")

            os.kill(spare, signal.SIGKILL)
            await async_wait_for(lambda: not _spares(token, shims), PATIENCE, what="the spare gone")
            r3 = await m.start(_spec(tmp_path, 3))
            assert r3["ok"] and r3["shim_pid"] != spare
            shims.add(r3["shim_pid"])
            for n, r in ((1, r1), (2, r2), (3, r3)):
                rec = await async_wait_for(
                    lambda n=n: (x := shim.read_record(str(tmp_path / "monitors" / f"c.{n}.json")))
                    and x["status"] == "exited" and x, PATIENCE)
                assert rec["exit_code"] == 0 and rec["shim_pid"] == r["shim_pid"]
            assert sorted((tmp_path / "logs" / "c.log").read_text().split()) == sorted(
                ["attempt"] * 3 + ["1", "2", "3"])  # each attempt's command ran

    asyncio.run(scenario())


def _signal_masks(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/status") as f:
        return {k: int(v, 16) for k, _, v in (ln.partition(":\t") for ln in f) if k in ("SigIgn", "SigCgt")}


def test_a_spare_sets_up_what_does_not_depend_on_its_request_while_it_waits(tmp_path, monkeypatch):
    """A spare monitor takes its signals (the stray ones ignored, SIGCHLD and SIGUSR1 caught) and makes its pipes
    before any request: a restart's start does not wait for that."""
    async def scenario() -> None:
        async with _zygote_with_spare(tmp_path, monkeypatch) as (m, shims, spare, _, _token):
            def ready() -> dict[str, int] | None:
                masks = _signal_masks(spare)  # set in the spare's first moments: looked at until they are
                return masks if masks["SigCgt"] & (1 << (signal.SIGUSR1 - 1)) else None

            masks = await async_wait_for(ready, PATIENCE, what="the spare's signals")
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                assert masks["SigIgn"] & (1 << (sig - 1)), sig
            assert masks["SigCgt"] & (1 << (signal.SIGCHLD - 1))
            assert m.zygote_pid is not None
            zygote = _signal_masks(m.zygote_pid)
            assert not zygote["SigCgt"] & (1 << (signal.SIGUSR1 - 1)), "the zygote's own are not the spare's"
            pipes = [fd for fd in os.listdir(f"/proc/{spare}/fd")
                     if os.readlink(f"/proc/{spare}/fd/{fd}").startswith("pipe:")]
            assert len(pipes) >= 5, pipes  # the wakeup pipe's two ends, the output's two, the start errors' two
            r2 = await m.start(_spec(tmp_path, 2))
            assert r2["ok"] and r2["shim_pid"] == spare
            shims.add(spare)
            rec = await async_wait_for(
                lambda: (x := shim.read_record(str(tmp_path / "monitors" / "c.2.json"))) and x["status"] == "exited"
                and x, PATIENCE)
            assert rec["exit_code"] == 0
            assert "attempt 2" in (tmp_path / "logs" / "c.log").read_text()

    asyncio.run(scenario())
