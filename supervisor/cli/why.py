"""``rlsup why NAME [--attempt N]``: the chain of causes behind an attempt, followed through the journal by the
``seq`` each event's ``cause`` (``fatal``: ``why``) points at, across components; and how it ended. Also home
of ``rlsup logs NAME --attempt N``."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from ..records import events as ev
from ..records.events import Record, describe
from .common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_raw, client_parser, fail, on_run, say

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


def _events(paths: Any) -> list[Record] | None:
    from ..rundir.journal import read_records

    if not paths.events.exists():
        say(f"rlsup: no journal at {paths.events}: not a run directory, or the run never started", err=True)
        return None
    return list(read_records(paths.events))


def _starts(records: list[Record], name: str) -> list[Record]:
    return [r for r in records if isinstance(r.event, ev.ComponentStarted) and r.component == name]


def explain(records: list[Record], name: str, attempt: int | None = None) -> dict[str, Any] | None:
    """The chain behind ``name``'s attempt ``attempt`` (default: the latest), from the journal's records;
    events in it are records (:func:`as_json` gives the JSON of ``rlsup why --json``)."""
    starts = _starts(records, name)
    if not starts:
        return None
    i = len(starts) - 1 if attempt is None else next(
        (k for k in range(len(starts) - 1, -1, -1) if _field(starts[k], "attempt") == attempt), -1)
    if i < 0:
        return None
    started = starts[i]
    following = starts[i + 1] if i + 1 < len(starts) else None
    by_seq = {r.seq: r for r in records}
    chain = _chain(started, by_seq, records)
    # The attempt's own end: between its start and the next start of the component.
    lo, hi = started.seq, following.seq if following else float("inf")
    mine = [r for r in records if r.component == name and lo < r.seq < hi]
    exited = next((r for r in mine if isinstance(r.event, ev.ComponentExited)), None)
    stopping = next((r for r in mine if isinstance(r.event, ev.ComponentStopping)
                     and (exited is None or r.seq < exited.seq)), None)
    then = None if exited is None else next((r for r in mine if r.seq > exited.seq and isinstance(
        r.event, (ev.RestartScheduled, ev.ComponentCompleted, ev.ComponentFatal, ev.ComponentStopped))), None)
    adopted = [r for r in mine if isinstance(r.event, ev.ComponentAdopted)]
    hangs = [r for r in mine if isinstance(r.event, ev.FlagRaised) and r.event.type in HANG_FLAGS]
    return {"component": name, "attempt": _field(started, "attempt"), "started": started,
            "cause": cause_of(started), "chain": chain, "adopted": adopted, "hangs": hangs,
            "stopping": stopping, "stop_chain": _chain(stopping, by_seq, records) if stopping else [],
            "exited": exited, "then": then, "next_attempt": _field(following, "attempt") if following else None}


def as_json(x: dict[str, Any]) -> dict[str, Any]:
    """``x`` with its records as the journal's dicts."""
    def plain(v: Any) -> Any:
        return v.to_dict() if isinstance(v, Record) else ([plain(i) for i in v] if isinstance(v, list) else v)
    return {k: plain(v) for k, v in x.items()}


def _field(r: Record, name: str) -> Any:
    """Field ``name`` as the line held it (a typed record inside as its dict; None where it has none)."""
    return r.to_dict().get(name)


def cause_of(r: Record) -> dict[str, Any] | None:
    c = _field(r, "why" if isinstance(r.event, ev.ComponentFatal) else "cause")
    return c if isinstance(c, dict) else None


def _chain(e: Record, by_seq: dict[int, Record], records: list[Record]) -> list[Record]:
    """The events a cause points at, one after the other, back to one that has no cause of its own."""
    out: list[Record] = []
    cur: Record | None = e
    for _ in range(MAX_HOPS):
        c = cause_of(cur) if cur is not None else None
        if c is None or c.get("seq") is None:
            break
        nxt = by_seq.get(c["seq"])
        if nxt is None or nxt in out or nxt is e:
            break
        out.append(nxt)
        if isinstance(nxt.event, ev.ComponentExited):
            # An exit rlsup or someone asked for: why that stop was asked for goes on the chain.
            stop = _stop_before(nxt, records)
            if stop is None:
                break
            out.append(stop)
            cur = stop
        else:
            cur = nxt
    return out


def _stop_before(exited: Record, records: list[Record]) -> Record | None:
    r = next((r for r in reversed(records) if r.component == exited.component and r.seq < exited.seq and isinstance(
        r.event, (ev.ComponentStopping, ev.ComponentStarted, ev.ComponentAdopted))), None)  # back to its start
    return r if r is not None and isinstance(r.event, ev.ComponentStopping) and cause_of(r) else None


