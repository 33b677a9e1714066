"""``rlsup up CONFIG`` with a ``slurm:`` block, on a login node: submit the run's job (its batch step runs the
supervisor), then open the TUI on it (its socket, else ``srun --overlap ... rlsup bridge``), follow it as text
(``--headless``, until the job ends) or say how to reach it (``-d``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import shutil
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from ..client.session import Client, RunOver, unix_connector
from ..records.events import RunEnded, RunStarted, human
from ..rundir.layout import RunPaths, is_locked, read_owner, socket_answers
from ..slurm import jobs
from .common import EXIT_FAILED, EXIT_OK, fail, run_dir_arg, say
from .daemon import journaled_by

POLL_S = 1.0
SCHEDULED_S = 10.0  # how long `up -d` waits for the scheduler's first look at the job (sched_interval)


def slurm_up(args: argparse.Namespace, cfg: Any) -> int:
    run_dir = cfg.run_dir
    try:
        live = jobs.job_of_run(run_dir)
        if live is not None:
            job_id = live["job_id"]
            say(f"rlsup: {cfg.name} already has job {job_id} ({live['state']}); following it")
        else:
            extra = (["--resume"] if args.resume else []) + (["--gpu", args.gpu] if args.gpu else [])
            job_id = jobs.submit(cfg, args.config, extra=extra)
            say(f"rlsup: submitted batch job {job_id} for {cfg.name} (run dir {run_dir})")
    except jobs.SlurmError as e:
        return fail(f"rlsup: {e}")
    if args.detach:
        j = _scheduled(job_id)
        say(f"  state:   {_state_line(j) if j else 'unknown (squeue does not list it)'}")
        if j is not None and j["state"] == "PENDING" and jobs.NEVER_CLEARS.get(j.get("reason", "")):
            _never_starts(job_id, j, run_dir)
            return EXIT_FAILED
        _hints(job_id, run_dir)
        return EXIT_OK
    try:
        j = wait_running(job_id, run_dir)
        if j is not None and j.get("never"):
            return EXIT_FAILED
        if j is None or j["state"] not in jobs.ACTIVE:
            return _ended(job_id, run_dir, j)
        if args.headless:
            return follow_journal(job_id, run_dir)
        from .attach import attach_local

        return attach_local(run_dir, plain=args.plain, job=j)
    except KeyboardInterrupt:
        say("\nrlsup: interrupted; the job goes on.", err=True)
        _hints(job_id, run_dir)
        return 130


def down_pending(run_dir: str | None) -> int | None:
    """`rlsup down` of a run whose Slurm job has no supervisor yet: cancel the job (None: the usual down follows)."""
    if not run_dir or is_locked(RunPaths(Path(run_dir).resolve())):
        return None
    j = run_job(Path(run_dir))
    if j is None or j["state"] not in ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD"):
        return None
    if not jobs.cancel(j["job_id"]):
        return fail(f"rlsup: could not cancel job {j['job_id']} ({_state_line(j)}); try `scancel {j['job_id']}`")
    say(f"rlsup: job {j['job_id']} was {_state_line(j)}, nothing had started: cancelled it")
    return EXIT_OK


def _hints(job_id: str, run_dir: str) -> None:
    say(f"  attach:  rlsup attach{run_dir_arg(run_dir)}")
    say(f"  status:  rlsup status{run_dir_arg(run_dir)}   (or: squeue -j {job_id})")
    say(f"  stop:    rlsup down{run_dir_arg(run_dir)}   (stops the components in order, then the job ends)")


def _job(job_id: str) -> dict[str, Any] | None:
    with contextlib.suppress(jobs.SlurmError):
        return jobs.job(job_id)
    return None


def _state_line(j: dict[str, Any]) -> str:
    reason = j.get("reason")
    where = f" on {j['nodes']}" if j.get("nodes") and j["state"] == "RUNNING" else ""
    return j["state"] + (f" ({reason})" if reason and reason != "None" else "") + where


def requeue_watch(job_id: str, restarts: Any, run_dir: str | os.PathLike[str], settle_s: float = 30.0) -> Any:
    """A session's ``goes_on`` for job ``job_id`` (``restarts``: its restart count when the session began): a
    message where Slurm requeued the job after the run ended (asked for up to ``settle_s``: the batch step ends
    a moment after the run), judged against the restart count of the run the session saw start last; or where
    the journal holds more than the session saw (the job ran again and ended meanwhile); else None."""
    from ..rundir.journal import last_seq

    journal = RunPaths(Path(run_dir)).events

    async def goes_on(seq: int | None) -> str | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settle_s
        before = await loop.run_in_executor(None, _restarts_of_run, journal, seq)
        before = before if isinstance(before, int) else restarts
        while True:
            j = await loop.run_in_executor(None, _job, job_id)
            if j is None or j["state"] not in jobs.ACTIVE:  # completed, failed, cancelled, or gone from squeue
                if await loop.run_in_executor(None, last_seq, journal) > (seq or 0):
                    return f"job {job_id} ran again and has ended since; reading the rest of its run from {run_dir}"
                return None
            if _requeued_since(j, before):
                return f"job {job_id} was requeued: the run goes on when Slurm starts it again"
            if loop.time() > deadline:
                return None
            await asyncio.sleep(1.0)

    return goes_on


def _restarts_of_run(journal: Path, seq: int | None) -> Any:
    """The job restart count of the run the session saw start last (None: unknown)."""
    from ..rundir.journal import read_records

    runs = [r.event for r in read_records(journal, kinds=RunStarted.kind.__eq__)
            if r.seq <= (seq or 0) and isinstance(r.event, RunStarted)]
    return (runs[-1].slurm or {}).get("restart_count") if runs else None


def _requeued_since(j: dict[str, Any], before: Any) -> bool:
    """Whether job ``j`` was requeued since its restart count was ``before``: the count went up, or
    Slurm is requeueing it now."""
    now = j.get("restarts")
    return (isinstance(now, int) and isinstance(before, int) and now > before) or j["state"].startswith("REQUEUE")


class JobLink:
    """How a view reaches the run in ``run_dir`` whose supervisor runs in a Slurm job (``job``, as squeue lists
    it): that job's supervisor, across its requeues (every try while it waits says Slurm's state then: a
    requeued job goes COMPLETING, PENDING, RUNNING); once the job has ended, a later job of the same run dir
    (`rlsup up CONFIG --resume` from another shell submits one), else the run read back from its run dir
    (``rlsup bridge``), so that a session that missed a requeued job's whole run still sees it end.
    ``direct``: the connector to a job's supervisor (default: its socket where this host sees the run dir,
    else ``srun ... rlsup bridge`` on the job's batch host)."""

    def __init__(self, job: dict[str, Any], run_dir: str | os.PathLike[str], name: str = "tui",
                 direct: Callable[[dict[str, Any]], Any] | None = None):
        self.job = job
        self.run_dir = Path(run_dir)
        self.name = name
        self.direct = direct or self._direct
        self._served: tuple[int, int] | None = None  # the journal's size and mtime when last read back

    def _direct(self, j: dict[str, Any]) -> Any:
        if through_srun(self.run_dir):  # (a squeue at each try: the job's state and batch host now)
            return srun_connector(j["job_id"], j.get("batch_host") or "", self.run_dir.resolve(), self.name)
        return unix_connector(RunPaths(self.run_dir).sock, name=self.name)

    async def connect(self) -> Client:
        job_id = self.job["job_id"]
        try:
            return cast(Client, await self.direct(self.job)())
        except asyncio.CancelledError:
            raise
        except Exception as e:
            failed = e
        loop = asyncio.get_running_loop()
        try:
            j = await loop.run_in_executor(None, jobs.job, job_id)
        except jobs.SlurmError:
            raise failed from None  # squeue cannot say whether the job ended: the session retries
        if j is not None and j["state"] in jobs.ACTIVE:
            self.job = j  # where it runs now: a requeue may move its batch host
            if j["state"] != "RUNNING":
                raise ConnectionError(f"job {job_id} is {_state_line(j)}, not running yet") from None
            raise failed
        later = await loop.run_in_executor(None, run_job, self.run_dir)
        if later is not None and later["job_id"] != job_id:
            self.job = later  # the run goes on in a new job: its supervisor from now on
            return await self.connect()
        journal = RunPaths(self.run_dir).events
        if not journal.exists():
            raise failed
        st = journal.stat()
        if (st.st_size, st.st_mtime_ns) == self._served:  # dialled again after the end: nothing new to read back
            raise RunOver(f"job {job_id} has ended; the run has ended", journal) from None
        self._served = (st.st_size, st.st_mtime_ns)
        return cast(Client, await command_connector(bridge_argv(self.run_dir), name=self.name)())

    async def goes_on(self, seq: int | None) -> str | None:
        """The session's ``goes_on`` (:func:`requeue_watch`) for the job the link is on now."""
        return await requeue_watch(self.job["job_id"], self.job.get("restarts"), self.run_dir)(seq)


