"""Client commands on one run: ``status``, ``start``/``stop``/``restart``/``resume``, ``logs``, ``events``
(``status``, ``logs`` and ``events`` also read an ended run from its run dir, and say so)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
from typing import Any

from ..client.session import Session
from ..render.status import display_path
from ..rundir.layout import RunPaths, is_locked
from .common import (
    EXIT_OK,
    EXIT_USAGE,
    add_raw,
    client_call,
    client_parser,
    fail,
    live_or_handed_over,
    on_run,
    open_client,
    run_dir_arg,
    say,
    stop_on_interrupt,
    until_interrupted,
)
from .follow import Printer


def add_parsers(sub: Any) -> None:
    st = client_parser(sub, "status", "state of every component (of a live or an ended run)",
                       "Print every component's state, pid, attempt, uptime, step, rate, ETA, checkpoint, the last "
                       "exit with its diagnosis, flags, and GPUs. --json prints the shape documented in the README. "
                       "On a run that has ended, the final state is read from its run dir.", cmd_status)
    st.add_argument("--json", action="store_true", help="print JSON for scripts")
    for name, what in (
            ("start", "start a stopped (or completed/fatal) component"),
            ("stop", "stop a component and keep it stopped (its tree: stop signal, then SIGKILL)"),
            ("restart", "restart a component now (a fresh attempt; resumes if `resume` is set)")):
        p = client_parser(sub, name, what, what[0].upper() + what[1:] + ". Run from inside a component of the "
                          "same run (its RLSUP_COMPONENT and RLSUP_RUN_DIR), the journal names that component as "
                          "the sender, not the user.", functools.partial(_command, command=name))
        p.add_argument("name", metavar="NAME", help="component name")
        p.add_argument("--reason", metavar="TEXT", default=None,
                       help="why, in words: kept in the journal with the command (`rlsup events`, `rlsup why`)")
    rs = client_parser(sub, "resume", "restart a component from a checkpoint",
                       "Restart NAME from its latest complete checkpoint (or --step N), with the `resume.args` "
                       "of its config.", cmd_resume)
    rs.add_argument("name", metavar="NAME")
    rs.add_argument("--step", type=int, metavar="N", help="resume from the checkpoint of step N")
    lg = client_parser(sub, "logs", "print a component's recent output; -f to follow",
                       "Print the last N lines of NAME's output (ANSI colours stripped, progress bars folded; the "
                       "byte-exact output is in <run_dir>/logs/NAME.log). -f keeps printing new lines. Works on a "
                       "run that has ended. On a terminal, control characters are shown, not obeyed (^[ for ESC, "
                       "as less does; --raw for them as they are).", cmd_logs)
    lg.add_argument("name", metavar="NAME", nargs="?", help="the component (without it: the list of components)")
    lg.add_argument("-n", "--lines", type=int, default=50, metavar="N", help="how many lines (default 50)")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until Ctrl-C")
    lg.add_argument("--attempt", type=int, default=None, metavar="N",
                    help="only attempt N's own output (from where its `started` event says it began to where the "
                         "next attempt's began; `rlsup why NAME --attempt N` says why it ran)")
    ev = client_parser(sub, "events", "print the run's journal; -f to follow",
                       "Print the journal (<run_dir>/events.jsonl) one human-readable line per event. Works on a "
                       "finished run. -f follows a live run.", cmd_events)
    ev.add_argument("-n", "--lines", type=int, default=None, metavar="N", help="only the last N events")
    ev.add_argument("-f", "--follow", action="store_true", help="keep printing new events until Ctrl-C")
    ev.add_argument("--json", action="store_true", help="one JSON object per line, as in events.jsonl")
    for p in (lg, ev):
        add_raw(p)


@on_run
def cmd_status(args: argparse.Namespace, paths: RunPaths) -> int:
    from ..render.status import format_status

    if not is_locked(paths):
        if not paths.events.exists():
            return fail(f"rlsup: no run in {paths.root} (no events.jsonl); start one with `rlsup up CONFIG`")
        from ..rundir.archive import Archive
        from ..rundir.stranded import describe_gone, supervisor_gone

        archive = Archive(paths.root)
        view = archive.snapshot_state()
        view["run"]["supervisor"] = None
        if (gone := supervisor_gone(paths, view)) is not None:
            # Its supervisor died mid-way: no number here is live, and only what the monitors say runs runs.
            view["run"]["supervisor_gone"] = gone
            running = {r["component"] for r in gone["still_running"] if r["alive"]}
            for name, c in view["components"].items():
                c.update(rate=None, eta_s=None, resources=None)
                if c.get("state") in ("starting", "running", "stopping") and name not in running:
                    c.update(state="unknown", pid=None, uptime_s=None)
        if args.json:
            say(json.dumps(view, indent=2, default=str))
        elif gone is not None:
            say(format_status(view) + "\n\n" + "\n".join(describe_gone(gone)))
        else:
            say(f"rlsup: no supervisor owns {paths.root}; the run has {archive.describe()}", err=True)
            say(format_status(view))
        return EXIT_OK

    async def fn(client: Any, paths: Any) -> int:
        view = (await client.snapshot(lines=0))["state"]
        say(json.dumps(view, indent=2, default=str) if args.json else format_status(view))
        return EXIT_OK

    return client_call(args, fn)


@on_run
def _command(args: argparse.Namespace, paths: RunPaths, command: str, **cargs: Any) -> int:
    if not is_locked(paths) and paths.events.exists():
        from ..rundir.archive import Archive

        return fail(f"rlsup: {Archive(paths.root).command(command)['error']}")

    async def fn(client: Any, paths: Any) -> int:
        reply = await client.command(command, args.name, **cargs, **_sender(args, paths.root))
        if reply.get("ok"):
            say(f"rlsup: {reply.get('message', 'done')}")
            return EXIT_OK
        return fail(f"rlsup: {reply.get('error', 'refused')}")

    return client_call(args, fn)


def _sender(args: argparse.Namespace, root: Any) -> dict[str, Any]:
    """What a command sends besides itself: ``--reason``, and the component it runs in when it runs inside one
    (``RLSUP_COMPONENT``, set by rlsup) of the run at ``root`` (the supervisor checks the name)."""
    from ..monitor.process import ENV_COMPONENT, ENV_RUN_DIR

    out: dict[str, Any] = {"reason": args.reason} if getattr(args, "reason", None) else {}
    here, mine = os.environ.get(ENV_RUN_DIR), os.environ.get(ENV_COMPONENT)
    if here and mine and os.path.realpath(here) == os.path.realpath(root):
        out["from_component"] = mine
    return out


def cmd_resume(args: argparse.Namespace) -> int:
    return _command(args, "resume", **({"step": args.step} if args.step is not None else {}))


@on_run
def cmd_logs(args: argparse.Namespace, paths: RunPaths) -> int:
    if args.name is None:
        return _which_component(paths)
    if args.attempt is not None:
        return _attempt_logs(args, paths)
    if not is_locked(paths):
        return _ended_run_logs(args, paths)
    return client_call(args, functools.partial(_live_logs, args))


def _attempt_logs(args: argparse.Namespace, paths: Any) -> int:
    """`rlsup logs NAME --attempt N`: one attempt's output so far (it cannot be followed)."""
    from .why import print_attempt_logs

    if args.follow:
        return fail("rlsup: --attempt prints one attempt's output so far; to follow the live one, drop --attempt",
                    EXIT_USAGE)
    return print_attempt_logs(paths, args.name, args.attempt, args.lines)


