"""``rlsup why NAME [--attempt N]``: why an attempt was started and, if it ended, how and what followed.

Every ``started``, ``stopping``, ``restart_scheduled`` event carries a typed ``cause`` (``fatal`` its
``why``): who or what decided it (``by``), in words (``reason``) and the journal ``seq`` of the event
that triggered it. This command follows those links through the journal, across components
(``restart_with`` points at the leader's restart, ``dependency_down`` at the dependency), so "why
was attempt 7 started?" has one answer, on a live run and on one that ended long ago. Also home of
``rlsup logs NAME --attempt N`` (one attempt's output, read by the range its ``started`` recorded).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from .common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_raw, client_parser, resolve, say

MAX_HOPS = 20
HANG_FLAGS = ("stall", "liveness_failed")  # flags whose evidence carries the stacks rlsup took (rlsup stack)

HELP = """\
Print the chain of causes behind one attempt of NAME (default: its latest): why it was started (the
`cause` of its `started` event: by the run's first start, a user command, the previous attempt's exit,
a probe, a stall, a dependency, a crash pattern), the event that triggered that decision, and so on back
to a root: a command someone typed, an exit and its diagnosis, a flag. Then, if the attempt ended: how
(its `exited` event and diagnosis), why it was stopped if rlsup or someone stopped it, and what rlsup
did next (restart, completed, fatal, stopped) with that decision's cause.

Reads the journal (<run_dir>/events.jsonl), so it works while the run goes on and after it ended.

examples:
  rlsup why trainer                 why is the trainer's current attempt running?
  rlsup why trainer --attempt 7     why was attempt 7 started, and how did it end?
  rlsup why trainer --json          the same, as JSON for scripts (the events themselves)
  rlsup logs trainer --attempt 7    that attempt's output, and only its own
"""


def add_parsers(sub: Any) -> None:
    w = client_parser(sub, "why", "why an attempt was started (and how it ended): the chain of causes", HELP,
                      cmd_why)
    w.add_argument("name", metavar="NAME", help="the component")
    w.add_argument("--attempt", type=int, default=None, metavar="N", help="which attempt (default: the latest)")
    w.add_argument("--json", action="store_true", help="print JSON: the attempt, its chain and its end")
    add_raw(w)


def _events(paths: Any) -> list[dict[str, Any]] | None:
    from ..rundir.journal import read_events

    if not paths.events.exists():
        say(f"rlsup: no journal at {paths.events}: not a run directory, or the run never started", err=True)
        return None
    return list(read_events(paths.events))


def explain(events: list[dict[str, Any]], name: str, attempt: int | None = None) -> dict[str, Any] | None:
    """The chain behind ``name``'s attempt ``attempt`` (default: the latest), from journal events."""
    starts = [e for e in events if e.get("kind") == "started" and e.get("component") == name]
    if not starts:
        return None
    if attempt is None:
        i = len(starts) - 1
    else:
        i = next((k for k in range(len(starts) - 1, -1, -1) if starts[k].get("attempt") == attempt), -1)
        if i < 0:
            return None
    started = starts[i]
    following = starts[i + 1] if i + 1 < len(starts) else None
    by_seq = {e.get("seq"): e for e in events}
    chain = _chain(started, by_seq, events)
    # The attempt's own end: between its start and the next start of the component.
    lo, hi = started.get("seq", 0), (following or {}).get("seq", float("inf"))
    mine = [e for e in events if e.get("component") == name and lo < e.get("seq", 0) < hi]
    exited = next((e for e in mine if e.get("kind") == "exited"), None)
    stopping = next((e for e in mine if e.get("kind") == "stopping" and (exited is None or e["seq"] < exited["seq"])),
                    None)
    then = None
    if exited is not None:
        then = next((e for e in mine if e["seq"] > exited["seq"]
                     and e.get("kind") in ("restart_scheduled", "completed", "fatal", "stopped")), None)
    adopted = [e for e in mine if e.get("kind") == "adopted"]
    hangs = [e for e in mine if e.get("kind") == "flag" and e.get("type") in HANG_FLAGS]
    return {"component": name, "attempt": started.get("attempt"), "started": started,
            "cause": started.get("cause"), "chain": chain, "adopted": adopted, "hangs": hangs,
            "stopping": stopping, "stop_chain": _chain(stopping, by_seq, events) if stopping else [],
            "exited": exited, "then": then, "next_attempt": (following or {}).get("attempt")}


def cause_of(e: dict[str, Any]) -> dict[str, Any] | None:
    c = e.get("why") if e.get("kind") == "fatal" else e.get("cause")
    return c if isinstance(c, dict) else None