def run_job(run_dir: Path) -> dict[str, Any] | None:
    """The Slurm job whose run dir is ``run_dir`` (``squeue --json``), or None (no squeue here, none, or
    squeue failed)."""
    if shutil.which("squeue") is None:
        return None
    with contextlib.suppress(jobs.SlurmError):
        return jobs.job_of_run(str(Path(run_dir).resolve()))
    return None


def wait_running(job_id: str, run_dir: str) -> dict[str, Any] | None:
    """Say the job's state while it waits; return it once its supervisor answers on its socket (where this host
    sees the run dir), or the job ended."""
    paths = RunPaths(Path(run_dir))
    shown = ""
    while True:
        j = _job(job_id)
        if j is None or j["state"] not in jobs.ACTIVE:
            return j
        line = _state_line(j)
        if line != shown:
            say(f"rlsup: job {job_id}: {line}")
            shown = line
        if j["state"] == "PENDING" and (why := jobs.NEVER_CLEARS.get(j.get("reason", ""))):
            _never_starts(job_id, j, run_dir)
            return {**j, "never": why}
        if j["state"] == "RUNNING" and (not _sees_run_dir(run_dir) or (is_locked(paths) and paths.sock.exists()
                                                                     and socket_answers(paths.sock))):
            return j
        time.sleep(POLL_S)


