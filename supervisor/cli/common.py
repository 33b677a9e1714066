"""What every command group shares: exit codes, help formatting, finding the run, talking to it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import signal as signal_mod
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..client.session import NotRunning, RequestFailed, local_connector
from ..records.protocol import ProtocolError
from ..rundir.layout import RunPaths, is_locked

if TYPE_CHECKING:
    from ..config.model import Config

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
RUN_DIR_HELP = "the run's directory (default: $RLSUP_RUN_DIR, else the single live run under ./runs)"


formatter = functools.partial(argparse.RawDescriptionHelpFormatter, max_help_position=32)


def client_parser(sub: Any, name: str, help: str, description: str,
                  func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=description, formatter_class=formatter,
                       epilog="exit codes: 0 done, 1 no supervisor is running or the command was refused, 2 usage error.")
    p.add_argument("--run-dir", metavar="DIR", help=RUN_DIR_HELP)
    p.set_defaults(func=func)
    return p


def add_raw(p: argparse.ArgumentParser) -> None:
    """``--raw``, for the commands that print a component's output (read by ``main._guard_terminal``)."""
    p.add_argument("--raw", action="store_true", help="print control characters as they are, also to a terminal "
                   "(by default a terminal shows them escaped, ^[ for ESC, as less does; a pipe always gets them as they are)")


def say(*parts: Any, err: bool = False, end: str = "\n") -> bool:
    """Print (see :func:`write`)."""
    return write(sys.stderr if err else sys.stdout, " ".join(str(p) for p in parts) + end)


def fail(text: str, code: int = EXIT_FAILED) -> int:
    """Say ``text`` on stderr; ``code``, for the command to return."""
    say(text, err=True)
    return code


def write(stream: Any, text: str) -> bool:
    """Write and flush, never raise: a closed pipe (``rlsup events | head``) or a full log file (the daemon's
    ``supervisor.log`` on a full disk) must not turn into a traceback or stop anything. False when
    the reader went away (a follower then has no one to follow for)."""
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:
        _silence(stream)
        return False
    except (OSError, ValueError):
        pass
    return True


def _silence(stream: Any) -> None:
    """After a broken pipe: point the stream at /dev/null so the interpreter's exit flush is quiet."""
    with contextlib.suppress(OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)


def load(path: str, run_dir: str | None, overrides: Sequence[str] = ()) -> Config | int:
    """The config with ``overrides`` (``--set``), or EXIT_USAGE after printing every problem as
    FILE:LINE:COL (a problem in an override: at the override)."""
    from ..config.loader import ConfigError, load_config  # pydantic: only for commands that read a config

    _node_addresses()
    try:
        return load_config(path, run_dir=run_dir, overrides=overrides)
    except ConfigError as e:
        return fail(e.report(path), EXIT_USAGE)


def set_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set", metavar="KEY.PATH=VALUE", action="append", default=[], dest="overrides",
        help="change the config for this run, e.g. components.trainer.env.LR=1e-5 (repeatable; VALUE is YAML; "
             "a run keeps its overrides when it is taken over or continued with --resume)")


def stored_overrides(run_dir: str | Path) -> list[str]:
    """The ``--set`` overrides a run dir's run started or was last continued with (none if unreadable)."""
    with contextlib.suppress(OSError, ValueError):
        got = json.loads(RunPaths(Path(run_dir)).overrides.read_bytes())
        return [str(x) for x in got] if isinstance(got, list) else []
    return []


def _node_addresses() -> None:
    """Inside a Slurm job: ask Slurm once for the address of each node of the allocation (``NodeAddr``), for
    ``${RLSUP_HEAD_C}`` in the config and every component's environment (config.placement.node_addresses)."""
    from ..config.placement import ADDRS_ENV, expand_hostlist

    nodelist = os.environ.get("SLURM_JOB_NODELIST")
    if not (os.environ.get("SLURM_JOB_ID") and nodelist) or ADDRS_ENV in os.environ:
        return
    from ..slurm.jobs import node_addresses

    addrs = node_addresses(expand_hostlist(nodelist))
    os.environ[ADDRS_ENV] = ",".join(f"{n}={a}" for n, a in addrs.items())


