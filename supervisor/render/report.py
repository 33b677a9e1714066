"""``rlsup report``: a Markdown incident report of a run, from what the run left on disk.

Reads only files (``events.jsonl``, ``state.json``, the logs, the config named in the journal), so
it works on a live run and on one whose supervisor died long ago. The output is deterministic
given ``now`` (times in UTC) and passes through :mod:`.redact` as a whole: no secret from the
environment, the config's ``env``/``env_file`` or a ``--token``-style argument appears in it.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import state as state_mod
from ..archive import read_config, redactor_for
from ..events import describe, fmt_duration
from ..journal import read_events
from ..rundir import RunPaths, is_locked
from .advice import NEXT_STEPS

MAX_TIMELINE = 200
MAX_EVIDENCE = 14
LOG_TAIL_LINES = 12



@dataclass
class Attempt:
    component: str
    attempt: int
    started: dict[str, Any] | None = None
    ready_ts: float | None = None
    exited: dict[str, Any] | None = None
    outcome: dict[str, Any] | None = None  # completed / fatal / stopped / restart_scheduled after the exit
    flags: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        e = self.exited
        if e is None:
            return False
        if (self.outcome or {}).get("kind") == "stopped":
            return False
        return bool(e.get("signal")) or (e.get("exit_code") not in (0, None)) or self.false_success is not None

    @property
    def false_success(self) -> dict[str, Any] | None:
        """The ``false_success`` flag of this attempt: an exit 0 before the last step is a failure."""
        return next((f for f in self.flags if f.get("type") == "false_success"), None)

    @property
    def diagnosis(self) -> dict[str, Any]:
        return (self.exited or {}).get("diagnosis") or {}


def build_report(run_dir: Path | str, *, now: float | None = None, env: Mapping[str, str] | None = None,
                 config_path: Path | str | None = None) -> str:
    """The Markdown incident report of the run in ``run_dir``.

    ``now`` (default: the clock) only matters for a run still going; ``env`` (default: this
    process's environment) and the run's config (``config_path``, default the one named in the
    journal, if it is still readable) supply the secret values to mask. Raises
    ``FileNotFoundError`` when ``run_dir`` holds neither a journal nor a state file.
    """
    paths = RunPaths(Path(run_dir))
    if not paths.events.exists() and not paths.state.exists():
        raise FileNotFoundError(f"no events.jsonl or state.json in {paths.root}: not a run directory")
    now = time.time() if now is None else now
    events = list(read_events(paths.events))
    snap = _read_json(paths.state) or {}
    st = _reduce(events, snap)
    run = st["run"]
    cfg_path = Path(config_path) if config_path else (Path(run["config"]) if run.get("config") else None)
    cfg = read_config(cfg_path)
    red = redactor_for(cfg, cfg_path, env)
    attempts = _attempts(events)
    md = _render(paths, events, st, snap, attempts, cfg, cfg_path, now)
    return red.redact_text(md)


# ---------------------------------------------------------------------------------------- reading


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _reduce(events: list[dict[str, Any]], snap: dict[str, Any]) -> dict[str, Any]:
    """State from the journal; state.json supplies what the journal lacks (gauges, checkpoint)."""
    st = state_mod.initial(dict(snap.get("run") or {}), list((snap.get("components") or {}).keys()))
    for e in events:
        state_mod.apply(st, e)
    for name, c in (snap.get("components") or {}).items():
        mine = st["components"].setdefault(name, state_mod.new_component())
        # Progress is a gauge: the final state has the final step (a resumed attempt's journal entry
        # says only where it started); an exit seen later than the last state write still counts.
        for k in ("step", "total", "rate", "eta_s", "metrics", "checkpoint"):
            if c.get(k) is not None:
                mine[k] = c[k]
        last_exit_step = (mine.get("last_exit") or {}).get("step")
        if last_exit_step is not None and (mine.get("step") is None or last_exit_step > mine["step"]):
            mine["step"] = last_exit_step
        if not events:
            mine.update({k: v for k, v in c.items() if k in mine})
    st["gpus"] = snap.get("gpus") or []
    st["host"] = snap.get("host")
    return st


def _attempts(events: list[dict[str, Any]]) -> dict[str, list[Attempt]]:
    out: dict[str, list[Attempt]] = {}
    cur: dict[str, Attempt] = {}
    for e in events:
        name = e.get("component")
        if not name:
            continue
        k = e.get("kind")
        if k == "started":
            new = Attempt(name, int(e.get("attempt") or len(out.get(name, [])) + 1), started=e)
            out.setdefault(name, []).append(new)
            cur[name] = new
            continue
        a = cur.get(name)
        if a is None:
            continue
        if k == "ready":
            a.ready_ts = e.get("ts")
        elif k == "exited":
            a.exited = e
        elif k in ("completed", "fatal", "stopped", "restart_scheduled") and a.exited is not None and a.outcome is None:
            a.outcome = e
        elif k == "flag":
            a.flags.append(e)
    return out


# ---------------------------------------------------------------------------------------- formatting


def _utc(ts: float | None, full: bool = False) -> str:
    if ts is None:
        return "?"
    fmt = "%Y-%m-%d %H:%M:%S UTC" if full else "%H:%M:%S"
    return time.strftime(fmt, time.gmtime(ts))




def _cell(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ").replace("`", "'")


def _code(lines: list[str] | tuple[str, ...]) -> list[str]:
    body = [str(x).replace("```", "'''") for x in lines]
    return ["```", *body, "```"]


def _short_loc(loc: str | None) -> str | None:
    if not loc:
        return None
    path, _, line = loc.rpartition(":")
    return f"{os.path.basename(path)}:{line}" if path else loc


def _exit_text(e: dict[str, Any] | None) -> str:
    if e is None:
        return "running"
    if e.get("signal"):
        return f"killed by {e['signal']}"
    return f"exit {e.get('exit_code')}"


def _what(d: dict[str, Any]) -> str:
    """'AttributeError at train.py:12' / 'cuda_oom' for one diagnosis."""
    exc = d.get("exception")
    what = exc.split(":", 1)[0].strip() if exc else (d.get("category") or "unknown failure")
    loc = _short_loc(d.get("location"))
    return f"{what} at {loc}" if loc else what


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _failure_text(a: Attempt) -> str:
    """How one attempt failed, in a few words: 'AttributeError at train.py:12', 'SIGKILL'."""
    d = a.diagnosis
    e = a.exited or {}
    if a.false_success is not None:
        return f"a false success ({a.false_success.get('message')})"
    if d.get("exception") or d.get("location"):
        return _what(d)
    if e.get("signal") and d.get("category") in (None, "killed", "unknown"):
        return str(e["signal"])
    if d.get("category") in (None, "unknown"):
        return f"no recognised error (exit {e.get('exit_code')})"
    return str(d.get("category"))


def _hangs(name: str, atts: list[Attempt]) -> str | None:
    """'trainer hung once (no new step for 20s (last step 29, stall_after 20s))' from its stall flags."""
    stalls = [f for a in atts for f in a.flags if f.get("type") == "stall"]
    if not stalls:
        return None
    return f"{name} hung {_times(len(stalls))} ({stalls[-1].get('message') or 'no new step'})"


def _component_summary(name: str, atts: list[Attempt], cstate: dict[str, Any]) -> str | None:
    failed = [a for a in atts if a.failed]
    hung = _hangs(name, atts)
    if not failed:
        if hung is None:
            return None
        state = cstate.get("state")
        return hung + (f"; now {state}" if state else "")
    sigs = Counter(_failure_text(a) for a in failed)
    verb = "was killed" if all(a.exited and a.exited.get("signal") for a in failed) else "crashed"
    prep = "by" if verb == "was killed" else "with"
    if len(sigs) == 1:
        same = f"{prep} the same " if len(failed) > 1 else f"{prep} "
        text = f"{name} {verb} {_times(len(failed))} {same}{_failure_text(failed[-1])}"
    else:
        top = ", ".join(_failure_text(a) for a in failed[-3:])
        text = f"{name} {verb} {_times(len(failed))} ({len(sigs)} different failures; latest: {top})"
    if all(a.ready_ts is None for a in failed) and len(failed) > 1:
        text += ", each time before becoming ready"
    state = cstate.get("state")
    if state == "fatal":
        reason = str(cstate.get("reason") or "")
        kind = reason.split(":", 1)[0] if ":" in reason[:40] else reason
        text += "; stopped restarting" + (f" ({kind[:100]})" if kind else "")
    elif not atts[-1].failed:
        text += "; recovered" + (f" ({state})" if state in ("completed", "running") else "")
    elif state:
        text += f"; now {state}"
    if hung is not None:
        text += f"; {hung}"
    return text


def _summary(st: dict[str, Any], attempts: dict[str, list[Attempt]]) -> str:
    parts = []
    for name, atts in attempts.items():
        s = _component_summary(name, atts, st["components"].get(name, {}))
        if s:
            parts.append(s)
    never = [n for n, c in st["components"].items()
             if c.get("state") == "fatal" and not attempts.get(n)]
    if never:
        parts.append(f"{', '.join(never)} never started (a dependency was fatal)")
    run = st["run"]
    if run.get("ended_at"):
        end = f"the run ended: {run.get('end_reason') or '?'} (exit code {run.get('exit_code')})"
    else:
        end = "the run is still going"
    if not parts:
        return f"No component failed; {end}."
    text = "; ".join(parts) + f"; {end}."
    return text[0].upper() + text[1:]


def _render(paths: RunPaths, events: list[dict[str, Any]], st: dict[str, Any], snap: dict[str, Any],
            attempts: dict[str, list[Attempt]], cfg: dict[str, Any] | None, cfg_path: Path | None,
            now: float) -> str:
    run = st["run"]
    name = run.get("name") or paths.root.name
    out: list[str] = [f"# Incident report: {name}", ""]
    started_at = run.get("started_at") or (events[0].get("ts") if events else None)
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
        last = events[-1].get("ts") if events else None
        status = (f"**supervisor gone** without ending the run (last event {_utc(last, True)}); "
                  f"`rlsup up` on the config resumes supervision")
        dur = last - started_at if started_at and last else None
    out += [
        f"- Status: {status}",
        f"- Started: {_utc(started_at, True)}; duration {fmt_duration(dur)}",
        f"- Run dir: `{paths.root}`" + (f"; config `{run.get('config')}`" if run.get("config") else ""),
        f"- Host: {run.get('host') or '?'}; supervisor pid {run.get('pid') or '?'}; rlsup {run.get('version') or '?'}",
        "",
        "## Summary",
        "",
        _summary(st, attempts),
        "",
    ]
    # a run that ended well can still have had a root cause worth naming (a hang, a false success, a crash
    # it recovered from): the section is there whenever the run diagnosis names one
    out += _root_cause_section(paths)
    out += _components_table(st, attempts)
    out += _flags_section(events)
    out += _attempts_section(paths, st, attempts)
    out += _resources_section(st, attempts)
    out += _checkpoints_section(st, attempts, cfg, cfg_path, paths)
    out += _next_steps(st, attempts, events)
    out += _timeline(events, started_at)
    return "\n".join(out).rstrip() + "\n"


def _root_cause_section(paths: RunPaths) -> list[str]:
    """The run's root cause across components, with the symptoms it caused elsewhere."""
    from ..diagnosis.run import diagnose_run

    try:
        rd = diagnose_run(paths.root)
    except (OSError, ValueError) as e:
        return ["## Root cause", "", f"Could not read the run for a root cause: {e}", ""]
    rc = rd.root_cause
    if rc is None:
        return []
    when = f" at {_utc(rc.ts)}" if rc.ts is not None else ""
    att = f" (attempt {rc.attempt})" if rc.attempt else ""
    text = f"**{rc.component}** failed{' first' if rd.root_first else ''}{when}{att}: {rc.summary}."
    if rd.recurrences:
        text += f" It failed the same way {_times(rd.recurrences)} more after restarts."
    hint = (rc.diagnosis or {}).get("hint")
    out = ["## Root cause", "", text]
    if hint:
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


def _components_table(st: dict[str, Any], attempts: dict[str, list[Attempt]]) -> list[str]:
    out = ["## Components", "", "| component | state | attempts | failures | step | last exit |",
           "| --- | --- | --- | --- | --- | --- |"]
    for n, c in st["components"].items():
        atts = attempts.get(n, [])
        step = c.get("step")
        total = c.get("total")
        stp = "-" if step is None else (f"{step}/{total}" if total else str(step))
        last = atts[-1].exited if atts else None
        lx = "-" if last is None else f"{_exit_text(last)} after {fmt_duration(last.get('uptime_s'))}"
        out.append(f"| {n} | {c.get('state')} | {len(atts)} | {sum(a.failed for a in atts)} | {stp} | {_cell(lx)} |")
    return out + [""]


def _flags_section(events: list[dict[str, Any]]) -> list[str]:
    flags = [e for e in events if e.get("kind") == "flag"]
    if not flags:
        return ["## Flags", "", "None raised.", ""]
    out = ["## Flags", ""]
    groups: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for f in flags:
        groups.setdefault((f.get("component"), f.get("type")), []).append(f)
    # One entry per (component, type): the latest, which says the most; earlier ones counted.
    for (comp, ftype), fs in groups.items():
        f = fs[-1]
        out.append(f"### {ftype} on {comp or 'run'} at {_utc(f.get('ts'))}")
        out.append("")
        if len(fs) > 1:
            out.append(f"_Raised {len(fs)} times, first at {_utc(fs[0].get('ts'))}; the latest:_")
            out.append("")
        out.append(str(f.get("message") or ""))
        out.append("")
        if f.get("action"):
            out.append(f"Action: {f['action']}")
            out.append("")
        ev = [str(x) for x in (f.get("evidence") or [])][:MAX_EVIDENCE]
        if ev:
            out += _code(ev) + [""]
    cleared = [e for e in events if e.get("kind") == "flag_cleared"]
    for e in cleared:
        out.append(f"- {_utc(e.get('ts'))} {e.get('component')}: {e.get('type')} cleared ({e.get('message', '')})")
    if cleared:
        out.append("")
    return out


def _attempts_section(paths: RunPaths, st: dict[str, Any], attempts: dict[str, list[Attempt]]) -> list[str]:
    out = ["## Attempts", ""]
    for name, atts in attempts.items():
        c = st["components"].get(name, {})
        out += [f"### {name} ({c.get('state')})", ""]
        cmd = (atts[0].started or {}).get("command")
        if cmd:
            out += [f"Command: `{shlex.join(cmd) if isinstance(cmd, list) else cmd}`", ""]
        out += ["| # | started | ready | ended | uptime | exit | step | diagnosis |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for a in atts:
            s = a.started or {}
            e = a.exited
            res = s.get("resume")
            num = f"{a.attempt}" + (f" (resumed @ step {res.get('step')})" if res else "")
            d = a.diagnosis
            diag = "-" if not e else ("ok" if d.get("category") == "none" else f"{d.get('category')}: {d.get('summary')}")
            step = "-" if not e or e.get("step") is None else e.get("step")
            out.append(f"| {_cell(num)} | {_utc(s.get('ts'))} | {_utc(a.ready_ts) if a.ready_ts else '-'} | "
                       f"{_utc(e.get('ts')) if e else '-'} | {fmt_duration(e.get('uptime_s')) if e else '-'} | "
                       f"{_exit_text(e)} | {step} | {_cell(diag)} |")
        out.append("")
        out += _failure_details(paths, name, atts)
    if len(out) == 2:
        out += ["No component was started.", ""]
    return out


def _failure_details(paths: RunPaths, name: str, atts: list[Attempt]) -> list[str]:
    """Each failed attempt's exit and diagnosis; runs of the same failure collapse to one line."""
    out: list[str] = []
    prev: Attempt | None = None
    same_run: list[int] = []

    def flush_same() -> None:
        if same_run and prev is not None:
            nums = f"{same_run[0]}" if len(same_run) == 1 else f"{same_run[0]}-{same_run[-1]}"
            word = "Attempt" if len(same_run) == 1 else "Attempts"
            out.extend([f"**{word} {nums}**: the same failure as attempt {prev.attempt} ({_failure_text(prev)}).", ""])
            same_run.clear()

    for a in atts:
        if not a.failed:
            continue
        if prev is not None and _same_failure(prev, a):
            same_run.append(a.attempt)
            continue
        flush_same()
        prev = a
        d = a.diagnosis
        out.append(f"**Attempt {a.attempt}**: {_exit_text(a.exited)} after "
                   f"{fmt_duration((a.exited or {}).get('uptime_s'))}"
                   + (f" at step {step}" if (step := (a.exited or {}).get("step")) is not None else ""))
        out.append("")
        out.append(f"- Category: `{d.get('category')}`")
        if d.get("summary"):
            out.append(f"- Summary: {d['summary']}")
        if d.get("exception"):
            out.append(f"- Exception: `{_cell(d['exception'])}`")
        if d.get("location"):
            out.append(f"- Location: `{d['location']}`")
        outcome = a.outcome or {}
        if outcome:
            out.append(f"- Then: {describe(outcome)}")
        res = (a.exited or {}).get("resources")
        if res:
            out.append(f"- Resources at exit: {_resources_text(res)}")
        out.append("")
        ev = list(d.get("evidence") or [])[-MAX_EVIDENCE:]
        if not ev:
            ev = _attempt_tail(paths, name, atts, a)
            if ev:
                out.append(f"No failure text was recognised; the last lines of attempt {a.attempt}'s output "
                           f"(`rlsup logs {name} --attempt {a.attempt}`):")
                out.append("")
        if ev:
            out += _code(ev) + [""]
    flush_same()
    return out


def _same_failure(a: Attempt, b: Attempt) -> bool:
    """Same category, exception and location, and the same last evidence line: the log tail of a
    crash loop accumulates, so whole evidence lists differ while the failure does not."""
    da, db = a.diagnosis, b.diagnosis
    key = ("category", "exception", "location")
    if any(da.get(k) != db.get(k) for k in key):
        return False
    ea, eb = list(da.get("evidence") or []), list(db.get("evidence") or [])
    return (ea[-1] if ea else None) == (eb[-1] if eb else None) and _exit_text(a.exited) == _exit_text(b.exited)


def _attempt_tail(paths: RunPaths, name: str, atts: list[Attempt], a: Attempt) -> list[str]:
    """The last lines of attempt ``a``'s own output (never another attempt's), by the range its
    ``started`` event recorded; journals without ranges: the log's tail, for the latest attempt only."""
    from ..attemptlog import lines_of, mark_of, read_bytes

    start = mark_of(a.started or {})
    if start is None:
        return _log_tail(paths, name) if a is atts[-1] else []
    k = atts.index(a)
    end = mark_of(atts[k + 1].started or {}) if k + 1 < len(atts) else None
    data, _partial = read_bytes(paths.log(name), start, end, max_bytes=16384)
    return [ln for ln in lines_of(data) if ln.strip()][-LOG_TAIL_LINES:]


def _log_tail(paths: RunPaths, name: str) -> list[str]:
    try:
        with open(paths.log(name), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    return [ln for ln in lines if ln.strip()][-LOG_TAIL_LINES:]


def _num(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, float) else "?" if v is None else str(v)


def _resources_text(res: Mapping[str, Any]) -> str:
    parts = []
    for k, v in res.items():
        if isinstance(v, float):
            v = f"{v:.1f}"
        if isinstance(v, (dict, list)):
            v = json.dumps(v, default=str)[:200]
        parts.append(f"{k} {v}")
    return ", ".join(parts)


def _resources_section(st: dict[str, Any], attempts: dict[str, list[Attempt]]) -> list[str]:
    out = ["## Resources", ""]
    per_crash = [(a, a.exited) for atts in attempts.values() for a in atts
                 if a.failed and a.exited and a.exited.get("resources")]
    if per_crash:
        out += ["Around each crash (from the `exited` events):", ""]
        for a, ex in per_crash:
            out.append(f"- {a.component} attempt {a.attempt} at {_utc(ex.get('ts'))}: {_resources_text(ex['resources'])}")
        out.append("")
    host = st.get("host") or {}
    gpus = st.get("gpus") or []
    if not host and not gpus:
        out += ["No resource figures were recorded (state.json has no host or GPU sample).", ""]
        return out
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
                         cfg_path: Path | None, paths: RunPaths) -> list[str]:
    rows = []
    comps_cfg = (cfg or {}).get("components") or {}
    for n, c in st["components"].items():
        ck = c.get("checkpoint")
        resumes = [r for a in attempts.get(n, []) if a.started and (r := a.started.get("resume"))]
        found = _discover(comps_cfg.get(n), paths)
        if ck:
            rows.append(f"- {n}: {ck if isinstance(ck, str) else json.dumps(ck, default=str)}")
        elif found:
            rows.append(f"- {n}: step {found[0]} at `{found[1]}` (found on disk)")
        elif resumes:
            r = resumes[-1]
            rows.append(f"- {n}: last resumed from step {r.get('step')} (`{r.get('checkpoint')}`)")
        elif isinstance(comps_cfg.get(n), dict) and comps_cfg[n].get("resume"):
            rows.append(f"- {n}: none found")
        if resumes and (ck or found):
            r = resumes[-1]
            rows.append(f"  - last resumed from step {r.get('step')} (`{r.get('checkpoint')}`)")
    if not rows:
        return []
    return ["## Latest checkpoints", "", *rows, ""]


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
        from ..checkpoints import discover

        found = discover(root, r.get("layout") or "auto", step_pattern=r.get("step_pattern"))
    except Exception:
        return None
    if found.latest is None:
        return None
    return found.latest.step, found.latest.path


def _next_steps(st: dict[str, Any], attempts: dict[str, list[Attempt]], events: list[dict[str, Any]]) -> list[str]:
    items: list[str] = []
    seen: set[tuple[str, str]] = set()

    def add(key: str, name: str, loc: str | None) -> None:
        if (key, name) in seen or key not in NEXT_STEPS:
            return
        seen.add((key, name))
        at = f" at `{loc}`" if loc else ""
        atts = attempts.get(name) or []
        recovered = bool(atts) and not atts[-1].failed and st["components"].get(name, {}).get("state") != "fatal"
        pre = "recovered by restarting; to keep it from recurring: " if recovered else ""
        items.append(f"- **{name}** ({key}): {pre}" + NEXT_STEPS[key].format(name=name, at=at, loc=loc or "?"))

    for f in events:
        if f.get("kind") == "flag" and f.get("component"):
            loc = None
            atts = attempts.get(f["component"]) or []
            if atts:
                loc = atts[-1].diagnosis.get("location")
            add(str(f.get("type")), f["component"], loc)
    # A flag's advice covers the category's generic one (a repeated AttributeError needs one fix).
    covered = {"repeated_error": {"python_exception", "unknown"}, "step_crash": {"python_exception"},
               "crash_loop": {"unknown"}}
    for name, atts in attempts.items():
        skip = set().union(*(covered.get(k, set()) for k, n in seen if n == name))
        for a in atts:
            if a.failed:
                d = a.diagnosis
                cat = str(d.get("category") or "unknown")
                if cat not in skip:
                    add(cat, name, d.get("location"))
    fatal = [n for n, c in st["components"].items() if c.get("state") == "fatal"]
    if not items and not fatal:
        return ["## Next steps", "", "Nothing failed that needs action.", ""]
    out = ["## Next steps", "", *items]
    for n in fatal:
        if not attempts.get(n):
            continue
        out.append(f"- `rlsup start {n}` once the cause is fixed (it is fatal: rlsup will not restart it by itself).")
    return out + [""]


def _timeline(events: list[dict[str, Any]], t0: float | None) -> list[str]:
    rows = [e for e in events if e.get("kind") not in ("progress", "gpu")]
    out = ["## Timeline", "", "| time (UTC) | +s | component | event |", "| --- | --- | --- | --- |"]
    shown = rows
    cut = 0
    if len(rows) > MAX_TIMELINE:
        head = MAX_TIMELINE // 5
        cut = len(rows) - MAX_TIMELINE
        shown = rows[:head] + [{}] + rows[head + cut:]
    for e in shown:
        if not e:
            out.append(f"| ... | | | {cut} more events in events.jsonl |")
            continue
        ts = e.get("ts")
        rel = f"{ts - t0:.1f}" if ts is not None and t0 is not None else ""
        out.append(f"| {_utc(ts)} | {rel} | {e.get('component') or 'rlsup'} | {_cell(describe(e))} |")
    return out + [""]