def _scheduled(job_id: str, within_s: float = SCHEDULED_S) -> dict[str, Any] | None:
    """The job once Slurm's scheduler has looked at it (it runs, has ended, or pends with a reason), or after
    ``within_s``: `up -d` says whether it can ever start."""
    deadline = time.monotonic() + within_s
    while True:
        j = _job(job_id)
        if j is None or j["state"] != "PENDING" or j.get("reason") not in (None, "", "None") \
                or time.monotonic() > deadline:
            return j
        time.sleep(POLL_S / 4)


def _never_starts(job_id: str, j: dict[str, Any], run_dir: str) -> None:
    reason = j.get("reason", "")
    say(f"rlsup: job {job_id} will never start: {reason} ({jobs.NEVER_CLEARS.get(reason)}). Change the "
        f"`slurm:` block of the config (`rlsup check CONFIG` says what the cluster allows), cancel the job with "
        f"`rlsup down{run_dir_arg(run_dir)}`, then `rlsup up` again", err=True)


def through_srun(run_dir: str | os.PathLike[str]) -> bool:
    """Whether the run's supervisor is reached through srun from here: Slurm's tools are here and its socket is
    another host's (or ``RLSUP_SLURM_BRIDGE=srun``)."""
    return (shutil.which("srun") is not None and shutil.which("squeue") is not None
            and (os.environ.get("RLSUP_SLURM_BRIDGE") == "srun" or not _sees_run_dir(run_dir)))


