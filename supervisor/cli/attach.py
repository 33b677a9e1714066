"""``rlsup attach`` and ``rlsup bridge``: a view of a run, live or ended (served read-only from its run dir by
an in-process control server over an ``Archive``, so every view shows it as a live run), local or over SSH."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal as signal_mod
import sys
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..client.session import NotRunning, Session, local_connector, unix_connector
from ..rundir.layout import RunPaths, is_locked, read_owner, socket_answers
from .common import (
    EXIT_OK,
    RUN_DIR_HELP,
    client_parser,
    fail,
    formatter,
    live_or_handed_over,
    on_run,
    resolve,
    run_dir_arg,
    say,
)

# After the run ended, how often a TUI looks for a supervisor that resumed it (`rlsup up CONFIG --resume` from
# another shell): here a failed dial of a socket and a stat of the journal; over SSH a connection and a Python start.
REOPEN_LOCAL_S = 2.0
REOPEN_SSH_S = 30.0
REOPEN_SLURM_S = 5.0  # a squeue each time (`rlsup up CONFIG --resume` submits a new job)


def add_parsers(sub: Any) -> None:
    att = sub.add_parser(
        "attach", help="open the TUI on a run (local or over SSH; live or ended)", formatter_class=formatter,
        description=textwrap.dedent("""\
            Open the TUI on a run. Without TARGET: the local run (see --run-dir). With
            [user@]host[:port]: connect over SSH (paramiko; ~/.ssh/config, keys and the SSH agent are
            used), run `rlsup bridge` there and render the TUI here: only events cross the network.
            The link is re-established with backoff if it drops, without losing lifecycle events.
            A run that has ended is shown read-only from its journal, state and logs, until
            it is resumed (`rlsup up CONFIG --resume` from another shell): the TUI then attaches
            to the new supervisor by itself.

            Host keys are checked against ~/.ssh/known_hosts; an unknown host is refused with its
            fingerprint (--accept-new-host-key to trust it and record it)."""),
        epilog="exit codes: 0 detached (training continues), 1 no run there or the connection failed, 2 usage.")
    att.add_argument("target", nargs="?", metavar="[USER@]HOST[:PORT]", help="remote host (default: this machine)")
    att.add_argument("--run-dir", metavar="DIR", help=RUN_DIR_HELP + " (on the remote host for SSH)")
    att.add_argument("--accept-new-host-key", action="store_true", help="trust and record an unknown host key")
    att.add_argument("--remote-cmd", metavar="CMD", default=None,
                     help="how to run rlsup on the remote host (default: $RLSUP_REMOTE_CMD or `rlsup`), "
                          "e.g. /workspace/.venv/bin/rlsup")
    att.add_argument("-i", "--identity", metavar="FILE", help="private key file (in addition to the agent and config)")
    att.add_argument("--plain", action="store_true", help="follow the event stream as text instead of the TUI")
    att.set_defaults(func=cmd_attach)
    client_parser(sub, "bridge", "relay stdin/stdout to a run's control socket (what SSH attach runs)",
                  "Relay stdin/stdout to <run_dir>/rlsup.sock byte for byte; for a run that has ended, serve it "
                  "read-only from its run dir. `rlsup attach HOST` runs this on the remote host; you rarely run "
                  "it by hand.", cmd_bridge)


def cmd_attach(args: argparse.Namespace) -> int:
    if not args.target:
        paths = resolve(args, live=False)
        if isinstance(paths, int):
            return paths
        if live_or_handed_over(paths):
            return attach_local(paths.root, plain=args.plain)
        if not paths.events.exists():
            return _not_a_run(paths)
        if args.plain or not (sys.stdout.isatty() and sys.stdin.isatty()):
            return _print_ended(paths)
        with serve_archive(paths.root) as sock:
            return view(_live_or(paths, unix_connector(sock, name="tui")), target=f"ended run {paths.root}",
                        hint=f"rlsup attach --run-dir {paths.root}", plain=False,
                        reopen_s=REOPEN_SLURM_S if shutil.which("squeue") else REOPEN_LOCAL_S)
    from ..client.ssh import SshError, SshTarget, attach_command, ssh_connector

    try:
        target = SshTarget.parse(args.target, identity=args.identity)
        connect = ssh_connector(target, run_dir=args.run_dir, remote_cmd=args.remote_cmd,
                                accept_new_host_key=args.accept_new_host_key)
        asyncio.run(_probe(connect))
    except SshError as e:
        return fail(f"rlsup: {e}")
    hint = attach_command(args.target, run_dir=args.run_dir, identity=args.identity, remote_cmd=args.remote_cmd)
    return view(connect, target=args.target, hint=hint, plain=args.plain, reopen_s=REOPEN_SSH_S)


def _live_or(paths: RunPaths, archive: Any) -> Any:
    """Connect to the run's supervisor, where one answers (the run was resumed: on this host, or in a Slurm job
    on another, through srun), else to ``archive``."""
    from .slurm_up import remote_bridge

    live = unix_connector(paths.sock, name="tui")

    async def connect() -> Any:
        bridge = await asyncio.get_running_loop().run_in_executor(None, remote_bridge, paths.root, "tui")
        if bridge is not None:
            return await bridge()
        try:
            return await live()
        except NotRunning:
            return await archive()

    return connect


def _not_a_run(paths: Any) -> int:
    return fail(f"rlsup: no supervisor is running for {paths.root} (not a run directory: no events.jsonl); "
                "start one with `rlsup up CONFIG`")


def _print_ended(paths: Any) -> int:
    """`attach --plain` on an ended run: its journal as text, then how it ended (nothing more comes)."""
    from ..records.events import human, is_lifecycle
    from ..rundir.archive import Archive
    from ..rundir.journal import read_records

    records = [r for r in read_records(paths.events) if is_lifecycle(r.kind)]
    width = max([12, *(len(r.component or "") for r in records)])
    if not say("".join(human(r, width=width) + "\n" for r in records), end=""):
        return EXIT_OK
    return fail(f"rlsup: this run has {Archive(paths.root).describe()}", EXIT_OK)


async def _probe(connect: Any) -> None:
    """Connect once before opening a view, so a refused host key or a missing run is a clear error."""
    client = await connect()
    await client.close()


def attach_local(run_dir: Any, *, plain: bool = False, forward_term: bool = False,
                 job: dict[str, Any] | None = None) -> int:
    """The view of the run in ``run_dir`` on this machine. ``forward_term``: a SIGTERM here is passed on to the
    supervisor (`rlsup up` as a container's command: the platform's preemption must reach the run); ``job``: the
    run's Slurm job where the caller has looked it up already."""
    from ..slurm.jobs import ACTIVE
    from .slurm_up import JobLink, run_job, through_srun

    name = "tui" if not plain else "follow"
    target, hint = f"local {run_dir}", f"rlsup attach{run_dir_arg(run_dir)}"
    on_term = _forward_term(Path(run_dir)) if forward_term else None
    job = job or run_job(Path(run_dir))  # one squeue for both: the job's run goes on after a requeue, wait for it
    if not job or job["state"] not in ACTIVE:
        return view(local_connector(run_dir, name), target=target, hint=hint, plain=plain, on_term=on_term,
                    reopen_s=REOPEN_LOCAL_S)
    link = JobLink(job, run_dir, name)  # its supervisor in a Slurm job, on another host through srun
    on = job["state"] == "RUNNING" and job["batch_host"] and through_srun(run_dir)
    target = f"job {job['job_id']} {run_dir}" + (f" on {job['batch_host']}" if on else "")
    return view(link.connect, target=target, hint=hint, plain=plain, goes_on=link.goes_on, reopen_s=REOPEN_SLURM_S)


