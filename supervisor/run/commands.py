"""The command table: what each client command does, as inputs to the lifecycle.

Every command is journaled (``command`` event, with who sent it) before it acts, and answers what
it did (``message``) or why not (``error``). A command never acts on a component directly: it
becomes a :mod:`~rlsup.supervisor.rules.lifecycle` input, so "why did rlsup restart X" has one answer.
"""

from __future__ import annotations

import dataclasses
import signal as signal_mod
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from ..diagnosis.stacks import Stacks
from ..records import events as ev
from ..rules import lifecycle as lc
from .component import Component
from .stacks import reply

Reply = dict[str, Any]


class Run(Protocol):
    """What a command may do to a run: emit, reach its components, follow restarts, end it."""

    @property
    def components(self) -> Mapping[str, Component]: ...

    def emit(self, event: ev.Event) -> dict[str, Any]: ...

    def follow_restart(self, name: str, cause: lc.Cause | None = None) -> None: ...

    def request_shutdown(self, reason: str, by_user: bool = True) -> None: ...

    @property
    def ending(self) -> bool: ...

    def handover(self, reason: str) -> list[int]: ...

    async def stacks_of(self, comp: Component, why: str, native: bool = False) -> Stacks | None: ...


def _stop(run: Run, name: str, by: str, args: dict[str, Any]) -> Reply:
    c = run.components[name]
    if c.state in lc.FINAL:
        return {"ok": False, "error": f"{name} is already {c.state}"}
    c.handle(lc.Stop(by, args.get("cause")))
    return {"ok": True, "message": f"stopping {name}"}


def _start(run: Run, name: str, by: str, args: dict[str, Any]) -> Reply:
    c = run.components[name]
    if c.state not in lc.FINAL:
        return {"ok": False, "error": f"{name} is {c.state}, not stopped"}
    c.handle(lc.Start(by, cause=args.get("cause")))
    return {"ok": True, "message": f"starting {name}"}


def _restart(run: Run, name: str, by: str, args: dict[str, Any]) -> Reply:
    run.components[name].handle(lc.Restart(by, reason=f"restart requested by {by}", cause=args.get("cause")))
    run.follow_restart(name, args.get("cause"))
    return {"ok": True, "message": f"restarting {name}"}


def _resume(run: Run, name: str, by: str, args: dict[str, Any]) -> Reply:
    c = run.components[name]
    r = c.cfg.resume
    if r is None:
        return {"ok": False, "error": f"{name} has no `resume` section in the config"}
    from ..rundir.checkpoints import discover

    found = discover(r.checkpoints, r.layout, step_pattern=r.step_pattern,
                     settle_s=0.0 if c.current is None else 5.0)
    step = args.get("step")
    if step is not None:
        ck = next((x for x in found.checkpoints if x.step == int(step)), None)
        if ck is None:
            steps = ", ".join(str(x.step) for x in found.checkpoints) or "none"
            return {"ok": False, "error": f"no complete checkpoint at step {step} in {r.checkpoints} "
                                          f"(complete: {steps})"}
    else:
        ck = found.latest
        if ck is None:
            return {"ok": False, "error": f"no complete checkpoint yet in {r.checkpoints}"}
    why = args.get("cause")
    if why is not None:
        why = dataclasses.replace(why, reason=f"{why.reason} (from the checkpoint of step {ck.step})")
    c.handle(lc.Restart(by, reason=f"resume from step {ck.step} requested by {by}", step=ck.step, cause=why))
    run.follow_restart(name, why)
    return {"ok": True, "message": f"restarting {name} from step {ck.step} ({ck.path})"}


def parse_signal(text: object) -> signal_mod.Signals:
    """A real signal from ``TERM``, ``SIGTERM``, ``sigterm`` or ``15``; ValueError saying what is
    accepted otherwise. ``signal`` module attributes that are not signals (``SIG_IGN``, ``SIG_DFL``,
    ``SIG_BLOCK``: small integers that would send SIGHUP or SIGINT) and signal 0 are refused."""
    raw = str(text).strip()
    if raw.lstrip("+").isdigit():
        try:  # a named signal only (not 0, not a real-time signal without a name)
            return signal_mod.Signals(int(raw))
        except ValueError:
            raise ValueError(f"no signal number {raw} on this system") from None
    name = raw.upper()
    name = name if name.startswith("SIG") else "SIG" + name
    member = signal_mod.Signals.__members__.get(name)
    if member is None:
        common = "TERM, INT, HUP, QUIT, USR1, USR2, KILL, STOP, CONT"
        raise ValueError(f"unknown signal {raw!r}: give a signal name ({common}, with or without SIG) or its "
                         "number")
    return member