def _sees_run_dir(run_dir: str | os.PathLike[str]) -> bool:
    """Whether this host reaches the supervisor's socket in the run dir (the lock says this host, or none yet)."""
    return (read_owner(RunPaths(Path(run_dir))) or {}).get("host") in (None, socket.gethostname())


def srun_connector(job_id: str, host: str, run_dir: str | os.PathLike[str], name: str = "tui") -> Any:
    """``rlsup bridge`` as an overlapping step of job ``job_id`` on its batch host at each connect (a requeue may
    move it), ``host`` where squeue cannot say."""
    async def connect() -> Any:
        now = await asyncio.get_running_loop().run_in_executor(None, _job, job_id)
        if now is not None and (now["state"] != "RUNNING" or not now["batch_host"]):
            raise OSError(f"job {job_id} {_state_line(now)}")
        where = now["batch_host"] if now is not None else host
        return await command_connector(
            [jobs.tool("srun"), f"--jobid={job_id}", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={where}",
             "--gres=none", "--quiet", f"--job-name={jobs.BRIDGE_STEP}", *bridge_argv(run_dir)], name=name)()

    return connect


def bridge_argv(run_dir: str | os.PathLike[str]) -> list[str]:
    """``rlsup bridge`` for ``run_dir`` with this Python: its live socket, or the ended run read from disk."""
    return [sys.executable, "-m", "rlsup.supervisor.cli", "bridge", "--run-dir", str(run_dir)]


def command_connector(argv: list[str], name: str = "tui") -> Any:
    """A connection through ``rlsup bridge`` run by ``argv`` (its stdin and stdout are the stream)."""
    async def connect() -> Client:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            limit=1 << 24)
        assert proc.stdin is not None and proc.stdout is not None
        client = Client(proc.stdout, proc.stdin, name=name)
        await client.start()
        return client

    return connect


def remote_bridge(run_dir: Path, name: str, job: dict[str, Any] | None = None) -> Any:
    """A connector through ``srun ... rlsup bridge`` when the run's supervisor runs in a live Slurm job on
    another host; None otherwise. ``job``: the run's job where the caller has looked it up already."""
    if not through_srun(run_dir):
        return None
    j = job if job is not None else run_job(run_dir)
    if j is None or j["state"] != "RUNNING" or not j["batch_host"]:
        return None
    return srun_connector(j["job_id"], j["batch_host"], Path(run_dir).resolve(), name)


def slurm_fleet() -> tuple[list[Any], Any]:
    """`rlsup fleet --slurm`: every rlsup run of this user that squeue knows as fleet pods, each reached through
    its run dir when this host sees it, else through srun."""
    from ..client.fleet import PodSpec

    # One pod per run dir, its newest job: a run continued (`up --resume`) or started anew (`--fresh`)
    # in the same dir is a new job there, and every older one would show the same run dir again (twice
    # the same failure made a fleet flag "on 2/2 pods").
    newest = {j["run_dir"]: j for j in sorted(jobs.runs(), key=lambda j: int(j["job_id"])) if j["run_dir"]}
    specs, how = [], {}
    for j in sorted(newest.values(), key=lambda j: int(j["job_id"])):
        label = f"{j['name'][len(jobs.JOB_PREFIX):]} #{j['job_id']} {j['state'].lower()}"
        specs.append(PodSpec(host=j["batch_host"] or f"job {j['job_id']}", run_dir=j["run_dir"], label=label,
                             no_run=_no_run(j), attach=f"rlsup attach --run-dir {shlex.quote(j['run_dir'])}"))
        how[label] = j

    def connector_for(spec: Any) -> Any:
        j = how[spec.label]
        if spec.no_run or (not Path(j["run_dir"]).is_dir() and j["state"] not in ("RUNNING",)):
            async def pending() -> Any:
                raise OSError(spec.no_run or f"job {j['job_id']} {_state_line(j)}")
            return pending
        if Path(j["run_dir"]).is_dir():  # this host sees the run dir: its socket, or the ended run's journal
            return command_connector(bridge_argv(j["run_dir"]), name="fleet")
        return srun_connector(j["job_id"], j["batch_host"], j["run_dir"], name="fleet")

    return specs, connector_for


