"""The core supervisor against real child processes, through `rlsup up --headless`."""

from __future__ import annotations

import os
import signal
import time

from tests.conftest import PATIENCE, free_port, kinds, pid_alive, wait_for, write_config


def test_restart_backoff_then_give_up(tmp_path, headless):
    cfg = write_config(tmp_path, r"""
        components:
          worker:
            command: ["{py}", "{scripts}/crash.py", "--code", "3"]
            restart: {max_restarts: 2, backoff: {initial: 0.2, factor: 2, jitter: 0}}
    """)
    h = headless(cfg)
    assert h.wait() == 1
    ev = h.events()
    assert [k for k in kinds(ev, "worker") if k not in ("command", "flag")] == [
        "started", "ready", "exited", "restart_scheduled",
        "started", "ready", "exited", "restart_scheduled",
        "started", "ready", "exited", "fatal",
    ]
    delays = [e["delay_s"] for e in ev if e["kind"] == "restart_scheduled"]
    assert delays == [0.2, 0.4]
    attempts = [e["attempt"] for e in ev if e["kind"] == "started"]
    assert attempts == [1, 2, 3]
    exits = [e for e in ev if e["kind"] == "exited"]
    assert all(e["exit_code"] == 3 and e["signal"] is None for e in exits)
    assert exits[0]["step"] is None  # no progress configured
    fatal = [e for e in ev if e["kind"] == "fatal"][0]
    assert "gave up after 2 restarts" in fatal["reason"]
    assert ev[-1]["kind"] == "run_ended" and ev[-1]["exit_code"] == 1
    # Journal seq strictly increasing.
    seqs = [e["seq"] for e in ev]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_on_failure_recovers_and_completes(tmp_path, headless):
    cfg = write_config(tmp_path, f"""
        components:
          worker:
            command: ["{{py}}", "{{scripts}}/crash.py", "--count", "{tmp_path}/n", "--fail-times", "2"]
            restart: {{backoff: {{initial: 0.1, jitter: 0}}}}
    """)
    h = headless(cfg)
    assert h.wait() == 0
    ev = h.events()
    assert [e["exit_code"] for e in ev if e["kind"] == "exited"] == [1, 1, 0]
    assert kinds(ev, "worker")[-1] == "completed"
    assert "every component completed" in h.output


def test_policy_never_is_fatal_at_first_failure(tmp_path, headless):
    cfg = write_config(tmp_path, """
        components:
          once:
            command: ["{py}", "{scripts}/crash.py", "--code", "7"]
            restart: {policy: never}
    """)
    h = headless(cfg)
    assert h.wait() == 1
    ev = h.events()
    assert kinds(ev, "once").count("started") == 1
    assert "restart policy is never" in [e for e in ev if e["kind"] == "fatal"][0]["reason"]


def test_success_exit_codes(tmp_path, headless):
    cfg = write_config(tmp_path, """
        components:
          w:
            command: ["{py}", "{scripts}/crash.py", "--code", "42"]
            restart: {success_exit_codes: [0, 42]}
    """)
    h = headless(cfg)
    assert h.wait() == 0
    assert kinds(h.events(), "w")[-1] == "completed"


def test_missing_command_is_fatal_without_restart_loop(tmp_path, headless):
    cfg = write_config(tmp_path, """
        components:
          w:
            command: definitely-not-a-command-xyz --flag
    """)
    h = headless(cfg)
    assert h.wait() == 1
    ev = h.events()
    fatal = [e for e in ev if e["kind"] == "fatal"]
    assert fatal and "command not found" in fatal[0]["reason"]
    assert kinds(ev, "w") == ["spawn_failed", "fatal"]  # never "started pid None", and no restart loop


def test_readiness_gates_dependents(tmp_path, headless):
    port = free_port()
    cfg = write_config(tmp_path, f"""
        components:
          server:
            command: ["{{py}}", "-c", "import time,subprocess,sys; time.sleep(1.0); subprocess.run([sys.executable, '{{scripts}}/http_server.py', '{port}', '{tmp_path}/down'])"]
            ready: {{http: "http://127.0.0.1:{port}/health", timeout: 20, interval: 0.1}}
          client:
            command: ["{{py}}", "{{scripts}}/crash.py", "--code", "0"]
            depends_on: {{server: ready}}
            exit_on_end: true
    """)
    h = headless(cfg)
    assert h.wait() == 0
    ev = h.events()
    ready = next(e for e in ev if e["kind"] == "ready" and e["component"] == "server")
    started = next(e for e in ev if e["kind"] == "started" and e["component"] == "client")
    assert started["ts"] >= ready["ts"]
    assert ready["ts"] - next(e for e in ev if e["kind"] == "started")["ts"] >= 0.9
    # Ordered shutdown: the server was stopped by the shutdown, after the client completed.
    assert [e for e in ev if e["component"] == "server"][-1]["kind"] == "stopped"


