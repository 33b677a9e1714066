"""Every chaos example of the README, run as written, then `rlsup diagnose RUN_DIR` and `rlsup report`
checked for the root cause each example injects (issue 27, item 8).

The commands come from the README's own code block (the one after "See the diagnosis at work"), so
the README cannot drift from what works: each line `RLSUP_CHAOS_TRAINER=KIND@N rlsup up
configs/demo-chaos.yaml --fresh` is run with `--headless` added (the mode CI can drive; it writes the
same run dir), on its own port and run dir, with fewer steps (RLSUP_DEMO_STEPS, only where the
README's fault step still falls inside them). The first example runs once more in `-d` mode, as users
run it without a terminal. The runs go in parallel: a few minutes of wall time in all.

What each example must be diagnosed as (the README's comment on its line says the same):

- ``crash@N``: the trainer's exception (python_exception, ChaosCrash), resumed from a checkpoint;
- ``hang@N``: the trainer hung (a stall no dependency explains), never the inference engine death
  the demo also injects (``die@15s``) and that the run recovered from in seconds; the stall flag,
  `rlsup why trainer` and `rlsup report` show the trainer's stack at the function it waits in;
- ``exit0@N``: the trainer's false success.

Self-contained: real `rlsup` processes, real demo stack, nothing faked.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.journeys.conftest import PATIENCE

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PY = sys.executable
STEPS = 62  # the demo's 200 steps cut down: every fault step of the README's examples (the last at 60) is below it

pytestmark = pytest.mark.slow

# what the example's fault, injected in the component its variable names, must be diagnosed as
EXPECTED = {"crash": ("python_exception", "ChaosCrash"), "hang": ("stall", "hung"), "exit0": ("false_success", "false success")}


def readme_chaos_examples() -> list[tuple[dict[str, str], list[str]]]:
    """(environment, argv) of each chaos example in the README's code block."""
    text = README.read_text(encoding="utf-8")
    at = text.index("**See the diagnosis at work.**")
    block = re.search(r"```sh\n(.*?)```", text[at:], re.S)
    assert block, "the README's chaos examples block is gone"
    out = []
    for line in block.group(1).splitlines():
        cmd = line.split("#", 1)[0].strip()
        if not cmd:
            continue
        words = shlex.split(cmd)
        env = dict(w.split("=", 1) for w in words if re.match(r"^[A-Z_]+=", w))
        argv = [w for w in words if not re.match(r"^[A-Z_]+=", w)]
        assert argv[:3] == ["rlsup", "up", "configs/demo-chaos.yaml"], cmd
        out.append((env, argv))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli_env(extra: dict[str, str]) -> dict[str, str]:
    e = dict(os.environ)
    e.setdefault("RLSUP_GPU_SAMPLER", "none")
    e["PATH"] = os.path.dirname(PY) + os.pathsep + e.get("PATH", "")
    e.pop("RLSUP_RUN_DIR", None)
    e.update(extra)
    return e