def _forward_term(run_dir: Path) -> Any:
    """Pass a SIGTERM on to the run's supervisor (its pid from the run dir's lock when the signal comes: the view
    outlives a supervisor taken over, or ended and resumed)."""

    def forward() -> None:
        pid = int((read_owner(RunPaths(run_dir)) or {}).get("pid") or 0) if is_locked(RunPaths(run_dir)) else 0
        if pid > 0:
            with contextlib.suppress(OSError):
                os.kill(pid, signal_mod.SIGTERM)
            say(f"rlsup: SIGTERM passed on to the supervisor (pid {pid}): checkpointing and stopping the run",
                err=True)
        else:
            say("rlsup: SIGTERM: no supervisor holds the run to pass it on to", err=True)

    return forward


def view(connect: Any, *, target: str, hint: str, plain: bool, goes_on: Any = None, on_term: Any = None,
         reopen_s: float | None = None) -> int:
    """The TUI on a connection, or a text follower (``--plain``, or stdout is not a terminal).
    ``goes_on``: see :class:`~rlsup.supervisor.client.session.Session` (a requeued Slurm job's run goes on);
    ``reopen_s``: how often the TUI looks for a new supervisor after the run ended (a follower ends with it);
    ``on_term``: what a SIGTERM does instead of closing the view (:func:`attach_local`)."""
    if not plain and sys.stdout.isatty() and sys.stdin.isatty():
        try:
            from rlsup.tui.app import run_tui
        except ImportError as e:  # the TUI's dependencies missing: say so, follow as text
            say(f"rlsup: the TUI is not available ({e}); following as text", err=True)
        else:
            if on_term is not None:
                signal_mod.signal(signal_mod.SIGTERM, lambda _s, _f: on_term())
            return int(run_tui(connect, target=target, attach_hint=hint, goes_on=goes_on, reopen_s=reopen_s))
    return asyncio.run(_follow_plain(connect, hint, goes_on, on_term))