def test_readiness_timeout_is_a_failed_start(tmp_path, headless):
    cfg = write_config(tmp_path, """
        components:
          slow:
            command: ["{py}", "-c", "import time; print('never ready', flush=True); time.sleep(60)"]
            ready: {log: "Server started", timeout: 0.5}
            restart: {max_restarts: 1, backoff: {initial: 0.1}}
            stop: {timeout: 2}
    """)
    h = headless(cfg)
    assert h.wait() == 1
    ev = h.events()
    assert kinds(ev, "slow").count("started") == 2
    assert "not ready within 0.5s" in [e for e in ev if e["kind"] == "fatal"][0]["reason"]
    # Ended by our own stop signal: the exit says so, not "killed ...; no kernel OOM evidence".
    for exited in (e for e in ev if e["kind"] == "exited"):
        assert exited["diagnosis"]["summary"].startswith("ended by rlsup: not ready within 0.5s"), exited


def test_ready_by_log_line(tmp_path, headless):
    cfg = write_config(tmp_path, """
        components:
          a:
            command: ["{py}", "-c", "import time; time.sleep(0.3); print('Uvicorn running on port 1', flush=True); time.sleep(30)"]
            ready: {log: "Uvicorn running on", timeout: 10}
          b:
            command: ["{py}", "-c", "print('b ran')"]
            depends_on: {a: ready}
            exit_on_end: true
    """)
    h = headless(cfg)
    assert h.wait() == 0
    ev = h.events()
    assert next(e for e in ev if e["kind"] == "ready" and e["component"] == "a")["probe"].startswith("log")


def test_liveness_failure_restarts(tmp_path, headless):
    port = free_port()
    down = tmp_path / "down"
    cfg = write_config(tmp_path, f"""
        components:
          server:
            command: ["{{py}}", "{{scripts}}/http_server.py", "{port}", "{down}"]
            ready: {{http: "http://127.0.0.1:{port}/health", timeout: 10, interval: 0.1}}
            alive: {{http: "http://127.0.0.1:{port}/health", interval: 0.2, failures: 2}}
            restart: {{backoff: {{initial: 0.1}}}}
            stop: {{timeout: 3}}
    """)
    h = headless(cfg)
    h.wait_event(lambda e: e["kind"] == "ready", what="ready")
    down.write_text("x")
    h.wait_event(lambda e: e["kind"] == "flag" and e["type"] == "liveness_failed", what="liveness flag")
    down.unlink()
    h.wait_event(lambda e: e["kind"] == "started" and e["attempt"] == 2, what="second attempt")
    h.wait_event(lambda e: e["kind"] == "ready" and e["seq"] > 5, what="ready again")
    h.terminate()
    assert h.wait() == 0
    ev = h.events()
    first_exit = next(e for e in ev if e["kind"] == "exited")
    assert first_exit["signal"] == "SIGTERM"
    rs = next(e for e in ev if e["kind"] == "restart_scheduled")
    assert "liveness probe failed 2 times" in rs["reason"]


def test_tree_kill_sigterm_ignoring_child_and_setsid_grandchild(tmp_path, headless):
    pidfile = tmp_path / "pids"
    cfg = write_config(tmp_path, f"""
        components:
          tree:
            command: ["{{py}}", "{{scripts}}/tree.py", "{pidfile}"]
            stop: {{timeout: 1}}
    """)
    h = headless(cfg)
    wait_for(pidfile.exists, what="tree pids")
    pids = [int(x) for x in pidfile.read_text().split()]
    assert all(pid_alive(p) for p in pids)
    t0 = time.monotonic()
    h.terminate(signal.SIGTERM)
    assert h.wait(30) == 0
    elapsed = time.monotonic() - t0
    wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=5, what="tree gone")
    assert elapsed >= 0.9  # SIGTERM was ignored, SIGKILL came after stop.timeout
    ev = h.events()
    assert [e for e in ev if e["kind"] == "exited"][0]["signal"] == "SIGKILL"