def _when(r: Record) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.ts or 0))


def _line(r: Record) -> str:
    return f"[seq {r.seq}] {_when(r)} {r.component or 'rlsup'}: {describe(r)}"


def _cause_text(c: dict[str, Any] | None) -> str:
    if not c:
        return "not recorded (a journal written before rlsup 0.3)"
    who = c.get("by")
    comp = f" ({c['component']})" if c.get("component") else ""
    return f"{who}{comp}: {c.get('reason')}"


def _because(c: dict[str, Any] | None) -> str:
    return f"            because {_cause_text(c)}"


def format_why(x: dict[str, Any]) -> str:
    s = x["started"]
    out = [f"{x['component']} attempt {x['attempt']}: started {_when(s)} (pid {_field(s, 'pid')})",
           f"  why:      {_cause_text(x['cause'])}"]
    for e in x["chain"]:  # the events that led to the start, each with its own cause (an exit's is the exit)
        out.append(f"    <- {_line(e)}")
        if (c := cause_of(e)) and not isinstance(e.event, ev.ComponentExited):
            out.append(f"       because {_cause_text(c)}")
    out += [f"  taken over by a new supervisor: {_line(a)}" for a in x["adopted"]]
    for e in x.get("hangs") or []:  # a stall or a failed liveness probe, with where its processes were
        out.append(f"  hung:     {_line(e)}")
        out += [f"            {y}" for y in (e.event.evidence if isinstance(e.event, ev.FlagRaised) else [])
                if str(y).startswith("stack")]
    stop = x["stopping"]
    if x["exited"] is None:  # being stopped (and why), or still running
        out += [f"  stopping: {_line(stop)}", _because(cause_of(stop))] if stop is not None else [
            "  ended:    not yet (running, or its end is not in the journal)"]
        return "\n".join(out)
    if stop is not None:
        out += [f"  stopped:  {_line(stop)}", _because(cause_of(stop)), *(f"    <- {_line(e)}" for e in x["stop_chain"])]
    out.append(f"  ended:    {_line(x['exited'])}")
    if (t := x["then"]) is not None:
        out.append(f"  then:     {_line(t)}")
        if c := cause_of(t):
            out.append(_because(c))
    if x["next_attempt"] is not None:
        out.append(f"  next:     attempt {x['next_attempt']} (`rlsup why {x['component']} --attempt "
                   f"{x['next_attempt']}`)")
    return "\n".join(out)


@on_run
def cmd_why(args: argparse.Namespace, paths: Any) -> int:
    events = _events(paths)
    if events is None:
        return EXIT_FAILED
    x = explain(events, args.name, args.attempt)
    if x is None:
        names = sorted({str(r.component) for r in events if isinstance(r.event, ev.ComponentStarted)})
        which = f"attempt {args.attempt} of {args.name!r}" if args.attempt is not None else repr(args.name)
        return fail(f"rlsup: the journal has no start of {which}; started components: {', '.join(names) or 'none'}",
                    EXIT_USAGE if args.attempt is None and args.name not in names else EXIT_FAILED)
    say(json.dumps(as_json(x), indent=2, default=str) if args.json else format_why(x))
    return EXIT_OK


def print_attempt_logs(paths: Any, name: str, attempt: int, lines: int) -> int:
    """``rlsup logs NAME --attempt N``: the last ``lines`` lines of that attempt's own output, masked."""
    from ..rundir.archive import read_config, redactor_for
    from ..rundir.attemptlog import find, lines_of, read_bytes

    events = _events(paths)
    if events is None:
        return EXIT_FAILED
    r = find(events, name, attempt)
    if r is None:
        have = [str(_field(r, "attempt")) for r in _starts(events, name)]
        return fail(f"rlsup: {name} has no attempt {attempt} in the journal; attempts: {', '.join(have) or 'none'}")
    if r.start is None:
        return fail(f"rlsup: attempt {attempt}'s start does not say where its output begins (a journal written "
                    f"before rlsup 0.3); its output is in {paths.log(name)}")
    data, partial = read_bytes(paths.log(name), r.start, r.end)
    config = next((r.event.config for r in reversed(events) if isinstance(r.event, ev.RunStarted)), None)
    cfg_path = Path(config) if config else None
    red = redactor_for(read_config(cfg_path), cfg_path)
    out = red.redact_lines(lines_of(data))[-max(0, lines):] if lines else []
    if partial:
        say(f"rlsup: the beginning of attempt {attempt}'s output is no longer in the log (rotated away or "
            "longer than 4 MiB)", err=True)
    say("".join(line + "\n" for line in out), end="")
    return EXIT_OK