def _ended_run_logs(args: argparse.Namespace, paths: Any) -> int:
    """`rlsup logs NAME` on a run no supervisor serves: the tail of its log, read back from the run dir."""
    from ..rundir.archive import Archive

    if not paths.events.exists():
        return fail(f"rlsup: no run in {paths.root} (no events.jsonl)")
    archive = Archive(paths.root)
    ring = archive.rings().get(args.name)
    if ring is None:
        return fail(f"rlsup: no component {args.name!r}; components: {', '.join(archive.rings())}")
    say("".join(line + "\n" for line in ring.tail(max(0, args.lines))[1]), end="")
    if args.follow:
        say(f"rlsup: the run has {archive.describe()}; nothing more to follow", err=True)
    return EXIT_OK


async def _live_logs(args: argparse.Namespace, client: Any, paths: Any) -> int:
    """`rlsup logs NAME [-f]` from the run's supervisor: its tail, then (with -f) every new line."""
    snap = await client.snapshot(lines=max(0, args.lines))
    comps = snap["state"]["components"]
    if args.name not in comps:
        return fail(f"rlsup: no component {args.name!r}; components: {', '.join(comps)}")
    block = snap["logs"][args.name]
    session = None
    if args.follow:  # made, and Ctrl-C bound to it, before the tail is printed (a person answers the tail)
        printer = Printer(events=False, logs={args.name}, log_file_hint={args.name: str(paths.log(args.name))})
        session = Session(functools.partial(open_client, paths, "logs"), printer, lines=0)
        session.log_next[args.name] = block["seq"] + len(block["lines"])
        session.seq = snap.get("seq", 0)
        stop_on_interrupt(session)
    if not say("".join(line + "\n" for line in block["lines"]), end="") or session is None:
        return EXIT_OK  # done, or the reader left (`rlsup logs -f X | head`)
    return await until_interrupted(session)


def _which_component(paths: Any) -> int:
    """`rlsup logs` without NAME: say which names there are, as a command to paste."""
    from ..rundir.replay import read_run

    try:
        names = list(read_run(paths).final_state()["components"]) if paths.events.exists() else []
    except OSError:
        names = []
    rd = run_dir_arg(paths.root)
    if not names:
        return fail(f"rlsup: which component? usage: rlsup logs NAME{rd} [-n N] [-f]", EXIT_USAGE)
    say(f"rlsup: which component? {display_path(paths.root)} has: {', '.join(names)}", err=True)
    return fail(f"  for example: rlsup logs {names[-1]}{rd} -n 20", EXIT_USAGE)


@on_run
def cmd_events(args: argparse.Namespace, paths: RunPaths) -> int:
    from ..records.events import human
    from ..rundir.journal import read_records

    if not paths.events.exists():
        return fail(f"rlsup: no journal at {paths.events}")
    records = list(read_records(paths.events))
    if args.lines is not None:
        records = records[-args.lines:] if args.lines > 0 else []
    width = max([12, *(len(r.component or "") for r in records)])
    text = "".join((json.dumps(r.to_dict()) if args.json else human(r, width=width)) + "\n" for r in records)
    if not say(text, end="") or not args.follow:
        return EXIT_OK  # done, or the reader left (`rlsup events -f | head`)
    if not live_or_handed_over(paths):
        return fail("rlsup: no supervisor owns this run; nothing more to follow", EXIT_OK)

    printer = Printer(as_json=args.json)
    printer.width = width

    async def go() -> int:
        session = Session(functools.partial(open_client, paths, "events"), printer, lines=0)
        session.seq = records[-1].seq if records else 0
        return await until_interrupted(session)

    return asyncio.run(go())
