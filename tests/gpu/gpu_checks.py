"""rlsup's GPU path measured on a real NVIDIA GPU, through its commands as a user runs them.

    python tests/gpu/gpu_checks.py --out DIR [--only check,sampler,hygiene,stack]

One figure per item (issue 45), each item bounded by its own deadline so that one hang cannot eat the
run, each result written to DIR/results.jsonl as it comes (and DIR/<item>.* for the details):

  check    `rlsup check` on a config whose inference server asks for more GPU memory than is free
           (the error names the figure) and on one that fits (no error)
  sampler  the NVML sampler for 60 s under a component that takes and frees memory in steps: NVML's
           figure for the process against its own torch.cuda.memory_reserved (MiB), attribution to
           the component, the sampler's CPU cost
  hygiene  a component holding 10 GiB restarted: restart -> next attempt, exit -> start; a grandchild
           left behind holding 2 GiB is ended after the timeout and `gpu_not_released` names it; a
           bystander outside the run holding memory on the same GPU is never signalled
  stack    the reference stack (tests/gpu/stack.yaml: rlsup's trainer, orchestrator and inference
           server on the GPU, bf16 autocast) under `rlsup up` in tmux, the default TUI mode: steps/s,
           peak GPU memory per component, a trainer crash at step 13 resumed from step 10 with the
           same loss at step 11 as before the crash; the TUI's GPU panel captured as text and SVG

Without an NVIDIA GPU every item says so and why (what CI sees), and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
HOLDER = HERE / "holder.py"
PY = sys.executable
ITEMS = ("check", "sampler", "hygiene", "stack")
DEADLINES = {"check": 60, "sampler": 120, "hygiene": 150, "stack": 240}


class Item:
    """One item's results: figures (one summary line), details and problems, written as they come."""

    def __init__(self, name: str, out: Path):
        self.name, self.out = name, out
        self.figures: dict[str, Any] = {}
        self.problems: list[str] = []
        self.deadline = time.monotonic() + DEADLINES[name]

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def fig(self, key: str, value: Any) -> None:
        self.figures[key] = value
        print(f"   {self.name}.{key} = {value}", flush=True)

    def problem(self, text: str) -> None:
        self.problems.append(text)
        print(f"   {self.name}: PROBLEM: {text}", flush=True)

    def path(self, suffix: str) -> Path:
        return self.out / f"{self.name}.{suffix}"


# ------------------------------------------------------------------------------------ processes