async def _follow_plain(connect: Any, hint: str, goes_on: Any = None, on_term: Any = None) -> int:
    from .follow import Printer

    loop = asyncio.get_running_loop()

    class Follower(Printer):
        def on_snapshot(self, snapshot: dict[str, Any], resumed: bool) -> None:
            super().on_snapshot(snapshot, resumed)
            server = session.server or {}
            if server.get("ended"):  # a run read back from disk: nothing more will come
                say(f"rlsup: this run has {server.get('ended_note') or 'ended'}", err=True)
                loop.call_soon(session.close)

        def on_connection(self, status: str, detail: str) -> None:
            if status == "attached" and (session.server or {}).get("ended"):
                self.status = status  # the run read back from disk (a requeued job's rest): its end said above
                return
            super().on_connection(status, detail)

    printer = Follower()  # the session hands the snapshot's events to on_event: printing them again doubled them
    session = Session(connect, printer, lines=0, goes_on=goes_on)
    task = asyncio.ensure_future(session.run())
    loop.add_signal_handler(signal_mod.SIGINT, session.close)
    loop.add_signal_handler(signal_mod.SIGTERM, on_term or session.close)
    await task
    if printer.ended is None and not (session.server or {}).get("ended"):
        say(f"rlsup: detached; training continues. Re-attach with: {hint}", err=True)
    return EXIT_OK


@contextlib.contextmanager
def serve_archive(run_dir: Path) -> Iterator[Path]:
    """A read-only control server for an ended run, on a private socket, for as long as the block runs, or
    until the run is resumed (a supervisor answers on the run dir's socket): then every connection ends,
    and a view that looks again (:data:`REOPEN_LOCAL_S`) goes over to the live run."""
    from ..run.server import ControlServer
    from ..rundir.archive import Archive

    async def close_on_resume() -> None:
        while not socket_answers(RunPaths(run_dir).sock):
            await asyncio.sleep(REOPEN_LOCAL_S)
        await server.close()

    archive = Archive(run_dir)
    with tempfile.TemporaryDirectory(prefix="rlsup-archive-") as tmp:
        sock = Path(tmp) / "rlsup.sock"
        loop = asyncio.new_event_loop()
        server = ControlServer(archive, sock)
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(server.start())
            loop.create_task(close_on_resume())
            ready.set()
            loop.run_forever()

        t = threading.Thread(target=serve, name="archive-server", daemon=True)
        t.start()
        ready.wait(10)
        try:
            yield sock
        finally:
            fut = asyncio.run_coroutine_threadsafe(server.close(), loop)
            with contextlib.suppress(Exception):
                fut.result(5)
            loop.call_soon_threadsafe(loop.stop)
            t.join(5)


@on_run
def cmd_bridge(args: argparse.Namespace, paths: Any) -> int:
    from ..client.bridge import relay

    if is_locked(paths):
        return relay(paths.sock)
    if not paths.events.exists():
        return _not_a_run(paths)
    with serve_archive(paths.root) as sock:
        return relay(sock)