def _leaver(tmp_path, grandchild: str):
    """A component whose root starts a setsid grandchild running ``grandchild`` (Python), notes its pid, and exits
    1 (one restart, stop.timeout 1 s): the config and the file of grandchild pids, one per attempt."""
    pidfile = tmp_path / "grandchildren"
    script = tmp_path / "leaver.py"
    script.write_text(
        "import subprocess, sys, time\n"
        f"g = subprocess.Popen([sys.executable, '-c', {grandchild!r}], start_new_session=True)\n"
        "time.sleep(0.5)\n"
        f"open({str(pidfile)!r}, 'a').write(str(g.pid) + '\\n')\n"
        "sys.exit(1)\n")
    cfg = write_config(tmp_path, f"""
        components:
          w:
            command: ["{{py}}", "{script}"]
            restart: {{max_restarts: 1, backoff: {{initial: 0.1}}}}
            stop: {{timeout: 1}}
    """)
    return cfg, pidfile


def test_leftover_descendants_are_ended_before_restart(tmp_path, headless):
    """The root exits but leaves a setsid grandchild; the next attempt starts only once it is gone."""
    cfg, pidfile = _leaver(tmp_path, "import time\nwhile True: time.sleep(1)")
    h = headless(cfg)
    assert h.wait(30) == 1
    orphans = [int(x) for x in pidfile.read_text().split()]
    assert len(orphans) == 2
    assert not any(pid_alive(p) for p in orphans)
    assert not [e for e in h.events() if e["kind"] == "leftovers"]  # ended by the stop signal: nothing to say


