"""The lifecycle's semantics end to end, with real processes: one test per rule of issue 14.

Each of these failed on the supervisor before the lifecycle was made one pure function (the
false success that completed, the restart from scratch after a fresh checkpoint, the finished run
reused silently, the silent Ctrl-C, one crash_loop flag per attempt, the wrong component blamed,
a rate for a stopped component, deadlines on the wall clock).
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import signal
import time
from pathlib import Path

from tests.conftest import PATIENCE, PY, SCRIPTS, kinds, read_events, rlsup, wait_for, write_config

STEPPER = f"{PY} {SCRIPTS / 'stepper.py'}"


def _events(run_dir: Path, kind: str, component: str | None = None) -> list[dict]:
    return [e for e in read_events(run_dir) if e["kind"] == kind and (component is None or e["component"] == component)]


# ---------------------------------------------------------------------- false success


def test_false_success_fails_the_run_and_is_never_completed(tmp_path, headless):
    cfg = write_config(tmp_path, f"""
        components:
          trainer:
            command: {STEPPER} --total 10 --exit-at 4 --exit-code 0
            progress: {{preset: rlsup}}
            restart: {{policy: never}}
    """)
    h = headless(cfg)
    assert h.wait() == 1  # a CI job must not pass a run that stopped at step 4 of 10
    run_dir = tmp_path / "run"
    assert "completed" not in kinds(read_events(run_dir), "trainer")
    fatal = _events(run_dir, "fatal", "trainer")[-1]
    assert "false_success" in fatal["reason"]
    assert any(e["type"] == "false_success" for e in _events(run_dir, "flag", "trainer"))
    report = rlsup("report", "--run-dir", str(run_dir)).stdout
    assert "No component failed" not in report and "false" in report.lower()
    st = json.loads(rlsup("status", "--json", "--run-dir", str(run_dir)).stdout)
    assert st["components"]["trainer"]["state"] == "fatal"


def test_false_success_is_restarted_from_its_checkpoint_and_then_completes(tmp_path, headless):
    ck = tmp_path / "ck"
    cfg = write_config(tmp_path, f"""
        components:
          trainer:
            command: {STEPPER} --total 12 --ckpt {ck} --ckpt-every 4 --exit-at 9 --exit-code 0 --once {tmp_path}/once
            progress: {{preset: rlsup}}
            resume: {{checkpoints: {ck}, layout: glob, step_pattern: 'step_(\\d+)', args: ["--resume-step", "{{step}}"]}}
            restart: {{backoff: {{initial: 0.1, max: 0.1}}}}
            exit_on_end: true
    """)
    h = headless(cfg)
    assert h.wait() == 0
    started = _events(tmp_path / "run", "started", "trainer")
    assert len(started) == 2 and started[1]["resume"]["step"] == 8
    assert kinds(read_events(tmp_path / "run"), "trainer").count("completed") == 1


# ---------------------------------------------------------------------- resume


def test_a_crash_right_after_a_checkpoint_resumes_from_it_not_from_scratch(tmp_path, headless):
    ck = tmp_path / "ck"
    cfg = write_config(tmp_path, f"""
        components:
          trainer:
            command: {STEPPER} --total 8 --sleep 0.01 --ckpt {ck} --ckpt-every 5 --exit-at 5 --exit-code 1 --once {tmp_path}/once
            progress: {{preset: rlsup}}
            resume: {{checkpoints: {ck}, layout: glob, step_pattern: 'step_(\\d+)', args: ["--resume-step", "{{step}}"]}}
            restart: {{backoff: {{initial: 0.05, max: 0.05}}}}
    """)
    h = headless(cfg)
    assert h.wait() == 0
    started = _events(tmp_path / "run", "started", "trainer")
    # The checkpoint was a few milliseconds old when the trainer crashed. Once its process tree is
    # gone nothing is writing it, so its age says nothing: it is complete, and the restart uses it.
    assert started[1]["resume"] == {"step": 5, "checkpoint": str(ck / "step_5")}
    assert any("starting at step 6" in line for line in (tmp_path / "run" / "logs" / "trainer.log").read_text().splitlines())


def test_no_complete_checkpoint_is_said_before_the_start_with_each_candidates_reason(tmp_path, headless):
    ck = tmp_path / "ck"
    (ck / "checkpoint-10").mkdir(parents=True)
    (ck / "checkpoint-10" / "model.safetensors.index.json").write_text(
        '{"weight_map": {"lm_head.weight": "model-00001-of-00001.safetensors"}}')  # the shard never arrived
    cfg = write_config(tmp_path, f"""
        components:
          trainer:
            command: {STEPPER} --total 3
            resume: {{checkpoints: {ck}, layout: hf, args: ["--resume-step", "{{step}}"]}}
    """)
    h = headless(cfg)
    assert h.wait() == 0
    ev = [e for e in read_events(tmp_path / "run") if e["component"] == "trainer"]
    problem = next(i for i, e in enumerate(ev) if e["kind"] == "flag" and e["type"] == "checkpoint_problem")
    start = next(i for i, e in enumerate(ev) if e["kind"] == "started")
    assert problem < start  # said before the start, not after
    assert "starting from scratch" in ev[problem]["message"]
    rejected = ev[start]["checkpoints_rejected"]
    assert rejected and rejected[0]["step"] == 10 and rejected[0]["reason"]
    assert ev[start]["resume"] is None
    assert "FROM SCRATCH" in h.output


# ---------------------------------------------------------------------- a run dir that holds a finished run


def test_a_finished_run_is_never_reused_silently(tmp_path):
    cfg = write_config(tmp_path, f"""
        name: fin
        components:
          trainer:
            command: {STEPPER} --total 5
            progress: {{preset: rlsup}}
            exit_on_end: true
    """)
    run_dir = tmp_path / "run"
    first = rlsup("up", str(cfg), "--headless", "--skip-checks", "--run-dir", str(run_dir), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    n = len(read_events(run_dir))
    again = rlsup("up", str(cfg), "--headless", "--skip-checks", "--run-dir", str(run_dir), cwd=tmp_path)
    assert again.returncode == 2
    assert "has ended: completed at step 5/5 (trainer)" in again.stderr and "--resume" in again.stderr
    assert "--fresh" in again.stderr and len(read_events(run_dir)) == n  # nothing was started
    fresh = rlsup("up", str(cfg), "--headless", "--skip-checks", "--run-dir", str(run_dir), "--fresh", cwd=tmp_path)
    assert fresh.returncode == 0, fresh.stderr
    kept = tmp_path / "run.1"
    assert len(read_events(kept)) == n  # the old run is kept whole
    assert [e["kind"] for e in read_events(run_dir)].count("run_started") == 1
    resumed = rlsup("up", str(cfg), "--headless", "--skip-checks", "--run-dir", str(run_dir), "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    starts = _events(run_dir, "run_started")
    assert [e["how"] for e in starts] == ["new", "resumed"]  # the journal goes on, with a run boundary


def test_resume_continues_a_completed_component_whose_config_asks_for_more_steps(tmp_path):
    """A run that completed 5 of 5 steps, then the config raised to 8: `--resume` used to keep the trainer
    completed ("nothing was left to continue"), and the only way on was `--fresh`, from step 0. Now a
    completed component whose configured command, cwd or env changed starts again, from its checkpoints;
    one whose config is the same stays completed."""
    ck = tmp_path / "ck"

    def config(total: int, env: str = "") -> Path:
        return write_config(tmp_path, f"""
            name: more
            components:
              trainer:
                command: {STEPPER} --total {total} --ckpt {ck} --ckpt-every 5
                progress: {{preset: rlsup}}
                resume: {{checkpoints: {ck}, layout: glob, step_pattern: 'step_(\\d+)', args: ["--resume-step", "{{step}}"]}}
                exit_on_end: true{env}
        """)

    run_dir = tmp_path / "run"
    up = ("up", "--headless", "--skip-checks", "--run-dir", str(run_dir))
    first = rlsup(up[0], str(config(5)), *up[1:], cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    same = rlsup("up", str(config(5)), "-d", "--skip-checks", "--run-dir", str(run_dir), "--resume", cwd=tmp_path)
    assert same.returncode == 0, same.stderr
    assert len(_events(run_dir, "started", "trainer")) == 1  # the same config: what completed stays completed
    assert "nothing was left to continue" in same.stderr and "changed since it completed" in same.stderr

    more = rlsup(up[0], str(config(8)), *up[1:], "--resume", cwd=tmp_path)
    assert more.returncode == 0, more.stderr
    started = _events(run_dir, "started", "trainer")
    assert len(started) == 2 and started[1]["resume"]["step"] == 5 and "--resume-step" in started[1]["command"]
    assert started[0]["config_hash"] != started[1]["config_hash"]
    assert "its config changed since" in started[1]["cause"]["reason"]  # `rlsup why trainer` says so
    done = _events(run_dir, "exited", "trainer")
    assert done[-1]["exit_code"] == 0 and done[-1]["step"] == 8
    assert "starting at step 6 (resumed from 5)" in (run_dir / "logs" / "trainer.log").read_text()


def test_a_run_whose_supervisor_died_midway_goes_on_by_default(tmp_path, headless):
    cfg = write_config(tmp_path, f"""
        components:
          trainer:
            command: {STEPPER} --total 400 --sleep 0.05
            progress: {{preset: rlsup}}
    """)
    h = headless(cfg)
    h.wait_event(lambda e: e["kind"] == "started", what="started")
    h.terminate(signal.SIGKILL)
    h.wait()
    h2 = headless(cfg)  # no --resume needed: no run_ended, so nothing ended
    h2.wait_event(lambda e: e["kind"] == "adopted", what="adopted")
    h2.terminate()
    assert h2.wait() == 0


# ---------------------------------------------------------------------- Ctrl-C before the TUI's first frame


def test_ctrl_c_while_the_supervisor_starts_says_the_run_goes_on(tmp_path):
    cfg = write_config(tmp_path, """
        components:
          sleeper:
            command: ["{py}", "-c", "import time; time.sleep(300)"]
    """)
    run_dir = tmp_path / "run"
    pid, fd = pty.fork()
    if pid == 0:  # the child: `rlsup up CONFIG` on a real terminal, as a user types it
        os.chdir(tmp_path)
        env = dict(os.environ, RLSUP_GPU_SAMPLER="none", PATH=os.path.dirname(PY) + os.pathsep + os.environ["PATH"])
        os.execve(PY, [PY, "-m", "rlsup.supervisor.cli", "up", str(cfg), "--skip-checks", "--run-dir", str(run_dir)],
                  env)
    out = b""
    try:
        wait_for(lambda: (run_dir / "rlsup.lock").exists(), 30, what="the daemon to start")
        os.write(fd, b"\x03")  # Ctrl-C, through the terminal driver, before any frame could be drawn
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r, _, _ = select.select([fd], [], [], 0.5)
            if r:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            if os.waitpid(pid, os.WNOHANG)[0]:
                break
        text = out.decode(errors="replace")
        assert "goes on" in text or "training continues" in text, text[-2000:]
        assert "rlsup attach" in text or "attach" in text
        def up():
            st = rlsup("status", "--run-dir", str(run_dir))
            return st.returncode == 0 and "sleeper" in st.stdout and "running" in st.stdout

        wait_for(up, 30, what="the run to go on")  # it really goes on, whatever the CLI was doing
    finally:
        rlsup("down", "--run-dir", str(run_dir), timeout=60)
        with_exit = os.waitpid(pid, os.WNOHANG)
        if not with_exit[0]:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)


# ---------------------------------------------------------------------- once per episode


def test_crash_loop_is_flagged_once_per_episode_and_notified_once(tmp_path, headless):
    notes = tmp_path / "notes.txt"
    cfg = write_config(tmp_path, f"""
        components:
          flaky:
            command: ["{{py}}", "-c", "import sys; sys.exit(1)"]
            restart: {{backoff: {{initial: 0.05, max: 0.05, jitter: 0}}, max_restarts: 12}}
        notify:
          command: ["sh", "-c", "printf '%s\\\\n' \\"$RLSUP_EVENT_TEXT\\" >> {notes}"]
          on: [flag]
    """)
    h = headless(cfg)
    assert h.wait(timeout=60) == 1
    ev = read_events(tmp_path / "run")
    assert kinds(ev, "flaky").count("restart_scheduled") == 12
    assert [e["type"] for e in ev if e["kind"] == "flag"].count("crash_loop") == 1
    wait_for(lambda: notes.exists() and "crash_loop" in notes.read_text(), PATIENCE, what="the notification")
    assert notes.read_text().count("crash_loop") == 1


# ---------------------------------------------------------------------- the root of a failed run


def test_the_end_of_the_run_names_the_root_not_the_last_to_end(tmp_path, headless):
    cfg = write_config(tmp_path, """
        components:
          inference:
            command: ["{py}", "-c", "raise RuntimeError('CUDA error: an illegal memory access was encountered')"]
            ready: {file: never-there, timeout: 60}
            restart: {backoff: {initial: 0.05, max: 0.05}}
          trainer:
            command: ["{py}", "-c", "print('Step 1/10')"]
            depends_on: {inference: ready}
            exit_on_end: true
    """)
    h = headless(cfg)
    assert h.wait(timeout=60) == 1
    end = _events(tmp_path / "run", "run_ended")[-1]
    assert end["root"]["component"] == "inference"
    assert end["reason"].startswith("inference fatal:") and "trainer never started (dependency inference)" in end["reason"]
    assert "trainer fatal (exit_on_end)" not in h.output


# ---------------------------------------------------------------------- rate and ETA, hints


def test_rate_and_eta_only_for_running_components(tmp_path, daemon):
    cfg = write_config(tmp_path, f"""
        components:
          trainer:
            command: {STEPPER} --total 100000 --sleep 0.05
            progress: {{preset: rlsup}}
    """)
    d = daemon(cfg)

    def rate():
        st = json.loads(d.cli("status", "--json").stdout)["components"]["trainer"]
        return st if st.get("rate") else None

    assert wait_for(rate, 30, what="a rate")["eta_s"] is not None
    assert d.cli("stop", "trainer").returncode == 0
    d.wait_event(lambda e: e["kind"] == "stopped" and e["component"] == "trainer", what="stopped")
    wait_for(lambda: json.loads(d.cli("status", "--json").stdout)["components"]["trainer"]["state"] == "stopped", PATIENCE)

    def no_rate():  # once the last progress flush is past
        st = json.loads(d.cli("status", "--json").stdout)["components"]["trainer"]
        return st if st["rate"] is None and st["eta_s"] is None else None

    st = wait_for(no_rate, PATIENCE, what="no rate and no ETA once stopped")
    assert st["rate"] is None and st["eta_s"] is None
    assert "/s" not in d.cli("status").stdout.splitlines()[2]  # the text table shows no rate either


def test_after_the_run_ended_the_hint_is_a_new_run_not_rlsup_start(tmp_path, headless):
    cfg = write_config(tmp_path, """
        components:
          bad:
            command: ["{py}", "-c", "raise ValueError('same every time')"]
            restart: {backoff: {initial: 0.05, max: 0.05}}
    """)
    h = headless(cfg)
    assert h.wait(timeout=60) == 1
    st = rlsup("status", "--run-dir", str(tmp_path / "run"))
    assert st.returncode == 0
    assert f"rlsup up {cfg} --resume" in st.stdout
    start = rlsup("start", "bad", "--run-dir", str(tmp_path / "run"))
    assert start.returncode == 1 and "--resume" in start.stderr and "read-only" in start.stderr


# ---------------------------------------------------------------------- one clock: monotonic


class JumpingWallClock:
    """Real monotonic time, and a wall clock that an NTP step throws one hour back after 0.5 s."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time() - (3600 if time.monotonic() - self.t0 > 0.5 else 0)


