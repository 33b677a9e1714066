"""What the explorer checks on the real outputs of a run: the journal, ``rlsup status --json``,
``rlsup diagnose --json``, the attached clients' output, the processes left. Each check returns the
violations it found, in words (an empty list when the promise held); the test joins them with the
sequence's replay line.

The promises of docs/lifecycle.md ("What rlsup promises about a run") that can be read from a journal
are checked by tests/promises.py (shared with the deterministic simulator) where it exists; the checks
here are those that only make sense on real outputs.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.explorer.world import CEILING_S, World, wait
from tests.faults.harness import cgroup_members, processes_with

TIME = re.compile(r"^\d\d:\d\d:\d\d ")
SETTLED = ("stopped", "completed", "fatal")


def journal(world: World) -> list[str]:
    """Every line a whole JSON object; seq gapless from 1 and increasing."""
    raw = (world.run_dir / "events.jsonl").read_bytes() if (world.run_dir / "events.jsonl").exists() else b""
    out = []
    if raw and not raw.endswith(b"\n"):
        out.append(f"events.jsonl ends in a torn line: {raw[-200:]!r}")
    last = 0
    for n, line in enumerate(raw.split(b"\n")[:-1], 1):
        try:
            seq = json.loads(line)["seq"]
        except (ValueError, KeyError, TypeError) as e:
            out.append(f"events.jsonl line {n} is not an event ({e}): {line[:200]!r}")
            continue
        if seq != last + 1:
            out.append(f"events.jsonl line {n}: seq {seq} after {last} (journal seqs are gapless and ordered)")
        last = seq
    return out


def promises(world: World) -> list[str]:
    """The journal-level promises (tests/promises.py), where that module exists."""
    try:
        from tests import promises as p  # type: ignore[attr-defined]
    except ImportError:
        return []
    return [str(v) for v in p.check_journal(world.events())]


def _lifecycle_lines(world: World) -> list[str]:
    from rlsup.supervisor.records.events import human, is_lifecycle

    text = "".join(human(e, width=12) + "\n" for e in world.events() if is_lifecycle(e.get("kind", "")))
    return text.splitlines()


def _event_lines(out: str) -> list[str]:
    """What a follower printed of the run's events (its own ``rlsup: ...`` lines left out)."""
    lines = [ln for ln in out.splitlines() if not ln.startswith("rlsup: ")]
    # A continuation line of a multi-line event follows its timed line: keep the lines from the first timed one.
    first = next((i for i, ln in enumerate(lines) if TIME.match(ln)), len(lines))
    return lines[first:]


def _contiguous_in(part: list[str], whole: list[str]) -> bool:
    n = len(part)
    return n == 0 or any(whole[i:i + n] == part for i, line in enumerate(whole) if line == part[0])


def _left_early(f: Any) -> bool:
    """The client ended by itself, and not on the run's end (its last event line is not `run ended`)."""
    lines = _event_lines(f.out)
    return f.attached and not f.killed and not f.running and not (lines and "run ended" in lines[-1])


def client_output(world: World) -> list[str]:
    """Each client printed the journal's lifecycle events, in order, none missed or twice, through every
    reconnect (what the server shows once reconnected)."""
    whole = _lifecycle_lines(world)
    out = []
    for n, f in enumerate(world.followers, 1):
        lines = _event_lines(f.out)
        if not _contiguous_in(lines, whole):
            bad = next((i for i in range(len(lines)) if not _contiguous_in(lines[:i + 1], whole)), 0)
            out.append(f"client {n} (attach --plain) printed events that are not the journal's, in order, from "
                       f"line {bad + 1}: {lines[max(0, bad - 2):bad + 2]}")
    return out + clients_stayed(world)


def clients_stayed(world: World) -> list[str]:
    """A client attached to a live run never shows it ended: one that ended by itself ended on the run's end."""
    return [f"client {n} (attach --plain) stopped following with the run not ended (exit {f.proc.returncode}; "
            f"last event printed: {_event_lines(f.out)[-1:]}; its last words: {f.out.strip().splitlines()[-1:]})"
            for n, f in enumerate(world.followers, 1) if _left_early(f)]


def status_answers(world: World) -> list[str]:
    if not world.live():
        return []
    r = world.cli("status", "--json")
    if r.returncode != 0 and world.live():
        return [f"rlsup status --json exited {r.returncode} on a live run: {r.stderr.strip()[-300:]}"]
    return []


def _mismatch(world: World) -> list[str]:
    """Where ``status --json`` and the processes disagree (a component `running` with no process, or a
    process running under a component that status calls stopped, completed or fatal)."""
    r = world.cli("status", "--json")
    if r.returncode != 0:
        return [f"rlsup status --json exited {r.returncode}"]
    comps = json.loads(r.stdout)["components"]
    out = []
    for name, c in comps.items():
        procs = world.processes(name)
        if c["state"] == "running" and procs is None:
            out.append(f"{name} is `running` in status (pid {c.get('pid')}) but no process of it runs")
        if c["state"] in SETTLED and procs is not None:
            out.append(f"{name} is `{c['state']}` in status but its process {procs[0]} runs")
    return out