def _no_run(j: dict[str, Any]) -> str | None:
    """Why a job of ``rlsup fleet --slurm`` has no run to show (not started yet, or ended before it started)."""
    if j["state"] in ("PENDING", "CONFIGURING"):
        return f"job {j['job_id']} {_state_line(j)}: not started yet"
    if j["state"] != "RUNNING" and not (Path(j["run_dir"]) / "events.jsonl").exists():
        return f"job {j['job_id']} {j['state']} before it started: no run"
    return None


def follow_journal(job_id: str, run_dir: str) -> int:
    """Print the run's events as they are journalled until the job ends (a requeue included: the
    journal goes on); the run's exit code."""
    path = Path(run_dir) / "events.jsonl"
    offset = path.stat().st_size if path.exists() else 0
    buf = b""
    gone_at = None
    last: dict[str, Any] | None = None
    while True:
        data = b""
        with contextlib.suppress(OSError), open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
        offset += len(data)
        buf += data
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            with contextlib.suppress(ValueError):
                e = json.loads(raw)
                if e.get("kind") not in ("gpu", "resources", "progress", "logs"):
                    say(human(e, width=12))
        j = _job(job_id)
        if j is not None and j["state"] in jobs.ACTIVE:
            if last is not None and last["state"] != j["state"]:
                say(f"rlsup: job {job_id}: {_state_line(j)}")
            last, gone_at = j, None
        else:
            gone_at = gone_at or time.monotonic()
            if time.monotonic() - gone_at > 1.0:  # one more read of the journal after the end
                return _ended(job_id, run_dir, j)
        time.sleep(POLL_S / 2)


def _ended(job_id: str, run_dir: str, j: dict[str, Any] | None) -> int:
    """The run's exit code once its job ended: the supervisor's (the batch script's) exit code."""
    code = _exit_code(job_id)
    state = j["state"] if j else "ended"
    say(f"rlsup: job {job_id} {state.lower()}" + (f" (exit code {code})" if code is not None else "")
        + f"; logs and journal in {run_dir}")
    if code:
        for line in why_ended(job_id, run_dir):
            say(line, err=True)
    if code is None:
        return EXIT_FAILED if state in ("FAILED", "NODE_FAIL", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY") else EXIT_OK
    return code


def why_ended(job_id: str, run_dir: str) -> list[str]:
    """Why the job's run failed: its supervisor's ``run_ended``, else the end of the batch step's output (it never
    journalled: a bad config, no Python on the node...); and where to look next."""
    ended = journaled_by(RunPaths(Path(run_dir)), RunEnded.kind,
                         lambda started: str((started.slurm or {}).get("job_id")) == str(job_id))
    reason = ended[-1].get("reason") if ended else None
    out_file = Path(run_dir) / f"slurm-{job_id}.out"
    lines = [f"  why:     {reason}"] if reason else []
    if not reason:
        with contextlib.suppress(OSError):
            tail = [x for x in out_file.read_text(errors="replace").splitlines() if x.strip()][-5:]
            lines += [f"  {out_file.name}: {x}" for x in tail]
    return [*lines, f"  status:  rlsup status{run_dir_arg(run_dir)}", f"  output:  {out_file}"]


def _exit_code(job_id: str) -> int | None:
    """The job's exit code as scontrol says it (``ExitCode=CODE:SIGNAL``: 128+SIGNAL where a signal ended it)."""
    code, _, sig = jobs.show_job(job_id).get("ExitCode", "").partition(":")
    if not (code.isdigit() and sig.isdigit()):
        return None
    return 128 + int(sig) if int(sig) else int(code)