def test_a_leftover_that_ignores_the_stop_signal_is_killed_and_journaled_before_the_restart(tmp_path, headless):
    """The root exits and leaves a setsid grandchild that ignores SIGTERM: the next attempt waits stop.timeout
    for it, kills it, and the journal says so (a GPU run saw a silent 10 s gap here)."""
    cfg, pidfile = _leaver(tmp_path, "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                     "while True: time.sleep(1)")
    h = headless(cfg)
    assert h.wait(30) == 1
    stubborn = [int(x) for x in pidfile.read_text().split()]
    assert not any(pid_alive(p) for p in stubborn)
    ev = h.events()
    left = [e for e in ev if e["kind"] == "leftovers"]
    assert [(e["component"], e["by"], e["pids"]) for e in left] == [
        ("w", "attempt 1", [stubborn[0]]), ("w", "attempt 2", [stubborn[1]])]
    assert "killed with SIGKILL" in left[0]["action"] and "still running 1.0s" in left[0]["action"]
    second = next(e for e in ev if e["kind"] == "started" and e["attempt"] == 2)
    assert left[0]["seq"] < second["seq"]
    assert f"1 process(es) attempt 1 left behind (pid {stubborn[0]})" in h.output


def _sleeps_under(pid: int) -> int:
    """How many `sleep` processes the process tree of pid holds (itself included: a shell can exec
    its last command)."""
    import psutil

    try:
        root = psutil.Process(pid)
        return sum(p.name() == "sleep" for p in [root, *root.children(recursive=True)])
    except psutil.Error:
        return 0


def test_sigterm_to_supervisor_leaves_no_process(tmp_path, headless):
    port = free_port()
    cfg = write_config(tmp_path, f"""
        components:
          server:
            command: ["{{py}}", "{{scripts}}/http_server.py", "{port}", "{tmp_path}/down"]
            ready: {{tcp: "127.0.0.1:{port}", timeout: 10, interval: 0.1}}
          a:
            command: ["{{py}}", "-c", "import time; time.sleep(300)"]
            depends_on: {{server: ready}}
          b:
            command: sh -c 'sleep 300 & sleep 300'
            depends_on: [a]
    """)
    h = headless(cfg)
    b = h.wait_event(lambda e: e["kind"] == "started" and e["component"] == "b", what="b started")
    wait_for(lambda: _sleeps_under(b["pid"]) >= 2, PATIENCE, what="b's shell to start both its sleeps")
    pids = [e["pid"] for e in h.events() if e["kind"] == "started"]
    h.terminate()
    assert h.wait(30) == 0
    assert not any(pid_alive(p) for p in pids)
    import psutil
    marked = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("RLSUP_RUN_DIR") == str(h.run_dir):
                marked.append(p)
        except psutil.Error:
            pass
    assert marked == []
    ev = h.events()
    # reverse dependency order: b stopped before a, a before server
    stopped = [e["component"] for e in ev if e["kind"] == "stopped"]
    assert stopped == ["b", "a", "server"]


def test_exit_on_end_stops_the_rest(tmp_path, headless):
    cfg = write_config(tmp_path, """
        components:
          forever:
            command: ["{py}", "-c", "import time; time.sleep(300)"]
          trainer:
            command: ["{py}", "{scripts}/crash.py", "--code", "0"]
            depends_on: [forever]
            exit_on_end: true
    """)
    h = headless(cfg)
    assert h.wait() == 0
    ev = h.events()
    assert [e["kind"] for e in ev if e["component"] == "forever"][-1] == "stopped"


def test_second_supervisor_on_same_run_dir_is_refused(tmp_path, headless):
    cfg = write_config(tmp_path, """
        components:
          forever:
            command: ["{py}", "-c", "import time; time.sleep(300)"]
    """)
    h1 = headless(cfg)
    h1.wait_event(lambda e: e["kind"] == "started", what="started")
    h2 = headless(cfg)
    assert h2.wait() == 1
    assert "owned by a live supervisor" in h2.output
    assert kinds(h1.events()).count("run_started") == 1


def test_a_supervisor_killed_hard_is_taken_over_and_nothing_is_restarted(tmp_path, headless):
    cfg = write_config(tmp_path, """
        components:
          forever:
            command: ["{py}", "-c", "import time; time.sleep(300)"]
    """)
    h1 = headless(cfg)
    pid = h1.wait_event(lambda e: e["kind"] == "started", what="started")["pid"]
    h1.terminate(signal.SIGKILL)
    h1.wait()
    assert pid_alive(pid)  # the supervisor died hard; its component lives on under its monitor
    h2 = headless(cfg)
    e = h2.wait_event(lambda e: e["kind"] == "adopted", what="adopted event")
    assert e["pid"] == pid and e["attempt"] == 1
    h2.terminate()
    assert h2.wait() == 0
    assert not pid_alive(pid)  # and the new supervisor's shutdown ends it
    assert "taking over 1 running component(s)" in h2.output
    assert [e["pid"] for e in h2.events() if e["kind"] == "started"] == [pid]  # never started again


def test_processes_of_a_dead_monitor_are_ended_as_leftovers(tmp_path, headless):
    cfg = write_config(tmp_path, """
        components:
          forever:
            command: ["{py}", "-c", "import time; time.sleep(300)"]
    """)
    h1 = headless(cfg)
    started = h1.wait_event(lambda e: e["kind"] == "started", what="started")
    pid, monitor = started["pid"], started["monitor_pid"]
    h1.terminate(signal.SIGKILL)
    h1.wait()
    os.kill(monitor, signal.SIGKILL)  # no monitor owns the component any more
    wait_for(lambda: not pid_alive(monitor), what="monitor gone")
    assert pid_alive(pid)
    h2 = headless(cfg)
    e = h2.wait_event(lambda e: e["kind"] == "leftovers", what="leftovers event")
    assert pid in e["pids"] and e["by"].startswith("supervisor pid")
    wait_for(lambda: not pid_alive(pid), timeout=15, what="leftover ended")
    h2.wait_event(lambda e: e["kind"] == "started" and e["pid"] != pid, what="a fresh start")
    h2.terminate()
    assert h2.wait() == 0
    assert "that no monitor owns" in h2.output


def test_same_exception_twice_is_fatal_with_flag(tmp_path, headless):
    script = tmp_path / "launcher.py"
    script.write_text("import argparse\n"
                      "args = argparse.ArgumentParser().parse_args([])\n"
                      "print('Step 1/10', flush=True)\n"
                      "print(args.model_id)\n")
    cfg = write_config(tmp_path, f"""
        components:
          trainer:
            command: ["{{py}}", "{script}"]
            restart: {{backoff: {{initial: 0.1}}}}
    """)
    h = headless(cfg)
    assert h.wait() == 1
    ev = h.events()
    assert kinds(ev, "trainer").count("started") == 2  # not ten: a deterministic bug is not retried forever
    exited = [e for e in ev if e["kind"] == "exited"][0]
    assert exited["diagnosis"]["category"] == "python_exception"
    assert exited["diagnosis"]["exception"].startswith("AttributeError: 'Namespace' object has no attribute 'model_id'")
    assert exited["diagnosis"]["location"].endswith("launcher.py:4")
    flag = next(e for e in ev if e["kind"] == "flag" and e["type"] == "repeated_error")
    assert "stopped automatic restarts" in flag["action"]
    assert "repeated_error" in next(e for e in ev if e["kind"] == "fatal")["reason"]


def test_dying_at_the_same_step_twice_is_a_step_crash(tmp_path, headless):
    cfg = write_config(tmp_path, r"""
        components:
          worker:
            command: ["{py}", "{scripts}/crash.py", "--code", "3", "--lines", "57"]
            restart: {backoff: {initial: 0.1}}
            progress: {pattern: 'Step (?P<step>\d+)/(?P<total>\d+)', total: 100}
    """)
    h = headless(cfg)
    assert h.wait() == 1
    ev = h.events()
    assert [e["step"] for e in ev if e["kind"] == "exited"] == [57, 57]  # last step seen, per attempt
    flag = next(e for e in ev if e["kind"] == "flag" and e["type"] == "step_crash")
    assert "57" in flag["message"]
    assert kinds(ev, "worker")[-1] == "fatal"


def test_restart_with_follows_a_dependency_restart(tmp_path, headless):
    cfg = write_config(tmp_path, f"""
        components:
          server:
            command: ["{{py}}", "{{scripts}}/crash.py", "--count", "{tmp_path}/n", "--fail-times", "1", "--sleep", "1"]
            restart: {{policy: on-failure, backoff: {{initial: 0.2}}}}
          follower:
            command: ["{{py}}", "-c", "import time; time.sleep(300)"]
            depends_on: [server]
            restart_with: [server]
            stop: {{timeout: 2}}
          bystander:
            command: ["{{py}}", "-c", "import time; time.sleep(300)"]
            depends_on: [server]
    """)
    h = headless(cfg)
    h.wait_event(lambda e: e["kind"] == "completed" and e["component"] == "server", what="server completed")
    ev = h.events()
    assert kinds(ev, "follower").count("started") == 2  # restarted along with the server
    assert kinds(ev, "bystander").count("started") == 1  # dependents are left alone by default
    stopping = next(e for e in ev if e["kind"] == "stopping" and e["component"] == "follower")
    assert stopping["by"] == "restart_with server"
    h.terminate()
    assert h.wait() == 0


def test_missing_python_module_is_a_repeated_error_not_a_restart_loop(tmp_path, headless):
    """`python -m pkg` in the wrong interpreter prints one line and exits 1 on every attempt."""
    cfg = write_config(tmp_path, """
        name: nomod
        components:
          inference:
            command: ["{py}", "-m", "no_such_module_for_rlsup_xyz.server"]
            restart: {backoff: {initial: 0.1, max: 0.2}}
    """)
    h = headless(cfg)
    assert h.wait() == 1
    ev = h.events()
    exits = [e for e in ev if e["kind"] == "exited"]
    assert exits[0]["diagnosis"]["category"] == "python_exception"
    assert "No module named" in exits[0]["diagnosis"]["summary"]
    flags = [e for e in ev if e["kind"] == "flag" and e["type"] == "repeated_error"]
    assert flags and "stopped automatic restarts" in flags[0]["action"]
    assert len(exits) == 2  # stopped after the second identical failure


def test_startup_crash_loop_is_flagged(tmp_path, headless):
    """Different messages each time (so not a repeated error), but every attempt dies at once."""
    cfg = write_config(tmp_path, """
        name: loop
        components:
          flaky:
            command: ["{py}", "-c", "import random, sys; print('boom', random.random()); sys.exit(2)"]
            restart: {backoff: {initial: 0.1, max: 0.1}, max_restarts: 4}
    """)
    h = headless(cfg)
    assert h.wait() == 1
    flags = [e for e in h.events() if e["kind"] == "flag" and e["type"] == "crash_loop"]
    assert flags and "within 30 s of starting" in flags[0]["message"]


def test_stall_names_the_last_line_and_the_dependency(tmp_path, headless):
    rollouts = tmp_path / "rollouts"
    (rollouts / "step_12").mkdir(parents=True)
    cfg = write_config(tmp_path, f"""
        name: stall
        components:
          orchestrator:
            command: ["{{py}}", "-c", "import time; time.sleep(600)"]
            watch: [{{path: "{rollouts}", pattern: 'step_(?P<step>\\d+)'}}]
          trainer:
            command: ["{{py}}", "-u", "-c", "import time\\nprint('Step 12/100 | loss 0.1')\\nprint('Waiting for training batch to arrive', flush=True)\\ntime.sleep(600)"]
            depends_on: [orchestrator]
            progress: {{preset: rlsup, stall_after: 2}}
    """)
    h = headless(cfg)
    # the flag once step 12 was read: on a loaded machine the trainer's Python may take longer than stall_after
    # to print it, and a first flag then says "no step yet" (cleared by the step, then flagged again)
    flag = h.wait_event(lambda e: e["kind"] == "flag" and e["type"] == "stall" and "last step" in e["message"],
                        what="stall flag after step 12")
    assert flag["component"] == "trainer" and "last step 12" in flag["message"]
    ev = " | ".join(flag["evidence"])
    assert "Waiting for training batch to arrive" in ev and "orchestrator is running" in ev
    assert "step 12" in ev and str(rollouts) in ev  # the newest rollout the trainer is waiting past
    h.terminate()
    assert h.wait() == 0


def test_exit_zero_before_total_is_a_false_success(tmp_path, headless):
    cfg = write_config(tmp_path, """
        name: early
        components:
          trainer:
            command: ["{py}", "-u", "-c", "for i in range(1, 4): print(f'Step {i}/10 | loss 0.5')"]
            progress: {preset: rlsup}
            restart: {policy: never}
    """)
    h = headless(cfg)
    h.wait()
    flags = [e for e in h.events() if e["kind"] == "flag" and e["type"] == "false_success"]
    assert flags and "3" in flags[0]["message"] and "10" in flags[0]["message"]


def test_on_stall_restart_restarts_a_hung_component(tmp_path, headless):
    cfg = write_config(tmp_path, """
        name: hang
        components:
          trainer:
            command: ["{py}", "-u", "-c", "import time\\nprint('Step 3/100 | loss 0.1', flush=True)\\ntime.sleep(600)"]
            progress: {preset: rlsup, stall_after: 1.5, on_stall: restart}
            restart: {backoff: {initial: 0.1, max: 0.1}}
    """)
    h = headless(cfg)
    flag = h.wait_event(lambda e: e["kind"] == "flag" and e["type"] == "stall", what="stall flag")
    assert "restarting trainer" in flag["action"]
    h.wait_event(lambda e: e["kind"] == "started" and e.get("attempt") == 2, what="restart after the stall")
    h.terminate()
    assert h.wait() == 0


def test_resume_cleans_artefacts_of_future_steps(tmp_path, headless):
    """A trainer-like script checkpoints every 5 steps and writes a rollout per step; it crashes at
    step 13 on its first attempt. rlsup resumes it from step 10 after deleting rollouts 11-13."""
    script = tmp_path / "trainer.py"
    script.write_text(
        "import os, sys\n"
        "start = int(sys.argv[sys.argv.index('--resume-step') + 1]) if '--resume-step' in sys.argv else 0\n"
        "for step in range(start + 1, 21):\n"
        "    os.makedirs(f'rollouts/step_{step}', exist_ok=True)\n"
        "    print(f'Step {step}/20 | loss 0.1', flush=True)\n"
        "    if step % 5 == 0:\n"
        "        os.makedirs(f'ckpt/step_{step}', exist_ok=True)\n"
        "        open(f'ckpt/step_{step}/STABLE', 'w').close()\n"
        "    if step == 13 and not os.path.exists('crashed'):\n"
        "        open('crashed', 'w').close()\n"
        "        raise RuntimeError('boom at 13')\n")
    cfg = write_config(tmp_path, f"""
        name: clean
        components:
          trainer:
            command: ["{{py}}", "{script}"]
            cwd: {tmp_path}
            progress: {{preset: rlsup}}
            resume:
              checkpoints: {tmp_path}/ckpt
              layout: prime-rl
              args: ["--resume-step", "{{step}}"]
              clean: ["rollouts/step_*"]
            restart: {{backoff: {{initial: 0.1, max: 0.1}}}}
    """)
    h = headless(cfg)
    assert h.wait() == 0, h.read()
    ev = h.events()
    cleaned = next(e for e in ev if e["kind"] == "cleaned")
    assert cleaned["step"] == 10
    assert sorted(p.rsplit("_", 1)[1] for p in cleaned["paths"]) == ["11", "12", "13"]
    started = [e for e in ev if e["kind"] == "started"]
    assert started[1]["resume"]["step"] == 10 and cleaned["seq"] < started[1]["seq"]
    assert sorted(int(p.name.split("_")[1]) for p in (tmp_path / "rollouts").iterdir()) == list(range(1, 21))