def env_for(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RLSUP_RUN_DIR", None)
    env.update(extra or {})
    return env


def rlsup(*args: str, timeout: float = 60, env: dict[str, str] | None = None,
          cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("rlsup") or ""
    cmd = [exe, *args] if exe else [PY, "-m", "rlsup.supervisor.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env or env_for(),
                          cwd=cwd, stdin=subprocess.DEVNULL)


def status(run_dir: Path) -> dict[str, Any]:
    r = rlsup("status", "--json", "--run-dir", str(run_dir), timeout=30)
    return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else {}


def journal(run_dir: Path) -> list[dict[str, Any]]:
    p = run_dir / "events.jsonl"
    out = []
    for line in p.read_text(errors="replace").splitlines() if p.exists() else []:
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def wait_for(what: str, cond: Callable[[], Any], item: Item, ceiling: float, every: float = 0.5) -> Any:
    """Poll ``cond`` until truthy; None (and a problem noted) when the ceiling or the item's deadline comes."""
    end = time.monotonic() + min(ceiling, max(0.0, item.left()))
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= end:
            item.problem(f"gave up waiting for {what}")
            return None
        time.sleep(every)


@contextlib.contextmanager
def supervised(run_dir: Path, config: Path, env: dict[str, str]) -> Iterator[None]:
    """`rlsup up CONFIG -d` on a fresh run dir, and `rlsup down` whatever happens."""
    shutil.rmtree(run_dir, ignore_errors=True)
    r = rlsup("up", str(config), "-d", "--run-dir", str(run_dir), env=env, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"rlsup up -d failed ({r.returncode}): {r.stdout[-800:]}{r.stderr[-800:]}")
    try:
        yield
    finally:
        rlsup("down", "--run-dir", str(run_dir), timeout=120)


@contextlib.contextmanager
def watching(run_dir: Path) -> Iterator[None]:
    """An attached `--plain` client: the supervisor samples the GPUs every second while one watches."""
    with open(run_dir.parent / f"{run_dir.name}.attach.log", "w") as log:
        p = subprocess.Popen([shutil.which("rlsup") or "rlsup", "attach", "--plain", "--run-dir", str(run_dir)],
                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env_for())
    try:
        yield
    finally:
        p.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=10)


@contextlib.contextmanager
def bystander(work: Path, gib: float) -> Iterator[subprocess.Popen[bytes]]:
    """A process outside any run holding ``gib`` GiB on GPU 0, logging every catchable signal it gets."""
    log, sigs = work / "bystander.jsonl", work / "bystander.signals"
    p = subprocess.Popen([PY, str(HOLDER), "--hold", str(gib), "--log", str(log), "--signals-log", str(sigs)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env_for(), start_new_session=True)
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------------- the GPU


def gpu_or_reason() -> tuple[dict[str, Any] | None, str]:
    """GPU 0 as rlsup's own NVML sampler sees it, or why there is none."""
    from rlsup.supervisor.gpu.nvml import make_sampler

    s = make_sampler("auto")
    try:
        sample = s.sample()
    finally:
        s.close()
    if not sample.gpus:
        return None, sample.reason or "no GPU"
    g = sample.to_dict()["gpus"][0]
    return g, ""


def holder_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ------------------------------------------------------------------------------------- the items


def item_check(it: Item, work: Path, gpu: dict[str, Any]) -> None:
    total_gib = gpu["mem_total_mb"] / 1024
    take = round(total_gib * 0.6)
    with bystander(work, take):
        if not wait_for(f"a process holding {take} GiB", lambda: holder_log(work / "bystander.jsonl")[-1:]
                        and "hold" in holder_log(work / "bystander.jsonl")[-1]["what"], it, 60):
            return
        it.fig("held_by_another_process_gib", take)
        for frac, expect in ((0.9, "refused"), (0.2, "accepted")):
            cfg = config(work / f"check-{frac}.yaml", f"""
name: check-{frac}
components:
  inference:
    command: {PY} {HOLDER} --hold 0 --gpu-memory-utilization {frac}
    gpus: [0]
""")
            r = rlsup("check", str(cfg), timeout=60)
            it.path(f"{frac}.txt").write_text(r.stdout + r.stderr)
            errors = [ln.strip() for ln in (r.stdout + r.stderr).splitlines() if "gpu-memory-utilization" in ln]
            got = "refused" if r.returncode == 1 and errors else "accepted" if r.returncode == 0 else f"rc {r.returncode}"
            it.fig(f"fraction_{frac}", f"{got} (rc {r.returncode}){': ' + errors[0] if errors else ''}")
            if got != expect:
                it.problem(f"--gpu-memory-utilization {frac} with {take} GiB held: expected {expect}, got {got}")
            if expect == "refused" and errors and not re.search(r"\d+\.\d GiB", errors[0]):
                it.problem("the refusal names no figure in GiB")


def _reserved_at(log: list[dict[str, Any]], t: float) -> float | None:
    """What the holder had reserved at ``t`` (None within 2.5 s after a change or 0.5 s before one)."""
    before = [r for r in log if r["t"] <= t]
    if not before:
        return None
    last = before[-1]
    nxt = [r for r in log if r["t"] > t]
    if t - last["t"] < 2.5 or (nxt and nxt[0]["t"] - t < 0.5):
        return None
    return float(last["reserved_mb"])


def item_sampler(it: Item, work: Path, gpu: dict[str, Any]) -> None:
    import psutil

    log = work / "reserved.jsonl"
    run_dir = work / "sampler-run"
    cfg = config(work / "sampler.yaml", f"""
name: sampler
components:
  holder:
    command: {PY} {HOLDER} --steps 1,6,2,10,0,4,8,3 --step-s 8 --log {log}
    gpus: [0]
    restart: {{policy: never}}
""")
    polls: list[tuple[float, dict[str, Any]]] = []
    with supervised(run_dir, cfg, env_for()), watching(run_dir):
        sup_pid = (status(run_dir).get("run") or {}).get("pid")
        wait_for("the holder's first step", lambda: len(holder_log(log)) >= 2, it, 60)
        try:
            sup = psutil.Process(sup_pid) if sup_pid else None
            cpu0 = sum(sup.cpu_times()[:2]) if sup else None
        except psutil.Error:
            sup, cpu0 = None, None
        t_end = time.monotonic() + min(60, max(0.0, it.left() - 20))
        t0 = time.monotonic()
        while time.monotonic() < t_end:
            polls.append((time.time(), status(run_dir)))
            time.sleep(1.0)
        if sup is not None and cpu0 is not None:
            with contextlib.suppress(psutil.Error):
                it.fig("supervisor_cpu_pct_while_sampling_1hz",
                       round(100 * (sum(sup.cpu_times()[:2]) - cpu0) / (time.monotonic() - t0), 2))
    rows = holder_log(log)
    pid = rows[0]["pid"] if rows else None
    errs, listed, named = [], 0, 0
    for t, st in polls:
        procs = [p for g in st.get("gpus") or [] for p in g.get("processes") or [] if p.get("pid") == pid]
        if not procs:
            continue
        listed += 1
        named += procs[0].get("component") == "holder"
        want = _reserved_at(rows, t - 1.0)
        if want is not None and _reserved_at(rows, t) == want and procs[0].get("used_mb") is not None:
            errs.append(procs[0]["used_mb"] - want)
    it.path("polls.json").write_text(json.dumps([{"t": t, "gpus": s.get("gpus")} for t, s in polls]))
    it.fig("polls", len(polls))
    it.fig("attribution", f"{named}/{listed} samples name the holder's pid {pid} as component 'holder'")
    if listed == 0 or named != listed:
        it.problem("the holder's process was not always attributed to its component")
    if errs:
        base = statistics.median(errs)
        it.fig("nvml_minus_reserved_mib_median", round(base, 1))
        it.fig("nvml_minus_reserved_mib_range", [round(min(errs), 1), round(max(errs), 1)])
        it.fig("error_after_the_context_mib_max", round(max(abs(e - base) for e in errs), 1))
    else:
        it.problem("no sample fell in a steady stretch of the holder's steps")
    from rlsup.supervisor.gpu.nvml import NvmlSampler

    s = NvmlSampler()
    s.sample()
    c0, w0 = time.process_time(), time.perf_counter()
    n = 200
    for _ in range(n):
        s.sample()
    it.fig("sampler_cpu_ms_per_sample", round(1000 * (time.process_time() - c0) / n, 3))
    it.fig("sampler_wall_ms_per_sample", round(1000 * (time.perf_counter() - w0) / n, 3))
    s.close()


def _started(run_dir: Path, name: str, attempt: int) -> dict[str, Any] | None:
    return next((e for e in journal(run_dir) if e.get("kind") == "started" and e.get("component") == name
                 and e.get("attempt") == attempt), None)


def _restart_once(it: Item, run_dir: Path, name: str, ceiling: float) -> dict[str, Any] | None:
    """`rlsup restart NAME`; the journal's exited/started of that restart and the times between them."""
    t0 = time.time()
    r = rlsup("restart", name, "--run-dir", str(run_dir), timeout=60)
    if r.returncode != 0:
        it.problem(f"rlsup restart {name}: rc {r.returncode}: {r.stderr[-300:]}")
        return None
    started = wait_for(f"{name}'s attempt 2", lambda: _started(run_dir, name, 2), it, ceiling)
    if not started:
        return None
    exited = next((e for e in journal(run_dir) if e.get("kind") == "exited" and e.get("component") == name), None)
    return {"restart_to_start_s": round(started["ts"] - t0, 3),
            "exit_to_start_s": round(started["ts"] - exited["ts"], 3) if exited else None}


def item_hygiene(it: Item, work: Path, gpu: dict[str, Any]) -> None:
    sigs = work / "bystander.signals"
    sigs.unlink(missing_ok=True)
    with bystander(work, 1) as by:
        wait_for("the bystander's memory", lambda: any("hold" in r["what"] for r in holder_log(
            work / "bystander.jsonl")), it, 60)
        log = work / "hold.jsonl"
        run_dir = work / "hygiene-run"
        cfg = config(work / "hygiene.yaml", f"""
name: hygiene
components:
  hold:
    command: {PY} {HOLDER} --hold 10 --log {log}
    gpus: [0]
    stop: {{signal: SIGTERM, timeout: 10}}
""")
        with supervised(run_dir, cfg, env_for()):
            if wait_for("10 GiB held", lambda: any("hold 10" in r["what"] for r in holder_log(log)), it, 90):
                t = _restart_once(it, run_dir, "hold", 60)
                if t:
                    it.fig("restart_10gib", t)
        esc_log = work / "escapee.jsonl"
        run_dir2 = work / "hygiene-escapee-run"
        cfg2 = config(work / "hygiene2.yaml", f"""
name: hygiene2
components:
  hold:
    command: {PY} {HOLDER} --hold 10 --escapee 2 --escapee-log {esc_log} --log {log}.2
    gpus: [0]
    stop: {{signal: SIGTERM, timeout: 10}}
""")
        with supervised(run_dir2, cfg2, env_for()):
            if wait_for("the escapee's memory", lambda: holder_log(esc_log), it, 90):
                esc = holder_log(esc_log)[0]
                it.fig("escapee", f"pid {esc['pid']}, {esc['gib']} GiB, {esc['cgroup'].splitlines()[-1]}")
                t = _restart_once(it, run_dir2, "hold", 90)
                if t:
                    it.fig("restart_with_escapee", t)
                flags = [e for e in journal(run_dir2) if e.get("kind") == "flag" and e.get("type") == "gpu_not_released"]
                alive = Path(f"/proc/{esc['pid']}").exists()
                it.fig("leftovers_in_journal", [f"{e.get('by')}: pids {e.get('pids')}: {e.get('action')}"
                                                for e in journal(run_dir2) if e.get("kind") == "leftovers"])
                it.fig("escapee_alive_after_restart", alive)
                it.fig("gpu_not_released_in_journal", [f"{f.get('message')} | {f.get('evidence')}" for f in flags]
                       or "none (the stop itself ended the escapee: nothing was left holding memory)")
                if flags and str(esc["pid"]) not in json.dumps(flags):
                    it.problem("gpu_not_released does not name the escapee's pid")
                if alive:
                    it.problem(f"the escapee (pid {esc['pid']}) outlived the restart")
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(esc["pid"], signal.SIGKILL)
        if not os.environ.get("RLSUP_HOLDER_HOST"):
            _release_wait(it, work)
        got = sigs.read_text().split("\n") if sigs.exists() else []
        got = [g for g in got if g]
        it.fig("bystander", f"alive={by.poll() is None}, signals received={got or 'none'}")
        if by.poll() is not None or got:
            it.problem("a process outside the run was signalled")


def _release_wait(it: Item, work: Path) -> None:
    """rlsup's wait for a previous attempt's GPU memory (gpu/release.py) against real NVML: a process that
    the last attempt had (its pid and start time recorded) still holds 2 GiB; after the timeout it is
    killed and `gpu_not_released` names it, while the bystander (not the run's) is left alone."""
    import asyncio

    import psutil

    from rlsup.supervisor.gpu.nvml import NvmlSampler
    from rlsup.supervisor.gpu.release import wait_gpu_release
    from rlsup.supervisor.records.clock import SystemClock

    log = work / "leftover.jsonl"
    p = subprocess.Popen([PY, str(HOLDER), "--hold", "2", "--log", str(log)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=env_for(), start_new_session=True)
    try:
        if not wait_for("the leftover's 2 GiB", lambda: any("hold 2" in r["what"] for r in holder_log(log)), it, 60):
            return
        events: list[Any] = []
        sampler = NvmlSampler()
        t0 = time.monotonic()
        asyncio.run(wait_gpu_release("hold", [0], sampler, prev={p.pid: psutil.Process(p.pid).create_time()},
                                     run_pids=dict, run_dir=str(work / "no-run"), timeout=5.0, clock=SystemClock(),
                                     stop_wanted=lambda: False, emit=events.append))
        sampler.close()
        took = time.monotonic() - t0
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=10)
        flags = [e for e in events if getattr(e, "type", None) == "gpu_not_released"]
        it.fig("release_wait", f"{took:.1f}s (timeout 5s); leftover killed={p.poll() is not None}; "
                               f"flag={[(f.message, f.evidence, f.action) for f in flags]}")
        if p.poll() is None or not flags or str(p.pid) not in json.dumps([f.evidence for f in flags]):
            it.problem("the leftover holding GPU memory was not ended and named by gpu_not_released")
    finally:
        p.kill()
        p.wait()


def _tmux(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30)


def _svg(ansi_text: str, path: Path, title: str) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(record=True, width=max(len(line) for line in Text.from_ansi(ansi_text).plain.splitlines()),
                      file=open(os.devnull, "w"), force_terminal=True, color_system="truecolor")
    console.print(Text.from_ansi(ansi_text), end="")
    console.save_svg(str(path), title=title)


def _step_losses(text: str) -> dict[int, float]:
    return {int(m.group(1)): float(m.group(2))
            for m in re.finditer(r"Step (\d+)/\d+ \|.*?\bloss (-?[\d.]+(?:e-?\d+)?)", text)}


def item_stack(it: Item, work: Path, gpu: dict[str, Any]) -> None:
    model = work / "model"
    small = ["--layers", "1", "--width", "64"] if os.environ.get("RLSUP_HOLDER_HOST") else []
    r = subprocess.run([PY, str(HERE / "make_model.py"), str(model), *small], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        it.problem(f"make_model failed: {r.stderr[-500:]}")
        return
    it.fig("model", r.stdout.strip().split(": ", 1)[-1])
    run_dir = work / "stack-run"
    shutil.rmtree(run_dir, ignore_errors=True)
    steps, crash = 40, 13
    env = {"MODEL": str(model), "DATA": str(ROOT / "tests" / "fixtures" / "hf" / "gsm8k_tiny.jsonl"),
           "STEPS": str(steps), "CHAOS": f"crash@{crash}", "PYTHONUNBUFFERED": "1"}
    exe = shutil.which("rlsup") or "rlsup"
    envs = " ".join(f"{k}={v}" for k, v in env.items())
    _tmux("kill-session", "-t", "rlsup-gpu")
    _tmux("new-session", "-d", "-s", "rlsup-gpu", "-x", "200", "-y", "50",
          f"cd {ROOT} && env {envs} {exe} up tests/gpu/stack.yaml --run-dir {run_dir}; sleep 600")
    t_start = time.time()
    trace: list[tuple[float, dict[str, Any]]] = []
    captured = False
    try:
        while it.left() > 15:
            st = status(run_dir)
            if st:
                trace.append((time.time(), st))
            tr = (st.get("components") or {}).get("trainer") or {}
            if not captured and tr.get("attempt") == 2 and (tr.get("step") or 0) >= crash + 3:
                time.sleep(1.5)  # a fresh GPU sample on screen
                text = _tmux("capture-pane", "-p", "-t", "rlsup-gpu").stdout
                ansi = _tmux("capture-pane", "-p", "-e", "-t", "rlsup-gpu").stdout
                it.path("tui.txt").write_text(text)
                it.path("tui.ansi").write_text(ansi)
                with contextlib.suppress(Exception):
                    _svg(ansi, it.path("tui.svg"), f"rlsup on {gpu['name']}")
                captured = True
                lines = text.splitlines()  # the GPU panel: the card's line (°C) and its owners' (└)
                panel = [re.sub(r"^.*?(?=\d+ \S+ +UTL|└)", "", ln).strip() for ln in lines if "°C" in ln or "└" in ln]
                it.fig("tui_gpu_lines", panel)
            if (st.get("run") or {}).get("ended_at"):
                break
            time.sleep(1.0)
    finally:
        _tmux("send-keys", "-t", "rlsup-gpu", "Q")
        time.sleep(3)
        rlsup("down", "--run-dir", str(run_dir), timeout=120)
        _tmux("kill-session", "-t", "rlsup-gpu")
    it.fig("wall_s", round(time.time() - t_start, 1))
    end = status(run_dir) or (trace[-1][1] if trace else {})
    comps = end.get("components") or {}
    it.fig("states", {n: c.get("state") for n, c in comps.items()})
    a2 = [(t, s["components"]["trainer"].get("step")) for t, s in trace
          if (s.get("components") or {}).get("trainer", {}).get("attempt") == 2
          and s["components"]["trainer"].get("step")]
    if len(a2) >= 2 and a2[-1][1] > a2[0][1]:
        it.fig("trainer_steps_per_s_after_resume", round((a2[-1][1] - a2[0][1]) / (a2[-1][0] - a2[0][0]), 2))
    peak: dict[str, float] = {}
    for _, s in trace:
        for n, c in (s.get("components") or {}).items():
            mb = ((c.get("resources") or {}).get("gpu_mb"))
            if mb:
                peak[n] = max(peak.get(n, 0.0), mb)
    it.fig("peak_gpu_mib_by_component", {n: round(v) for n, v in peak.items()})
    if not peak:
        it.problem("no component's GPU memory was seen")
    logs = {a: rlsup("logs", "trainer", "--attempt", str(a), "-n", "1000000", "--run-dir", str(run_dir), timeout=60).stdout
            for a in (1, 2)}
    for a, text in logs.items():
        it.path(f"trainer.{a}.log").write_text(text)
    l1, l2 = _step_losses(logs[1]), _step_losses(logs[2])
    resumed = min(l2) if l2 else None
    it.fig("resumed_at_step", resumed)
    if resumed is not None and resumed in l1:
        it.fig("loss_at_resumed_step", {"before_crash": l1[resumed], "after_resume": l2[resumed],
                                        "abs_diff": abs(l1[resumed] - l2[resumed])})
    else:
        it.problem(f"no loss to compare (attempt 1 steps {sorted(l1)[-3:]}, attempt 2 steps {sorted(l2)[:3]})")
    bf16 = [ln for ln in logs[1].splitlines() if "bf16" in ln.lower()][:1]
    it.fig("bf16", bf16[0].strip() if bf16 else "the trainer's log does not say")


RUNNERS: dict[str, Callable[[Item, Path, dict[str, Any]], None]] = {
    "check": item_check, "sampler": item_sampler, "hygiene": item_hygiene, "stack": item_stack}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default=",".join(ITEMS))
    ap.add_argument("--without-gpu", action="store_true",
                    help="run the items on a machine without a GPU (host memory for the holder, the stack on "
                         "the CPU): tests this script's own steps, gives no figure worth keeping")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "work"
    work.mkdir(exist_ok=True)
    results = args.out / "results.jsonl"
    gpu, reason = gpu_or_reason()
    if args.without_gpu:
        os.environ["RLSUP_HOLDER_HOST"] = "1"
        gpu = gpu or {"name": "no GPU (--without-gpu)", "mem_total_mb": 8 * 1024.0}
    head = {"gpu": gpu and {k: gpu.get(k) for k in ("name", "mem_total_mb", "temp_c", "power_limit_w")},
            "reason": reason, "driver": _driver(), "torch": _torch(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                             time.gmtime())}
    print(f"== rlsup GPU checks: {json.dumps(head)}", flush=True)
    with open(results, "a") as f:
        f.write(json.dumps({"item": "machine", **head}) + "\n")
    failed = 0
    for name in [n for n in args.only.split(",") if n]:
        it = Item(name, args.out)
        t0 = time.monotonic()
        print(f"== {name}", flush=True)
        if gpu is None:
            it.fig("skipped", f"no GPU: {reason}")
        else:
            try:
                RUNNERS[name](it, work, gpu)
            except Exception as exc:  # noqa: BLE001 - one item's failure must not end the others
                it.problem(f"{type(exc).__name__}: {exc}")
        it.fig("seconds", round(time.monotonic() - t0, 1))
        failed += bool(it.problems)
        with open(results, "a") as f:
            f.write(json.dumps({"item": name, "figures": it.figures, "problems": it.problems}) + "\n")
        print(f"== {name}: {'OK' if not it.problems else 'PROBLEMS: ' + '; '.join(it.problems)}", flush=True)
    return 1 if failed else 0


def _driver() -> str | None:
    r = shutil.which("nvidia-smi")
    if not r:
        return None
    p = subprocess.run([r, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True)
    return p.stdout.strip() or None


def _torch() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return f"{torch.__version__} (CUDA {torch.version.cuda})"


if __name__ == "__main__":
    raise SystemExit(main())
