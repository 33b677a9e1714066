"""A run read back from its run dir: state, journal and logs, for runs no supervisor owns any more.

:class:`Archive` has the shape the control server serves (:class:`~rlsup.supervisor.run.server.RunView`),
so ``rlsup attach``, ``rlsup bridge`` (and through it SSH attach and the fleet view) show an ended
run exactly as a live one, read-only: every command is refused with what happened and how to
start again. :func:`how_it_ended` says in one line how the last run of a run dir ended.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import socket
import time
from pathlib import Path
from typing import Any

from ..records import state as state_mod
from ..records.events import RunEnded, run_outcome, standing
from ..records.phrases import end_note
from ..records.redact import Redactor
from ..records.version import VERSION
from .attemptlog import lines_of
from .journal import journal_id
from .layout import RunPaths
from .logs import LogRing, Position
from .replay import Replay, read_run

TAIL_BYTES = 4 << 20  # of each component's log, read back into its ring
RING_LINES = 10_000


def how_it_ended(paths: RunPaths, rp: Replay | None = None) -> str | None:
    """``"completed at step 200/200 on 2026-11-22 10:37"``, ``"fatal at step 57 (trainer: ...)"``; None
    if the run dir holds no run that ended (a new dir, or a supervisor that died mid-way)."""
    rp = read_run(paths) if rp is None else rp
    start, end = rp.last_run
    if start is None or end is None or not isinstance(end.event, RunEnded):
        return None
    ended = end.event
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(end.ts))
    comps = rp.final_state()["components"]
    main = _main_component(comps)
    step = ""
    if main is not None:
        c = comps[main]
        if c.get("step") is not None:
            step = f" at step {c['step']}" + (f"/{c['total']}" if c.get("total") else "") + f" ({main})"
    verdict = {"failed": "fatal"}.get(run_outcome(ended), run_outcome(ended))
    root = ended.root or {}
    why = f": {root.get('component')}: {root.get('reason')}" if root.get("component") else (
        "" if verdict == "completed" else f": {ended.reason}")
    if verdict in ("stopped", "preempted"):
        why = f" ({ended.reason})"
    if verdict == "preempted":
        why += standing(ended.checkpoints)
    return f"{verdict}{step} on {when}{why}"


def _main_component(comps: dict[str, Any]) -> str | None:
    with_total = [n for n, c in comps.items() if c.get("total")]
    with_step = [n for n, c in comps.items() if c.get("step") is not None]
    return next(reversed(with_total or with_step), None)


def read_config(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        from ..config.loader import load_yaml  # bounded: an alias bomb cannot blow up the report

        data = load_yaml(path.read_text(encoding="utf-8"), str(path)).data
    except Exception:  # an unreadable or broken config only costs us secrets and checkpoint lookups
        return None
    return data if isinstance(data, dict) else None


def _config_envs(cfg: dict[str, Any] | None, cfg_path: Path | None) -> list[dict[str, str]]:
    """The environments the config sets, each apart: the run's, each component's, its env_file (two
    components may give one name two secrets)."""
    if not cfg:
        return []
    envs = [{str(k): str(v) for k, v in scope["env"].items() if v is not None}
            for scope in [cfg, *((cfg.get("components") or {}).values())]
            if isinstance(scope, dict) and isinstance(scope.get("env"), dict)]
    ef = cfg.get("env_file")
    if isinstance(ef, str) and cfg_path is not None:
        from ..config.loader import parse_env_file

        with contextlib.suppress(Exception):
            envs.append(parse_env_file(cfg_path.parent / ef))  # (an absolute env_file stays itself)
    return envs


def _config_argvs(cfg: dict[str, Any] | None) -> list[list[str]]:
    """The components' command lines (a secret given as an argument is masked everywhere)."""
    out = []
    for c in ((cfg or {}).get("components") or {}).values():
        cmd = c.get("command") if isinstance(c, dict) else None
        if isinstance(cmd, list):
            out.append([str(x) for x in cmd])
        elif isinstance(cmd, str):
            try:
                out.append(shlex.split(cmd))
            except ValueError:
                out.append(cmd.split())
    return out


def redactor_for(cfg: dict[str, Any] | None, cfg_path: Path | None, env: Any = None) -> Redactor:
    """The masking a run had: secrets of its environment, its config's env and env_file, its commands."""
    return Redactor.for_run([dict(os.environ if env is None else env), *_config_envs(cfg, cfg_path)],
                            _config_argvs(cfg))