HANDOVER_WAIT_S = 60.0  # how long a client waits for the successor of a supervisor that handed the run over


def live_or_handed_over(paths: Any) -> bool:
    """Whether a supervisor owns the run dir, waiting for it where the run is being handed over (``rlsup
    restart-supervisor``: the old supervisor has exited, the new one is starting). A follower started in that
    moment would otherwise say the run has no supervisor and stop following a live run."""
    from ..rundir.replay import handing_over

    if is_locked(paths):
        return True
    if not paths.events.exists() or not handing_over(paths.events, time.time(), HANDOVER_WAIT_S):
        return False
    deadline = time.monotonic() + HANDOVER_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if is_locked(paths):
            return True
    return False


def run_dir_arg(run_dir: Any) -> str:
    """`` --run-dir X`` unless discovery would find this run without it."""
    from ..render.status import display_path

    return "" if Path(run_dir).parent == Path.cwd() / "runs" else f" --run-dir {display_path(Path(run_dir))}"


def resolve(args: argparse.Namespace, *, live: bool) -> RunPaths | int:
    """The run a client command means (``--run-dir``, ``$RLSUP_RUN_DIR``, the single run under
    ./runs), or an exit code after saying why there is none. ``live``: a supervisor must own it."""
    from .daemon import AmbiguousRun, NoRun, require_live, resolve_run_dir

    try:
        run_dir = resolve_run_dir(args.run_dir, ended_ok=not live)
        return require_live(run_dir) if live else RunPaths(run_dir)
    except (NoRun, AmbiguousRun) as e:
        return fail(f"rlsup: {e}", EXIT_USAGE if isinstance(e, AmbiguousRun) else EXIT_FAILED)


def on_run(fn: Callable[..., int]) -> Callable[..., int]:
    """The handler ``fn(args, paths, ...)`` of a command on the run it means, live or ended (:func:`resolve`); the
    exit code :func:`resolve` gives where there is none."""
    @functools.wraps(fn)
    def handler(args: argparse.Namespace, *more: Any, **kw: Any) -> int:
        paths = resolve(args, live=False)
        return paths if isinstance(paths, int) else fn(args, paths, *more, **kw)

    return handler


async def open_client(paths: Any, name: str) -> Any:
    from .slurm_up import remote_bridge

    # a supervisor in a Slurm job on another host: through srun
    return await (remote_bridge(paths.root, name) or local_connector(paths.root, name))()


def client_call(args: argparse.Namespace, fn: Callable[[Any, Any], Awaitable[int]]) -> int:
    """Run ``fn(client, paths)`` against the live run; connection problems become exit 1."""
    paths = resolve(args, live=True)
    if isinstance(paths, int):
        return paths

    async def go() -> int:
        client = await open_client(paths, args.cmd)
        try:
            return int(await fn(client, paths))
        finally:
            await client.close()

    try:
        return asyncio.run(go())
    except (NotRunning, ProtocolError, RequestFailed, ConnectionError) as e:
        return fail(f"rlsup: {e}")
    except (asyncio.TimeoutError, TimeoutError):
        return fail(f"rlsup: the supervisor of {paths.root} did not answer in time (very busy, or stopped with "
                    "SIGSTOP?); try again")


def stop_on_interrupt(session: Any) -> None:
    """From now on SIGINT and SIGTERM close ``session`` (one that has not run yet then never starts), as does a
    reader gone from its output. Before anything is printed that a person may answer with Ctrl-C: until then
    asyncio's own handler cancels the command's task, and a cancellation that lands as a request completes is
    lost in Python 3.11's ``wait_for`` (a follower then never ends)."""
    loop = asyncio.get_running_loop()
    for s in (signal_mod.SIGINT, signal_mod.SIGTERM):
        loop.add_signal_handler(s, session.close)
    session.listener.on_broken = session.close  # a follow.Printer


async def until_interrupted(session: Any) -> int:
    stop_on_interrupt(session)
    await session.run()
    return EXIT_OK