def _chain(e: dict[str, Any], by_seq: dict[Any, dict[str, Any]], events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events a cause points at, one after the other, back to one that has no cause of its own."""
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = e
    for _ in range(MAX_HOPS):
        c = cause_of(cur) if cur is not None else None
        if c is None or c.get("seq") is None:
            break
        nxt = by_seq.get(c["seq"])
        if nxt is None or nxt in out or nxt is e:
            break
        out.append(nxt)
        if nxt.get("kind") == "exited":
            # An exit rlsup or someone asked for: why that stop was asked for goes on the chain.
            stop = _stop_before(nxt, events)
            if stop is None:
                break
            out.append(stop)
            cur = stop
        else:
            cur = nxt
    return out


def _stop_before(exited: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any] | None:
    name, seq = exited.get("component"), exited.get("seq", 0)
    for e in reversed(events):
        if e.get("component") != name or e.get("seq", 0) >= seq:
            continue
        if e.get("kind") == "stopping":
            return e if cause_of(e) else None
        if e.get("kind") in ("started", "adopted"):
            return None
    return None


def _when(e: dict[str, Any]) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.get("ts") or 0))


def _line(e: dict[str, Any]) -> str:
    from ..records.events import describe

    comp = e.get("component") or "rlsup"
    return f"[seq {e.get('seq')}] {_when(e)} {comp}: {describe(e)}"


def _cause_text(c: dict[str, Any] | None) -> str:
    if not c:
        return "not recorded (a journal written before rlsup 0.3)"
    who = c.get("by")
    comp = f" ({c['component']})" if c.get("component") else ""
    return f"{who}{comp}: {c.get('reason')}"


def format_why(x: dict[str, Any]) -> str:
    s = x["started"]
    out = [f"{x['component']} attempt {x['attempt']}: started {_when(s)} (pid {s.get('pid')})",
           f"  why:      {_cause_text(x['cause'])}"]
    out += _chain_lines(x["chain"])
    out += [f"  taken over by a new supervisor: {_line(a)}" for a in x["adopted"]]
    out += _hang_lines(x.get("hangs") or [])
    out += _end_lines(x) if x["exited"] is not None else _not_ended_lines(x["stopping"])
    return "\n".join(out)


def _chain_lines(chain: list[dict[str, Any]]) -> list[str]:
    """The events that led to the start, each with its own cause (an exit's cause is the exit itself)."""
    out = []
    for e in chain:
        out.append(f"    <- {_line(e)}")
        c = cause_of(e)
        if c and e.get("kind") != "exited":
            out.append(f"       because {_cause_text(c)}")
    return out


def _hang_lines(hangs: list[dict[str, Any]]) -> list[str]:
    """A stall or a failed liveness probe of the attempt, with where its processes were (the stacks)."""
    out = []
    for e in hangs:
        out.append(f"  hung:     {_line(e)}")
        out += [f"            {x}" for x in e.get("evidence") or [] if str(x).startswith("stack")]
    return out


def _not_ended_lines(stopping: dict[str, Any] | None) -> list[str]:
    """An attempt whose end is not in the journal: being stopped (and why), or still running."""
    if stopping is None:
        return ["  ended:    not yet (running, or its end is not in the journal)"]
    return [f"  stopping: {_line(stopping)}",
            f"            because {_cause_text(cause_of(stopping))}"]


def _end_lines(x: dict[str, Any]) -> list[str]:
    """An attempt that ended: who stopped it (if anyone), its exit, what rlsup did then, the next attempt."""
    out = []
    if x["stopping"] is not None:
        out.append(f"  stopped:  {_line(x['stopping'])}")
        out.append(f"            because {_cause_text(cause_of(x['stopping']))}")
        out += [f"    <- {_line(e)}" for e in x["stop_chain"]]
    out.append(f"  ended:    {_line(x['exited'])}")
    t = x["then"]
    if t is not None:
        out.append(f"  then:     {_line(t)}")
        c = cause_of(t)
        if c:
            out.append(f"            because {_cause_text(c)}")
    if x["next_attempt"] is not None:
        out.append(f"  next:     attempt {x['next_attempt']} (`rlsup why {x['component']} --attempt "
                   f"{x['next_attempt']}`)")
    return out


def cmd_why(args: argparse.Namespace) -> int:
    paths = resolve(args, live=False)
    if isinstance(paths, int):
        return paths
    events = _events(paths)
    if events is None:
        return EXIT_FAILED
    x = explain(events, args.name, args.attempt)
    if x is None:
        names = sorted({str(e.get("component")) for e in events if e.get("kind") == "started"})
        which = f"attempt {args.attempt} of {args.name!r}" if args.attempt is not None else repr(args.name)
        say(f"rlsup: the journal has no start of {which}; started components: {', '.join(names) or 'none'}",
            err=True)
        return EXIT_USAGE if args.attempt is None and args.name not in names else EXIT_FAILED
    if args.json:
        say(json.dumps(x, indent=2, default=str))
    else:
        say(format_why(x))
    return EXIT_OK


def print_attempt_logs(paths: Any, name: str, attempt: int, lines: int) -> int:
    """``rlsup logs NAME --attempt N``: the last ``lines`` lines of that attempt's own output, masked."""
    from pathlib import Path

    from ..rundir.archive import read_config, redactor_for
    from ..rundir.attemptlog import find, lines_of, read_bytes

    events = _events(paths)
    if events is None:
        return EXIT_FAILED
    r = find(events, name, attempt)
    if r is None:
        have = [str(e.get("attempt")) for e in events if e.get("kind") == "started" and e.get("component") == name]
        say(f"rlsup: {name} has no attempt {attempt} in the journal; attempts: {', '.join(have) or 'none'}", err=True)
        return EXIT_FAILED
    if r.start is None:
        say(f"rlsup: attempt {attempt}'s start does not say where its output begins (a journal written before "
            f"rlsup 0.3); its output is in {paths.log(name)}", err=True)
        return EXIT_FAILED
    data, partial = read_bytes(paths.log(name), r.start, r.end)
    config = next((e.get("config") for e in reversed(events) if e.get("kind") == "run_started"), None)
    cfg_path = Path(config) if config else None
    red = redactor_for(read_config(cfg_path), cfg_path)
    out = red.redact_lines(lines_of(data))[-max(0, lines):] if lines else []
    if partial:
        say(f"rlsup: the beginning of attempt {attempt}'s output is no longer in the log (rotated away or "
            "longer than 4 MiB)", err=True)
    say("".join(line + "\n" for line in out), end="")
    return EXIT_OK