def _signal(run: Run, name: str, by: str, args: dict[str, Any]) -> Reply:
    c = run.components[name]
    try:
        sig = parse_signal(args.get("signal", "SIGTERM"))
    except ValueError as e:
        return {"ok": False, "error": f"cannot signal {name}: {e}"}
    if c.current is None:
        return {"ok": False, "error": f"cannot signal {name} (not running)"}
    c.current.signal(sig)
    return {"ok": True, "message": f"sent {sig.name} to {name}'s process tree"}


async def _stack(run: Run, name: str, by: str, args: dict[str, Any]) -> Reply:
    """``rlsup stack NAME``: the Python stacks of its processes, taken off the loop (the reply comes later)."""
    c = run.components[name]
    s = await run.stacks_of(c, f"asked by {by}", bool(args.get("native")))
    if s is None:
        return {"ok": False, "error": f"{name} is {c.state}: it has no process to take the stacks of"}
    return reply(s)


COMMANDS: dict[str, Callable[[Run, str, str, dict[str, Any]], Reply | Awaitable[Reply]]] = {
    "start": _start, "stop": _stop, "restart": _restart, "resume": _resume, "signal": _signal, "stack": _stack,
}


def run_command(run: Run, cmd: str, name: str | None, *, by: str = "user", client: str | None = None,
                **args: Any) -> Reply | Awaitable[Reply]:
    """Act on one command from a client (``stack`` answers later: an awaitable reply)."""
    if cmd == "stop_all":
        run.emit(ev.CommandReceived(None, command=cmd, by=by, client=client))
        run.request_shutdown(f"stopped by {by}" + (f" ({client})" if client else ""))
        return {"ok": True, "message": "stopping every component in reverse dependency order"}
    if cmd == "handover":
        if run.ending:  # nothing to hand over: a new supervisor would only start and end the run again
            return {"ok": False, "error": "the run is ending (or has ended): no new supervisor is needed; once it "
                                          "has ended, `rlsup up CONFIG --resume` continues it"}
        run.emit(ev.CommandReceived(None, command=cmd, by=by, client=client))
        pids = run.handover(f"handed over by {by}" + (f" ({client})" if client else ""))
        return {"ok": True, "message": f"supervisor exiting; {len(pids)} component(s) keep running", "monitors": pids}
    fn = COMMANDS.get(cmd)
    if fn is None:
        return {"ok": False, "error": f"unknown command {cmd!r}"}
    if cmd in ("start", "restart", "resume") and run.ending:
        return {"ok": False, "error": "the run is ending: nothing starts again in it; once it has ended, "
                                      "`rlsup up CONFIG --resume` continues it"}
    if name is None or name not in run.components:
        return {"ok": False, "error": f"no component {name!r}; components: {', '.join(run.components)}"}
    # A command run from inside a component of this run (the trainer's `rlsup restart inference` after a reload
    # broke the engine) is that component's, not the user's: the journal says which.
    origin = args.pop("from_component", None)
    if isinstance(origin, str) and origin in run.components:
        by = f"component {origin}"
    reason = str(args.pop("reason", "") or "")[:300]
    e = run.emit(ev.CommandReceived(name, command=cmd, by=by, client=client, step=args.get("step"),
                                    reason=reason or None))
    # The typed cause every start, stop and restart this command makes carries (`rlsup why`).
    via = f" via {client}" if client else ""
    step = f" --step {args['step']}" if args.get("step") is not None else ""
    words = f"`rlsup {cmd} {name}{step}` from {by}{via}" + (f": {reason}" if reason else "")
    who: lc.CauseBy = "component" if by.startswith("component ") else "user"
    args = {**args, "cause": lc.Cause(who, words, seq=e.get("seq"), component=origin if who == "component" else None)}
    return fn(run, name, by, args)
