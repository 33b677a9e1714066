"""``rlsup report``: a Markdown incident report of a run from its files alone (live or long dead), deterministic
given ``now`` (times in UTC) and masked as a whole: no secret of the environment or the config appears in it."""

from __future__ import annotations

import json
import shlex
import time
from collections import Counter
from collections.abc import Mapping
from itertools import groupby
from pathlib import Path
from typing import Any

from ..diagnosis.run import diagnose_run, root_hint, waited
from ..records.attempts import Attempt, from_records
from ..records.events import FlagCleared, FlagRaised, Record, describe, fmt_duration
from ..rundir.archive import read_config, redactor_for
from ..rundir.attemptlog import lines_of, mark_of, read_bytes
from ..rundir.checkpoints import discover
from ..rundir.layout import RunPaths, is_locked
from ..rundir.logs import last_lines
from ..rundir.replay import read_run
from .advice import NEXT_STEPS
from .bars import step_text

MAX_TIMELINE = 200
MAX_EVIDENCE = 14
LOG_TAIL_LINES = 12


def build_report(run_dir: Path | str, *, now: float | None = None, env: Mapping[str, str] | None = None,
                 config_path: Path | str | None = None) -> str:
    """The Markdown incident report of the run in ``run_dir``; ``env`` and the config (default: the one the
    journal names) supply the secrets to mask. FileNotFoundError without a journal or a state file."""
    paths = RunPaths(Path(run_dir))
    if not paths.events.exists() and not paths.state.exists():
        raise FileNotFoundError(f"no events.jsonl or state.json in {paths.root}: not a run directory")
    now = time.time() if now is None else now
    rp = read_run(paths)  # the journal, once, as typed records
    st = rp.final_state(keep_rates=True)
    run = st["run"]
    cfg_path = Path(config_path) if config_path else (Path(run["config"]) if run.get("config") else None)
    cfg = read_config(cfg_path)
    red = redactor_for(cfg, cfg_path, env)
    md = _render(paths, rp.records, st, from_records(rp.records), cfg, now)
    return red.redact_text(md)


# ---------------------------------------------------------------------------------------- formatting


def _utc(ts: float | None, full: bool = False) -> str:
    if ts is None:
        return "?"
    fmt = "%Y-%m-%d %H:%M:%S UTC" if full else "%H:%M:%S"
    return time.strftime(fmt, time.gmtime(ts))