class Archive:
    """An ended run, served read-only through the control protocol."""

    def __init__(self, run_dir: Path):
        self.paths = RunPaths(Path(run_dir))
        self.subscribers: list[Any] = []
        self.line_listeners: list[Any] = []
        rp = read_run(self.paths)  # the journal, read once
        self.state = rp.final_state()
        self.end = how_it_ended(self.paths, rp)
        config = self.state.get("run", {}).get("config")
        cfg_path = Path(config) if config else None
        redactor = redactor_for(read_config(cfg_path), cfg_path)
        ends = _saved_positions(rp.saved)
        self._rings = {name: _ring_from_log(self.paths.log(name), redactor, ends.get(name))
                       for name in self.state["components"]}
        self._seq = rp.seq

    def snapshot_state(self) -> dict[str, Any]:
        return state_mod.view(self.state, time.time())

    def rings(self) -> dict[str, LogRing]:
        return self._rings

    def redact_lines(self, lines: list[str]) -> list[str]:
        return lines  # masked once, when the rings were read back

    @property
    def journal_seq(self) -> int:
        return self._seq

    def hello(self) -> dict[str, Any]:
        run = self.state.get("run", {})
        return {"pid": os.getpid(), "host": run.get("host") or socket.gethostname(), "name": run.get("name"),
                "run_dir": str(self.paths.root), "config": run.get("config"), "rlsup": VERSION, "ended": True,
                "ended_note": self.describe(), "journal": journal_id(self.paths.events)}

    def describe(self) -> str:
        run = self.state.get("run", {})
        if (ended := end_note(run)) is not None:
            return ended
        from .stranded import last_sign_of_life

        seen = last_sign_of_life(self.paths)
        since = f" since {time.strftime('%H:%M:%S', time.localtime(seen))}" if seen else ""
        return (f"no supervisor: pid {run.get('pid') or '?'} is gone{since} without ending the run; "
                f"`rlsup up {run.get('config') or 'CONFIG'} --run-dir {self.paths.root}` takes it over "
                "(what runs keeps its pid), `rlsup down` ends it")

    def watchers_changed(self) -> None:
        pass  # nothing here is sampled

    def log_pages(self, name: str) -> tuple[Any, Any] | None:
        """The log on disk, tied to the ring's sequence numbers at the end of the last file."""
        from .logpages import LogPages

        ring = self._rings.get(name)
        if ring is None:
            return None
        path = self.paths.log(name)
        pages = self.__dict__.setdefault("_log_pages", {})
        pages.setdefault(name, LogPages(path))  # kept: its index is built once per file
        try:
            st = os.stat(path)
        except OSError:
            return pages[name], Position(None, 0, ring.next_seq)
        return pages[name], Position(st.st_ino, st.st_size, ring.next_seq)

    def command(self, cmd: str, name: str | None = None, by: str = "user", client: str | None = None,
                **args: Any) -> dict[str, Any]:
        config = self.state.get("run", {}).get("config") or "CONFIG"
        if not self.state.get("run", {}).get("ended_at"):  # its supervisor died: take it over, no flag
            return {"ok": False, "error": f"this run has {self.describe()}; it is read-only until then"}
        return {"ok": False, "error": f"this run has {self.describe()}; it is read-only. Start it again with "
                                      f"`rlsup up {config} --resume --run-dir {self.paths.root}` (or --fresh)"}


def _saved_positions(saved: dict[str, Any]) -> dict[str, Position]:
    """Where the last supervisor had read each log to (``state.json``, as read), by component."""
    return {name: pos for name, c in (saved.get("components") or {}).items()
            if (pos := Position.from_dict(c.get("log") if isinstance(c, dict) else None)) and pos.ino is not None}


def _ring_from_log(path: Path, redactor: Redactor, saved: Position | None = None) -> LogRing:
    """The last lines of a log, normalised and masked as the live supervisor would have shown them,
    numbered as the live supervisor numbered them (from ``saved``, its last recorded position in
    this file), so the journal's ``log_seq`` (where each attempt's output starts) points at the same
    lines; without a position in this file the numbering starts at the tail."""
    try:
        st = os.stat(path)
        size = st.st_size
        with open(path, "rb") as f:
            f.seek(max(0, size - TAIL_BYTES))
            data = f.read()
            after = None
            if saved is not None and saved.ino == st.st_ino and saved.offset <= size:
                f.seek(saved.offset)  # lines written after the last record: few, positions are kept up
                after = _count_lines(f)
    except OSError:
        return LogRing(RING_LINES)
    if size > TAIL_BYTES:
        data = data[data.find(b"\n") + 1:]  # start at a line boundary
    lines = lines_of(data)
    first = max(0, saved.seq + after - len(lines)) if after is not None and saved is not None else 0
    ring = LogRing(RING_LINES, first_seq=first)
    ring.extend(redactor.redact_lines(lines))
    return ring


def _count_lines(f: Any) -> int:
    """Lines from ``f``'s position to its end, a last one without a newline included."""
    n, last = 0, b"\n"
    while chunk := f.read(1 << 20):
        n += chunk.count(b"\n")
        last = chunk[-1:]
    return n + (last != b"\n")