def status_matches_processes(world: World) -> list[str]:
    """On a live run, status and the processes agree once things settle (probes take their interval)."""
    if not world.live():
        return []
    last: list[str] = []

    def agree() -> bool:
        nonlocal last
        last = _mismatch(world) if world.live() else []
        return not last

    wait(agree, CEILING_S, 1.0)
    return last


def after_down(world: World) -> list[str]:
    """After the sequence's `down`: the run ended, no process of it is left, every component settled,
    every client ended by itself."""
    out = []
    if not world.ended():
        out.append("the journal's last run event is not `run_ended` after `rlsup down`")
    left = wait(lambda: not processes_with(world.token) and not cgroup_members(world.run_dir), CEILING_S, 0.5)
    if not left:
        out.append(f"processes of the run outlived `rlsup down`: {processes_with(world.token)}; "
                   f"cgroup members: {cgroup_members(world.run_dir)}")
    out += world.still_following("`rlsup down` ended the run")
    r = world.cli("status", "--json")
    comps = json.loads(r.stdout)["components"] if r.returncode == 0 else {}
    out += [f"{name} is `{c['state']}` after `rlsup down`" for name, c in comps.items() if c["state"] not in SETTLED]
    return out


def diagnosis(world: World) -> list[str]:
    """``rlsup diagnose RUN_DIR --json`` answers, and agrees with what the explorer did: every chaos fault
    that fired is a failure of its component; a run nothing harmed has none; a root cause, when named, is
    one of the failures it lists."""
    r = world.cli("diagnose", str(world.run_dir), "--json", run_dir=False)
    if r.returncode not in (0, 1):
        return [f"rlsup diagnose --json exited {r.returncode}: {r.stderr.strip()[-500:]}"]
    try:
        d = json.loads(r.stdout)
    except ValueError:
        return [f"rlsup diagnose --json printed no JSON: {r.stdout[:300]!r}"]
    failed = {f.get("component") for f in d.get("failures") or []}
    fired = sorted(p.name for p in (world.run_dir / "work" / "chaos").glob("[!.]*-*@*"))  # (not a .tmp sibling)
    out = [f"the chaos fault {m} fired, but diagnose lists no failure of {m.split('-')[0]} (failures: "
           f"{sorted(failed)}; verdict: {d.get('verdict')})"
           for m in fired if m.split("-", 1)[1].split("@")[0] in FAILING_CHAOS and m.split("-")[0] not in failed
           and not _died_while_stopped(world, m)]
    if not fired and not world.harmed and failed:
        out.append(f"diagnose lists failures of {sorted(failed)} in a run where nothing failed: {d.get('verdict')}")
    root = d.get("root_cause")
    if root and root.get("component") not in failed:
        out.append(f"diagnose names a root cause that is none of its failures: {root}")
    return out


ENDING = ("shutdown", "preemption")  # what a run's own end stops its components by


def _ending(e: dict) -> bool:
    """``e`` says the run's end is under way: `rlsup down`'s command, or a stop or checkpoint request caused by
    the end (a preemption asks for checkpoints before it stops anything)."""
    return ((e.get("kind") == "command" and e.get("command") == "stop_all")
            or e.get("by") in ENDING or (e.get("cause") or {}).get("by") in ENDING)


def _died_while_stopped(world: World, marker: str) -> bool:
    """Whether the fault ``marker`` fired while rlsup was stopping its component (a `down`, a restart) or ending
    the run, or its process, on its way out, was ended by the signal of a checkpoint request: the exit that
    followed it is then a stop, rightly not a failure. Seen: a die@16s fired 14 ms after the SIGTERM of `rlsup
    down` (load 10); an exit0@6 whose interpreter, finalising (its handlers back to the default), was killed by
    the preemption's SIGUSR1 260 ms later; an orchestrator's exit0@18 that fired 5 ms after a preemption had
    asked the trainer for its checkpoint (its exit then counted as stopped by the preemption). The marker holds
    the time it fired."""
    component = marker.split("-")[0]
    try:
        fired_at = float((world.run_dir / "work" / "chaos" / marker).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    began = stopping = None
    ending = False  # the run's end under way when the fault fired
    asked: set[str] = set()  # the signals of the checkpoints asked for since it started
    for e in world.events():
        if e.get("kind") == "run_started" and e["ts"] <= fired_at:
            ending = False
        elif _ending(e) and e["ts"] <= fired_at:
            ending = True
        if e.get("component") != component:
            continue
        if e.get("kind") in ("started", "adopted") and e["ts"] <= fired_at:
            began, stopping, asked = e["ts"], None, set()
        elif e.get("kind") == "stopping" and began is not None:
            stopping = stopping or e["ts"]
        elif e.get("kind") == "checkpoint_requested" and began is not None:
            asked.add(e.get("signal") or "")
        elif e.get("kind") == "exited" and e["ts"] >= fired_at:
            return stopping is not None or ending or e.get("signal") in asked
    return False


# chaos faults that end their process (hang and slow leave it running: a stall, if it lasts)
FAILING_CHAOS = ("crash", "oom", "exit0", "die")


def after_step(world: World) -> list[str]:
    return journal(world) + clients_stayed(world) + world.broken + status_answers(world)


def at_end(world: World) -> list[str]:
    return journal(world) + promises(world) + client_output(world) + diagnosis(world)


__all__ = ["after_down", "after_step", "at_end", "status_matches_processes"]