def test_deadlines_do_not_move_with_the_wall_clock(tmp_path):
    from rlsup.supervisor.config.loader import load_config
    from rlsup.supervisor.run.run import Run

    cfg = write_config(tmp_path, """
        components:
          slow:
            command: ["{py}", "-c", "import time; time.sleep(60)"]
            ready: {file: never-there, timeout: 2, interval: 0.1}
            restart: {policy: never}
    """)
    run = Run(load_config(str(cfg), run_dir=str(tmp_path / "run")), clock=JumpingWallClock(), serve=False)
    run.prepare()
    seen: list[dict] = []
    run.subscribers.append(seen.append)

    async def main() -> int:
        # A deadline on the wall clock would move an hour away: the run would end here, at the safety net.
        asyncio.get_running_loop().call_later(90, run.request_shutdown, "test timeout")
        return await run.run()

    asyncio.run(main())
    fatal = next(e for e in seen if e["kind"] == "fatal")
    assert "not ready within 2s" in fatal["reason"]
    # the readiness deadline kept to monotonic time despite the wall clock's jump: the run ended on it
    assert not [e for e in seen if "test timeout" in json.dumps(e)], seen



def test_output_read_while_the_start_is_awaited_belongs_to_the_new_attempt(tmp_path):
    """A loaded machine, made certain: the attempt prints its steps and exits while the supervisor still awaits
    its monitor's reply, and the log watch reads those lines meanwhile. They are the new attempt's: its exit is
    judged at step 3 of 10 (the progress was reset after the await and the exit read as at no step)."""
    from rlsup.supervisor.config.loader import load_config
    from rlsup.supervisor.run.run import Run

    cfg = write_config(tmp_path, """
        components:
          trainer:
            command: ["{py}", "-u", "-c", "for i in range(1, 4): print(f'Step {i}/10 | loss 0.5')"]
            progress: {preset: rlsup}
            restart: {policy: never}
    """)
    run = Run(load_config(str(cfg), run_dir=str(tmp_path / "run")), serve=False)
    run.prepare()
    seen: list[dict] = []
    run.subscribers.append(seen.append)
    monitors = run.tracking.monitors
    real_start = monitors.start

    async def start_then_read(spec):
        reply = await real_start(spec)
        log = run.paths.log("trainer")
        deadline = time.monotonic() + PATIENCE
        while b"Step 3/10" not in (log.read_bytes() if log.exists() else b"") and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        run.components["trainer"].read_output()  # what the log watch does while the reply is awaited
        return reply

    monitors.start = start_then_read

    async def main() -> int:
        asyncio.get_running_loop().call_later(PATIENCE, run.request_shutdown, "test timeout")
        return await run.run()

    asyncio.run(main())
    flags = [e for e in seen if e["kind"] == "flag" and e["type"] == "false_success"]
    assert flags and "step 3 of 10" in flags[0]["message"], flags