def _cell(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ").replace("`", "'")


def _code(lines: list[str] | tuple[str, ...]) -> list[str]:
    return ["```", *(str(x).replace("```", "'''") for x in lines), "```"]


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _failure_text(a: Attempt) -> str:
    """How one attempt failed, in a few words: 'AttributeError at train.py:12', 'SIGKILL'."""
    d = a.diagnosis
    if a.false_success is not None:
        return f"a false success ({a.false_success.message})"
    if d.exception or d.location:
        return d.what()
    if a.signal and d.category in ("killed", "unknown"):
        return a.signal
    return f"no recognised error (exit {a.exit_code})" if d.category == "unknown" else d.category


def _hangs(name: str, atts: list[Attempt], waited: bool = False) -> str | None:
    """'trainer hung once (no new step for 20s (last step 29, stall_after 20s))' from its stall flags; 'waited'
    where the run diagnosis found another failure behind every one of them."""
    stalls = [f.event for a in atts for f in a.flags if isinstance(f.event, FlagRaised) and f.event.type == "stall"]
    if not stalls:
        return None
    if waited:
        return f"{name} waited {_times(len(stalls))} while another component was down ({stalls[-1].message})"
    return f"{name} hung {_times(len(stalls))} ({stalls[-1].message or 'no new step'})"


def _failures_text(name: str, failed: list[Attempt]) -> str:
    """'trainer crashed twice with the same ValueError at t.py:7, each time before becoming ready'."""
    sigs = Counter(_failure_text(a) for a in failed)
    verb = "was killed" if all(a.signal for a in failed) else "crashed"
    prep = "by" if verb == "was killed" else "with"
    if len(sigs) == 1:
        same = f"{prep} the same " if len(failed) > 1 else f"{prep} "
        text = f"{name} {verb} {_times(len(failed))} {same}{_failure_text(failed[-1])}"
    else:
        top = ", ".join(_failure_text(a) for a in failed[-3:])
        text = f"{name} {verb} {_times(len(failed))} ({len(sigs)} different failures; latest: {top})"
    if all(not a.ready for a in failed) and len(failed) > 1:
        text += ", each time before becoming ready"
    return text


def _now_text(atts: list[Attempt], cstate: dict[str, Any]) -> str:
    """Where a component that failed stands now: given up, recovered, or its state."""
    if (state := cstate.get("state")) == "fatal":
        reason = str(cstate.get("reason") or "")
        kind = reason.split(":", 1)[0] if ":" in reason[:40] else reason
        return "; stopped restarting" + (f" ({kind[:100]})" if kind else "")
    if not atts[-1].judged_failed:
        return "; recovered" + (f" ({state})" if state in ("completed", "running") else "")
    return f"; now {state}" if state else ""


def _component_summary(name: str, atts: list[Attempt], cstate: dict[str, Any], waited: bool = False) -> str | None:
    failed = [a for a in atts if a.judged_failed]
    hung = _hangs(name, atts, waited)
    if not failed:
        return None if hung is None else hung + (f"; now {state}" if (state := cstate.get("state")) else "")
    return _failures_text(name, failed) + _now_text(atts, cstate) + (f"; {hung}" if hung is not None else "")


def _summary(st: dict[str, Any], attempts: dict[str, list[Attempt]], waited: set[str] | None = None) -> str:
    parts = [s for name, atts in attempts.items()
             if (s := _component_summary(name, atts, st["components"].get(name, {}), name in (waited or set())))]
    never = [n for n, c in st["components"].items() if c.get("state") == "fatal" and not attempts.get(n)]
    if never:
        parts.append(f"{', '.join(never)} never started (a dependency was fatal)")
    run = st["run"]
    end = (f"the run ended: {run.get('end_reason') or '?'} (exit code {run.get('exit_code')})"
           if run.get("ended_at") else "the run is still going")
    if not parts:
        return f"No component failed; {end}."
    text = "; ".join(parts) + f"; {end}."
    return text[0].upper() + text[1:]


def _render(paths: RunPaths, events: list[Record], st: dict[str, Any], attempts: dict[str, list[Attempt]],
            cfg: dict[str, Any] | None, now: float) -> str:
    run = st["run"]
    name = run.get("name") or paths.root.name
    out: list[str] = [f"# Incident report: {name}", ""]
    started_at = run.get("started_at") or (events[0].ts if events else None)
    ended_at = run.get("ended_at")
    live = ended_at is None and is_locked(paths)
    if ended_at is not None:
        status = (f"**ended** {_utc(ended_at, True)}: {run.get('end_reason') or '?'}, "
                  f"exit code {run.get('exit_code')}")
        dur = ended_at - started_at if started_at else None
    elif live:
        status = f"**running** (report taken {_utc(now, True)})"
        dur = now - started_at if started_at else None
    else:
        last = events[-1].ts if events else None
        status = (f"**supervisor gone** without ending the run (last event {_utc(last, True)}); "
                  f"`rlsup up` on the config resumes supervision")
        dur = last - started_at if started_at and last else None
    out += [
        f"- Status: {status}",
        f"- Started: {_utc(started_at, True)}; duration {fmt_duration(dur)}",
        f"- Run dir: `{paths.root}`" + (f"; config `{run.get('config')}`" if run.get("config") else ""),
        f"- Host: {run.get('host') or '?'}; supervisor pid {run.get('pid') or '?'}; rlsup {run.get('version') or '?'}",
        "",
    ]
    try:
        rd: Any = diagnose_run(paths.root)
    except (OSError, ValueError) as e:
        rd = e
    out += ["## Summary", "", _summary(st, attempts, waited(rd) if not isinstance(rd, Exception) else None), ""]
    # a run that ended well can still have had a root cause worth naming (a hang, a false success, a crash
    # it recovered from): the section is there whenever the run diagnosis names one
    out += _root_cause_section(rd)
    out += _components_table(st, attempts)
    out += _flags_section(events)
    out += _attempts_section(paths, st, attempts)
    out += _resources_section(st, attempts)
    out += _checkpoints_section(st, attempts, cfg, paths)
    out += _next_steps(st, attempts, events)
    out += _timeline(events, started_at)
    return "\n".join(out).rstrip() + "\n"


def _root_cause_section(rd: Any) -> list[str]:
    """The run's root cause and the symptoms it caused elsewhere (``rd``: the run diagnosis, or why there is none)."""
    if isinstance(rd, Exception):
        return ["## Root cause", "", f"Could not read the run for a root cause: {rd}", ""]
    rc = rd.root_cause
    if rc is None:
        return []
    when = f" at {_utc(rc.ts)}" if rc.ts is not None else ""
    att = f" (attempt {rc.attempt})" if rc.attempt else ""
    text = f"**{rc.component}** failed{' first' if rd.root_first else ''}{when}{att}: {rc.summary}."
    if rd.recurrences:
        text += f" It failed the same way {_times(rd.recurrences)} more after restarts."
    out = ["## Root cause", "", text]
    if hint := root_hint(rd):
        out += ["", f"What to do: {hint}"]
    if rd.independent:
        out += ["", "Independently of it:", ""]
        for f in rd.independent[:5]:
            rec = " (recovered)" if f.recovered_ts is not None else ""
            out.append(f"- {f.component} at {_utc(f.ts)}: {f.summary}{rec}")
    if rd.symptoms:
        out += ["", "What it caused elsewhere:", ""]
        for sym in rd.symptoms:
            parts, span = sym.extent()
            out.append(f"- {sym.component}: {sym.summary} ({', '.join(parts) or 'seen'}{span})")
    return out + [""]


def _exit_after(a: Attempt) -> str:
    """'killed by SIGKILL after 1.4s' for an attempt that ended."""
    e = a.exited
    return f"{a.exit_text()} after {fmt_duration(e.uptime_s if e else None)}"


def _components_table(st: dict[str, Any], attempts: dict[str, list[Attempt]]) -> list[str]:
    out = ["## Components", "", "| component | state | attempts | failures | step | last exit |",
           "| --- | --- | --- | --- | --- | --- |"]
    for n, c in st["components"].items():
        atts = attempts.get(n, [])
        lx = _exit_after(atts[-1]) if atts and atts[-1].ended else "-"
        out.append(f"| {n} | {c.get('state')} | {len(atts)} | {sum(a.judged_failed for a in atts)} | {step_text(c)} "
                   f"| {_cell(lx)} |")
    return out + [""]


def _flag_entry(fs: list[Record]) -> list[str]:
    """One (component, type) of flags: the latest, which says the most; earlier ones counted."""
    rec = fs[-1]
    assert isinstance(f := rec.event, FlagRaised)
    out = [f"### {f.type} on {rec.component or 'run'} at {_utc(rec.ts)}", ""]
    if len(fs) > 1:
        out += [f"_Raised {len(fs)} times, first at {_utc(fs[0].ts)}; the latest:_", ""]
    out += [f.message, ""]
    if f.action:
        out += [f"Action: {f.action}", ""]
    if ev := [str(x) for x in f.evidence][:MAX_EVIDENCE]:
        out += _code(ev) + [""]
    return out


def _flags_section(events: list[Record]) -> list[str]:
    groups: dict[tuple[str | None, str], list[Record]] = {}
    for r in events:
        if isinstance(r.event, FlagRaised):
            groups.setdefault((r.component, r.event.type), []).append(r)
    if not groups:
        return ["## Flags", "", "None raised.", ""]
    out = ["## Flags", ""]
    for fs in groups.values():
        out += _flag_entry(fs)
    cleared = [f"- {_utc(r.ts)} {r.component}: {r.event.type} cleared ({r.event.message})"
               for r in events if isinstance(r.event, FlagCleared)]
    return out + cleared + ([""] if cleared else [])


def _attempt_row(a: Attempt) -> str:
    e = a.exited
    res = a.started.resume if a.started else None
    num = f"{a.attempt}" + (f" (resumed @ step {res.step})" if res else "")
    d = a.diagnosis
    diag = "-" if not e else ("ok" if d.category == "none" else f"{d.category}: {d.summary}")
    step = "-" if not e or e.step is None else e.step
    return (f"| {_cell(num)} | {_utc(a.started_at)} | {_utc(a.ready_at) if a.ready_at else '-'} | "
            f"{_utc(a.ended_at) if e else '-'} | {fmt_duration(e.uptime_s) if e else '-'} | "
            f"{a.exit_text()} | {step} | {_cell(diag)} |")


def _attempts_section(paths: RunPaths, st: dict[str, Any], attempts: dict[str, list[Attempt]]) -> list[str]:
    out = ["## Attempts", ""]
    for name, atts in attempts.items():
        out += [f"### {name} ({st['components'].get(name, {}).get('state')})", ""]
        first = atts[0].started
        if first is not None and first.command:
            out += [f"Command: `{shlex.join(first.command)}`", ""]
        out += ["| # | started | ready | ended | uptime | exit | step | diagnosis |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |", *map(_attempt_row, atts), "",
                *_failure_details(paths, name, atts)]
    if len(out) == 2:
        out += ["No component was started.", ""]
    return out


def _failure_details(paths: RunPaths, name: str, atts: list[Attempt]) -> list[str]:
    """Each failed attempt's exit and diagnosis; runs of the same failure collapse to one line."""
    out: list[str] = []
    for _, (first, *same) in groupby((a for a in atts if a.judged_failed), key=_failure_key):
        out += _failure_block(paths, name, atts, first)
        if same:
            nums = f"{same[0].attempt}" if len(same) == 1 else f"{same[0].attempt}-{same[-1].attempt}"
            word = "Attempt" if len(same) == 1 else "Attempts"
            out += [f"**{word} {nums}**: the same failure as attempt {first.attempt} ({_failure_text(first)}).", ""]
    return out


def _failure_block(paths: RunPaths, name: str, atts: list[Attempt], a: Attempt) -> list[str]:
    """One failed attempt: its exit, diagnosis, what rlsup did next, and its evidence."""
    d = a.diagnosis
    out = [f"**Attempt {a.attempt}**: {_exit_after(a)}" + (f" at step {a.step}" if a.step is not None else ""), "",
           f"- Category: `{d.category}`"]
    out += [f"- {label}: {value}" for label, value in (
        ("Summary", d.summary), ("Exception", d.exception and f"`{_cell(d.exception)}`"),
        ("Location", d.location and f"`{d.location}`")) if value]
    if a.outcome is not None:
        out.append(f"- Then: {describe(a.outcome)}")
    if res := (a.exit.extra.get("resources") if a.exit is not None else None):
        out.append(f"- Resources at exit: {_resources_text(res)}")
    out.append("")
    if not (ev := list(d.evidence)[-MAX_EVIDENCE:]) and (ev := _attempt_tail(paths, name, atts, a)):
        out += [f"No failure text was recognised; the last lines of attempt {a.attempt}'s output "
                f"(`rlsup logs {name} --attempt {a.attempt}`):", ""]
    if ev:
        out += _code(ev) + [""]
    return out


def _failure_key(a: Attempt) -> tuple[Any, ...]:
    """What makes two failures the same: category, exception and location, and the last evidence line (the
    log tail of a crash loop accumulates, so whole evidence lists differ while the failure does not)."""
    d = a.diagnosis
    return d.category, d.exception, d.location, d.evidence[-1] if d.evidence else None, a.exit_text()


def _attempt_tail(paths: RunPaths, name: str, atts: list[Attempt], a: Attempt) -> list[str]:
    """The last lines of attempt ``a``'s own output (never another attempt's), by the range its
    ``started`` event recorded; journals without ranges: the log's tail, for the latest attempt only."""
    k = atts.index(a)
    start, *end = [mark_of(x.started) if x.started else None for x in atts[k:k + 2]]  # its start, the next's
    if start is None:
        return _log_tail(paths, name) if a is atts[-1] else []
    data, _partial = read_bytes(paths.log(name), start, end[0] if end else None, max_bytes=16384)
    return [ln for ln in lines_of(data) if ln.strip()][-LOG_TAIL_LINES:]


def _log_tail(paths: RunPaths, name: str) -> list[str]:
    """The log's last non-blank lines (from its last 16 KiB), each ``\r`` redraw a line of its own."""
    try:
        tail = last_lines(paths.log(name), LOG_TAIL_LINES, max_bytes=16384, skip_blank=True)
    except OSError:
        return []
    # Every non-blank line gives at least one non-blank piece, so these are the same last lines as
    # splitting the whole 16 KiB at every line boundary.
    return [ln for line in tail for ln in line.splitlines() if ln.strip()][-LOG_TAIL_LINES:]


def _num(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, float) else "?" if v is None else str(v)


def _resources_text(res: Mapping[str, Any]) -> str:
    def text(v: Any) -> Any:
        return f"{v:.1f}" if isinstance(v, float) else json.dumps(v, default=str)[:200] if isinstance(
            v, (dict, list)) else v
    return ", ".join(f"{k} {text(v)}" for k, v in res.items())


def _resources_section(st: dict[str, Any], attempts: dict[str, list[Attempt]]) -> list[str]:
    out = ["## Resources", ""]
    per_crash = [(a, a.exit.extra["resources"]) for atts in attempts.values() for a in atts
                 if a.judged_failed and a.exit is not None and a.exit.extra.get("resources")]
    if per_crash:
        out += ["Around each crash (from the `exited` events):", "",
                *(f"- {a.component} attempt {a.attempt} at {_utc(a.ended_at)}: {_resources_text(res)}"
                  for a, res in per_crash), ""]
    host = st.get("host") or {}
    gpus = st.get("gpus") or []
    if not host and not gpus:
        return out + ["No resource figures were recorded (state.json has no host or GPU sample).", ""]
    out += ["Last sample in state.json (the end of the run, not the moment of each crash):", ""]
    if host:
        mem = (f"{host.get('mem_used_mb', 0) / 1024:.1f} / {host.get('mem_total_mb', 0) / 1024:.1f} GiB"
               if host.get("mem_total_mb") else "?")
        out.append(f"- Host: CPU {host.get('cpu_pct', '?')}% of {host.get('cpu_count', '?')} cores, memory {mem}, "
                   f"load {_num(host.get('load1'))}")
    for g in gpus:
        used, tot = g.get("mem_used_mb"), g.get("mem_total_mb")
        mem = f"{used / 1024:.1f} / {tot / 1024:.1f} GiB" if used is not None and tot else "?"
        procs = ", ".join(f"pid {p.get('pid')} {p.get('used_mb', 0) / 1024:.1f} GiB" for p in g.get("processes") or [])
        out.append(f"- GPU {g.get('index')} {g.get('name') or ''}: util {g.get('util_pct', '?')}%, memory {mem}"
                   + (f", {g.get('temp_c')} °C" if g.get("temp_c") is not None else "")
                   + (f"; processes: {procs}" if procs else ""))
    return out + [""]


def _checkpoints_section(st: dict[str, Any], attempts: dict[str, list[Attempt]], cfg: dict[str, Any] | None,
                         paths: RunPaths) -> list[str]:
    rows = []
    comps_cfg = (cfg or {}).get("components") or {}
    for n, c in st["components"].items():
        ck = c.get("checkpoint")
        resumes = [r for a in attempts.get(n, []) if a.started and (r := a.started.resume)]
        found = _discover(comps_cfg.get(n), paths)
        if ck:
            rows.append(f"- {n}: {ck if isinstance(ck, str) else json.dumps(ck, default=str)}")
        elif found:
            rows.append(f"- {n}: step {found[0]} at `{found[1]}` (found on disk)")
        elif resumes:
            rows.append(f"- {n}: last resumed from step {resumes[-1].step} (`{resumes[-1].checkpoint}`)")
        elif isinstance(comps_cfg.get(n), dict) and comps_cfg[n].get("resume"):
            rows.append(f"- {n}: none found")
        if resumes and (ck or found):
            rows.append(f"  - last resumed from step {resumes[-1].step} (`{resumes[-1].checkpoint}`)")
    return ["## Latest checkpoints", "", *rows, ""] if rows else []


def _discover(ccfg: Any, paths: RunPaths) -> tuple[int, str] | None:
    """The newest complete checkpoint of a component whose config has ``resume``; read-only."""
    if not isinstance(ccfg, dict) or not isinstance(ccfg.get("resume"), dict):
        return None
    r = ccfg["resume"]
    root = r.get("checkpoints")
    if not isinstance(root, str):
        return None
    root = root.replace("${RLSUP_RUN_DIR}", str(paths.root))
    if "${" in root:
        return None
    try:
        found = discover(root, r.get("layout") or "auto", step_pattern=r.get("step_pattern"))
    except Exception:
        return None
    return None if found.latest is None else (found.latest.step, found.latest.path)


# A flag's advice covers the category's generic one (a repeated AttributeError needs one fix).
_COVERED = {"repeated_error": {"python_exception", "unknown"}, "step_crash": {"python_exception"},
            "crash_loop": {"unknown"}}


def _advice_keys(attempts: dict[str, list[Attempt]], events: list[Record]) -> list[tuple[str, str, str | None]]:
    """(advice key, component, location) in the order to show: flags first, then each failed
    attempt's category where no flag of the component covers it; each pair once."""
    keys: list[tuple[str, str, str | None]] = []
    for r in events:
        if isinstance(r.event, FlagRaised) and r.component:
            atts = attempts.get(r.component) or []
            keys.append((r.event.type, r.component, atts[-1].diagnosis.location if atts else None))
    flagged = [(k, n) for k, n, _ in keys if k in NEXT_STEPS]
    for name, atts in attempts.items():
        skip = set().union(*(_COVERED.get(k, set()) for k, n in flagged if n == name))
        keys += [(a.diagnosis.category, name, a.diagnosis.location) for a in atts
                 if a.judged_failed and a.diagnosis.category not in skip]
    first: dict[tuple[str, str], str | None] = {}
    for key, name, loc in keys:
        if key in NEXT_STEPS:
            first.setdefault((key, name), loc)
    return [(key, name, loc) for (key, name), loc in first.items()]


def _advice(st: dict[str, Any], atts: list[Attempt], key: str, name: str, loc: str | None) -> str:
    at = f" at `{loc}`" if loc else ""
    recovered = bool(atts) and not atts[-1].judged_failed and st["components"].get(name, {}).get("state") != "fatal"
    pre = "recovered by restarting; to keep it from recurring: " if recovered else ""
    return f"- **{name}** ({key}): {pre}" + NEXT_STEPS[key].format(name=name, at=at, loc=loc or "?")


def _next_steps(st: dict[str, Any], attempts: dict[str, list[Attempt]], events: list[Record]) -> list[str]:
    items = [_advice(st, attempts.get(name) or [], key, name, loc)
             for key, name, loc in _advice_keys(attempts, events)]
    fatal = [n for n, c in st["components"].items() if c.get("state") == "fatal"]
    if not items and not fatal:
        return ["## Next steps", "", "Nothing failed that needs action.", ""]
    return ["## Next steps", "", *items, *(f"- `rlsup start {n}` once the cause is fixed (it is fatal: rlsup will not "
                                           "restart it by itself)." for n in fatal if attempts.get(n)), ""]


def _timeline(events: list[Record], t0: float | None) -> list[str]:
    rows = [r for r in events if r.kind not in ("progress", "gpu")]
    out = ["## Timeline", "", "| time (UTC) | +s | component | event |", "| --- | --- | --- | --- |"]
    cut, head = max(0, len(rows) - MAX_TIMELINE), MAX_TIMELINE // 5
    shown: list[Record | None] = [*rows[:head], None, *rows[head + cut:]] if cut else list(rows)
    for r in shown:
        if r is None:
            out.append(f"| ... | | | {cut} more events in events.jsonl |")
            continue
        rel = f"{r.ts - t0:.1f}" if t0 is not None else ""
        out.append(f"| {_utc(r.ts)} | {rel} | {r.component or 'rlsup'} | {_cell(describe(r))} |")
    return out + [""]