def rlsup(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "rlsup.supervisor.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=cli_env(env or {}), timeout=timeout, stdin=subprocess.DEVNULL)


def events(run_dir: Path) -> list[dict]:
    p = run_dir / "events.jsonl"
    out = []
    if p.exists():
        for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def hang_flag(evs: list[dict]) -> dict | None:
    """The stall flag of the injected hang: its last line is the one chaos.py prints before it hangs. Not any stall
    flag: on a loaded machine the trainer may also stall at its start, waiting for a slow inference server."""
    return next((e for e in evs if e.get("kind") == "flag" and e.get("type") == "stall"
                 and any("Entering barrier for step" in x for x in e.get("evidence") or [])), None)


class Example:
    """One README example, started as the README says (plus the mode and the run dir)."""

    def __init__(self, env: dict[str, str], argv: list[str], run_dir: Path, mode: str):
        self.fault_env = env
        self.var, spec = next((k, v) for k, v in env.items() if k.startswith("RLSUP_CHAOS_"))
        self.component = self.var.removeprefix("RLSUP_CHAOS_").lower()
        self.kind, _, n = spec.partition("@")
        assert int(n) < STEPS, f"{spec}: the fault step must fall inside the {STEPS} steps the test runs"
        self.run_dir = run_dir
        self.mode = mode
        self.env = {**env, "RLSUP_DEMO_STEPS": str(STEPS), "RLSUP_DEMO_PORT": str(free_port())}
        self.argv = [*argv[1:], "--headless" if mode == "headless" else "-d", "--run-dir", str(run_dir)]
        self.proc = subprocess.Popen([PY, "-m", "rlsup.supervisor.cli", *self.argv], cwd=ROOT,
                                     env=cli_env(self.env), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def ended(self) -> bool:
        return any(e.get("kind") == "run_ended" for e in events(self.run_dir))

    def finish(self) -> None:
        """Let the run end: a crash or a false success is recovered and the run completes by itself; a
        hang hangs until someone stops it (the README's stall flag tells them to), here Ctrl-C for
        --headless and `rlsup down` for -d, once the stall flag is in the journal."""
        if self.kind == "hang":
            wait_for(lambda: hang_flag(events(self.run_dir)), 240, f"{self.kind}: the stall flag of the hang")
            if self.mode == "headless":
                self.proc.send_signal(signal.SIGINT)
            else:
                assert rlsup("down", "--run-dir", str(self.run_dir), env=self.env).returncode == 0
        wait_for(self.ended, 300, f"{self.kind} ({self.mode}): the run's end")
        out, _ = self.proc.communicate(timeout=PATIENCE)
        self.output = out

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(PATIENCE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.mode == "daemon" and not self.ended():
            rlsup("down", "--run-dir", str(self.run_dir), env=self.env)


@pytest.fixture(scope="module")
def chaos_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("chaos")
    examples = readme_chaos_examples()
    kinds = {env.get("RLSUP_CHAOS_TRAINER", "").split("@")[0] for env, _ in examples}
    assert kinds >= set(EXPECTED), f"the README's examples changed: {kinds}"
    runs = [Example(env, argv, base / f"{i}-{env['RLSUP_CHAOS_TRAINER'].replace('@', '-')}", "headless")
            for i, (env, argv) in enumerate(examples)]
    env, argv = examples[0]
    runs.append(Example(env, argv, base / "d-mode", "daemon"))
    try:
        for r in runs:
            r.finish()
        yield runs
    finally:
        for r in runs:
            r.close()


def _ids() -> list[str]:
    return [f"{env['RLSUP_CHAOS_TRAINER']}-headless" for env, _ in readme_chaos_examples()] + ["first-example-d"]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("index", range(len(_ids())), ids=_ids())
def test_rlsup_diagnose_and_report_name_the_injected_fault(chaos_runs, index: int) -> None:
    run = chaos_runs[index]
    category, words = EXPECTED[run.kind]
    r = rlsup("diagnose", str(run.run_dir), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    rc = d["root_cause"]
    journal = "\n".join(json.dumps({k: v for k, v in e.items() if k in ("ts", "kind", "component", "type", "message",
                                                                        "exit_code", "signal")})
                        for e in events(run.run_dir) if e.get("kind") not in ("log", "progress", "gpu", "resources"))
    assert rc is not None, d["verdict"] + "\n" + journal
    assert (rc["component"], rc["category"]) == (run.component, category), d["verdict"] + "\n" + journal
    assert words in (rc["summary"] + json.dumps(rc["diagnosis"])), rc
    # the inference death the demo injects too (die@15s) is never blamed for the trainer's fault
    assert d["verdict"].startswith(f"{run.component} failed"), d["verdict"]
    assert not any(s["component"] == run.component for s in d["symptoms"] if s["category"] == "inference_engine_dead")
    # evidence lines are the lines on disk, one each, never two glued together
    for f in d["failures"]:
        for ev in (f.get("diagnosis") or {}).get("evidence") or []:
            assert not re.search(r"\d(?:ERROR|WARNING|INFO) ", ev), ev

    human = rlsup("diagnose", str(run.run_dir)).stdout
    assert f"root cause  {run.component} ({category})" in human, human

    rep = rlsup("report", "--run-dir", str(run.run_dir))
    assert rep.returncode == 0, rep.stderr
    md = rep.stdout
    summary = md.split("## Summary", 1)[1].split("##", 1)[0]
    root = md.split("## Root cause", 1)[1].split("\n## ", 1)[0] if "## Root cause" in md else ""
    assert f"**{run.component}** failed" in root and words in root, md[:3000]
    if run.kind == "hang":
        assert f"{run.component} hung" in summary, summary
    if run.kind == "exit0":
        assert "false success" in summary, summary


@pytest.mark.timeout(300)
def test_the_hang_example_shows_where_the_trainer_waits(chaos_runs) -> None:
    """The README's ``hang@60`` example (headless): py-spy's stack of the hung trainer is in the stall flag's
    evidence, in `rlsup why trainer` and in `rlsup report`, at the line of chaos.py where it sleeps."""
    from rlsup.supervisor.run.stacks import find_py_spy

    if find_py_spy() is None:
        pytest.skip("py-spy is not installed (a dependency of rlsup)")
    run = next(r for r in chaos_runs if r.kind == "hang" and r.mode == "headless")
    chaos = (ROOT / "trainer" / "chaos.py").read_text().splitlines()
    where = f"in _fire at chaos.py:{next(i + 1 for i, ln in enumerate(chaos) if 'time.sleep(3600)' in ln)}"
    stall = hang_flag(events(run.run_dir))
    assert stall is not None and stall["component"] == "trainer"
    assert any(x.startswith("stack: pid ") and x.endswith(where) for x in stall["evidence"]), stall["evidence"]
    why = rlsup("why", "trainer", "--run-dir", str(run.run_dir))
    assert where in why.stdout, why.stdout + why.stderr
    report = rlsup("report", "--run-dir", str(run.run_dir)).stdout
    assert where in report.split("### stall on trainer", 1)[1], report
