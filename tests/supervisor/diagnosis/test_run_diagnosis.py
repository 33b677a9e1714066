"""Run-level diagnosis on run directories built from real log excerpts (tests/fixtures/diagnosis)
and a journal written by supervisor.journal.Journal, as the supervisor writes it."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from rlsup.supervisor.diagnosis import diagnose, diagnose_command, diagnose_run, format_run
from rlsup.supervisor.diagnosis.offline import read_tail
from rlsup.supervisor.diagnosis.run import waited
from rlsup.supervisor.rundir.journal import Journal

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "diagnosis"
T0 = 1_750_000_000.0  # the run starts
H = 3600.0


def excerpt(name: str) -> list[str]:
    return read_tail(FIXTURES / name)[1:]


class Run:
    """A run directory: a journal written the supervisor's way, and component logs."""

    def __init__(self, root: Path):
        self.root = root
        (root / "logs").mkdir(parents=True)
        self.journal = Journal(root / "events.jsonl")
        self.attempts: dict[str, int] = {}

    def emit(self, ts: float, kind: str, component: str | None, **fields: Any) -> None:
        self.journal.last_seq += 1
        self.journal.append({"ts": ts, "seq": self.journal.last_seq, "kind": kind, "component": component, **fields})

    def log(self, name: str, lines: list[str], suffix: str = "") -> Path:
        p = self.root / "logs" / f"{name}.log{suffix}"
        with open(p, "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        return p

    def start(self, ts: float, name: str) -> None:
        self.attempts[name] = self.attempts.get(name, 0) + 1
        self.emit(ts, "started", name, pid=1000 + self.attempts[name], attempt=self.attempts[name], resume=None,
                  command=["python", "-m", name])

    def exit(self, ts: float, name: str, exit_code: int | None, tail: list[str], signal: str | None = None) -> None:
        d = diagnose(tail, exit_code=exit_code, signal=signal)  # what the supervisor records
        self.emit(ts, "exited", name, exit_code=exit_code, signal=signal, uptime_s=60.0, step=d.step,
                  diagnosis=d.to_dict())


def test_inference_cuda_error_hours_before_thousands_of_refused_connections(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    run.emit(T0, "run_started", None, name="gsm8k-grpo", pid=1, run_dir=str(run.root),
             components=["inference", "orchestrator", "trainer"])
    cuda = excerpt("cuda_illegal_memory_access.log")
    refused = excerpt("openrlhf_remote_rm_request_error_refused.log")
    for name in ("inference", "orchestrator", "trainer"):
        run.start(T0, name)
    run.emit(T0 + 60, "ready", "inference", probe="http")
    # the inference server dies of a CUDA error after 1 h, again after its restart, then gives up
    run.log("inference", ["INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.8.5", *cuda])
    run.exit(T0 + 1 * H, "inference", 1, cuda)
    run.emit(T0 + 1 * H, "restart_scheduled", "inference", delay_s=2.0, attempt=2, reason="exited with code 1")
    run.start(T0 + 1 * H + 2, "inference")
    run.log("inference", cuda)
    run.exit(T0 + 2 * H, "inference", 1, cuda)
    run.emit(T0 + 2 * H, "fatal", "inference", reason="crash loop")
    run.emit(T0 + 1 * H + 30, "flag", "orchestrator", type="dependency_down", message="inference is down",
             evidence=["inference exited with code 1"], action="waiting")
    # the trainer retries its reward/inference endpoint for 13 hours and restarts on failure;
    # its log rotated once (trainer.log.1 is the older part)
    run.log("trainer", refused * 1200, suffix=".1")
    run.log("trainer", refused * 800)
    for k in range(2, 15):
        run.exit(T0 + k * H, "trainer", 1, refused[-30:] + ["httpx.ConnectError: [Errno 111] Connection refused"])
        run.start(T0 + k * H + 5, "trainer")
    # unknown event kinds and a torn last line are tolerated
    run.emit(T0 + 14 * H, "gpu_reset", "trainer", note="a kind this reader does not know")
    run.journal.close()
    with open(run.root / "events.jsonl", "a") as fh:
        fh.write('{"ts": 1750050400.0, "seq": 99, "kind": "exi')

    rd = diagnose_run(run.root)
    rc = rd.root_cause
    assert rc is not None
    assert (rc.component, rc.category, rc.source, rc.ts, rc.attempt) == ("inference", "cuda_error", "exit", T0 + H, 1)
    assert rd.recurrences == 1
    by = {(s.component, s.category): s for s in rd.symptoms}
    trainer = by[("trainer", "connection_refused")]
    assert trainer.count == 13  # thirteen exits, 2 h to 14 h
    assert trainer.log_lines >= 2000 * 2  # both refused lines of every retry, rotated log included
    assert trainer.last_ts - trainer.first_ts >= 12 * H
    assert ("orchestrator", "dependency_down") in by
    assert not any(s.component == "inference" for s in rd.symptoms)
    assert any("not events" in n for n in rd.notes)
    assert rd.components["trainer"]["log_files"] == ["trainer.log.1", "trainer.log"]
    assert rd.verdict.startswith("inference failed first at 2025-")
    assert "orchestrator, trainer" in rd.verdict

    human = format_run(rd)
    assert "root cause  inference (cuda_error), attempt 1" in human
    assert "1h00m0" not in human  # durations are h/m
    assert "trainer: connection_refused, 13 exits and" in human and "over 12h" in human
    assert "recurred:  1 more time" in human

    d = rd.to_dict()
    json.dumps(d)  # JSON-able
    assert d["root_cause"]["component"] == "inference" and d["root_cause"]["diagnosis"]["category"] == "cuda_error"
    assert {"verdict", "root_cause", "recurrences", "symptoms", "failures", "components", "notes"} <= set(d)


def test_a_symptom_first_in_time_is_not_the_root_cause(tmp_path: Path) -> None:
    """The trainer's refused connection is recorded before the inference server's OOM-sized KV
    cache error (a client gives up sooner than a server loading a model): the primary failure,
    even when later, is the root cause."""
    run = Run(tmp_path / "run")
    run.emit(T0, "run_started", None, name="r", components=["inference", "trainer"])
    run.start(T0, "inference")
    run.start(T0, "trainer")
    refused = excerpt("openrlhf_remote_rm_request_error_refused.log")
    kv = excerpt("vllm_v1_kv_cache_engine_core_dp0.log")
    run.log("trainer", refused)
    run.exit(T0 + 100, "trainer", 1, refused)
    run.log("inference", kv)
    run.exit(T0 + 300, "inference", 1, kv)
    rd = diagnose_run(run.root)
    assert (rd.root_cause.component, rd.root_cause.category) == ("inference", "inference_memory_config")
    # the earlier refused connection of the trainer is listed, not hidden
    assert [f.component for f in rd.failures] == ["trainer", "inference"]


def test_stops_asked_for_are_not_failures_and_a_clean_run_has_no_root_cause(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    run.emit(T0, "run_started", None, name="r", components=["trainer"])
    run.start(T0, "trainer")
    run.log("trainer", excerpt("neg_trl_grpo_loss_dicts.log"))
    run.emit(T0 + 50, "stopping", "trainer", signal="SIGTERM", by="user")
    run.exit(T0 + 51, "trainer", None, [], signal="SIGTERM")
    run.emit(T0 + 51, "stopped", "trainer", by="user")
    run.emit(T0 + 52, "run_ended", None, reason="stopped by user", exit_code=0)
    rd = diagnose_run(run.root)
    assert rd.root_cause is None and rd.symptoms == [] and rd.failures == []
    assert rd.verdict == "no failure found in the journal or the logs"
    assert rd.components["trainer"]["state"] == "stopped"


def test_values_of_the_wrong_type_in_a_damaged_journal_are_read_as_absent(tmp_path: Path) -> None:
    """The journal is read as typed records: a field of the wrong type (a damaged line) takes its
    default instead of being iterated or passed on (``components: -1`` used to raise TypeError)."""
    run = Run(tmp_path / "run")
    run.emit(T0, "run_started", None, name=True, components=-1)
    run.emit(T0 + 1, "started", "trainer", attempt=True, pid=1)
    run.emit(T0 + 2, "flag", "trainer", type="repeated_error", message="same error", evidence="xyz")
    run.emit(T0 + 3, "exited", "trainer", exit_code=True, signal=9, uptime_s=2.0,
             diagnosis={"category": "python_exception", "summary": "ValueError: x"})
    run.emit(T0 + 4, "exited", 7, exit_code=1, diagnosis={"category": "cuda_error", "summary": "not a component"})
    rd = diagnose_run(run.root)
    assert rd.name is None and set(rd.components) == {"trainer"}
    flag, exit_ = rd.failures
    assert (flag.category, flag.diagnosis["evidence"], flag.attempt) == ("repeated_error", [], 1)
    assert (exit_.category, exit_.attempt, exit_.exit_code, exit_.signal) == ("python_exception", 1, None, None)


def test_log_only_failures_when_the_journal_has_no_exit(tmp_path: Path) -> None:
    """A journal that lost its exits (a supervisor killed mid-run): each log's tail is diagnosed
    and placed at the log's last write."""
    run = Run(tmp_path / "run")
    run.emit(T0, "run_started", None, name="r", components=["inference", "trainer"])
    inf = run.log("inference", excerpt("sglang_not_enough_memory.log"))
    tr = run.log("trainer", excerpt("stream_writer_library_only.log"))
    os.utime(inf, (T0 + 10, T0 + 10))
    os.utime(tr, (T0 + 900, T0 + 900))
    rd = diagnose_run(run.root)
    assert (rd.root_cause.component, rd.root_cause.category, rd.root_cause.source) == (
        "inference", "inference_memory_config", "log")
    assert rd.root_cause.ts == T0 + 10
    assert [(f.component, f.category) for f in rd.failures] == [
        ("inference", "inference_memory_config"), ("trainer", "python_exception")]


def test_log_lines_with_absolute_times_place_the_failure(tmp_path: Path) -> None:
    """No journal at all, a log whose lines carry their time (dolly#139's metaflow prefix): the
    failure is placed at the time its lines say, not at the file's mtime."""
    root = tmp_path / "run"
    (root / "logs").mkdir(parents=True)
    (root / "events.jsonl").write_text("")
    p = root / "logs" / "trainer.log"
    p.write_text("\n".join(excerpt("disk_full_torch_save.log")) + "\n")
    os.utime(p, (T0, T0))
    rd = diagnose_run(root)
    assert rd.root_cause.category == "disk_full"
    assert rd.root_cause.ts == 1682748072.977  # 2023-04-29 06:01:12.977 (read as UTC)
    assert any("no journal events" in n for n in rd.notes)


def test_rlsup_diagnose_run_dir_through_the_command(tmp_path: Path) -> None:
    run = Run(tmp_path / "run")
    run.emit(T0, "run_started", None, name="r", components=["trainer"])
    run.start(T0, "trainer")
    log = excerpt("cuda_oom_verl_entropy.log")
    run.log("trainer", log)
    run.exit(T0 + 5, "trainer", 1, log)
    out = io.StringIO()
    assert diagnose_command([str(run.root)], True, out) == 0
    d = json.loads(out.getvalue())
    assert d["root_cause"]["category"] == "cuda_oom" and d["root_cause"]["component"] == "trainer"
    out = io.StringIO()
    assert diagnose_command([str(run.root), str(FIXTURES / "disk_full_torch_save.log")], False, out) == 0
    text = out.getvalue()
    assert "root cause  trainer (cuda_oom)" in text and "disk_full_torch_save.log: disk_full" in text


def test_an_engine_that_died_at_its_own_exit_is_a_root_cause(tmp_path: Path) -> None:
    """The inference server's own exit with its engine core dead comes first: it is not a symptom of the
    trainer's crash that follows (as in configs/demo-chaos.yaml: three independent faults)."""
    run = Run(tmp_path / "run")
    run.emit(T0, "run_started", None, name="r", components=["inference", "trainer"])
    run.start(T0, "inference")
    run.start(T0, "trainer")
    dead = ["ERROR Engine core proc EngineCore_0 died unexpectedly, shutting down client."]
    run.log("inference", dead)
    run.exit(T0 + 20, "inference", 1, dead)
    crash = ["Traceback (most recent call last):", '  File "/work/train.py", line 12, in <module>',
             "ValueError: bad batch"]
    run.log("trainer", crash)
    run.exit(T0 + 40, "trainer", 1, crash)
    rd = diagnose_run(run.root)
    assert (rd.root_cause.component, rd.root_cause.category) == ("inference", "inference_engine_dead")


def _serving(tmp_path: Path, name: str = "demo") -> Run:
    """The inference server ready at T0 + 3, the trainer started then."""
    run = Run(tmp_path / "run")
    run.emit(T0, "run_started", None, name=name, components=["inference", "trainer"])
    run.start(T0, "inference")
    run.emit(T0 + 3, "ready", "inference", probe="http")
    run.start(T0 + 3, "trainer")
    return run


def _demo_run(tmp_path: Path) -> Run:
    """configs/demo-chaos.yaml's shape: the inference server dies 20 s in and is back 4 s later."""
    run = _serving(tmp_path, "demo-chaos")
    run.emit(T0 + 3, "ready", "trainer", probe="started (no readiness probe)")
    dead = ["Step 26/60 | requests 1 | completions 1024 | batches 1 | requests_per_batch 1.0000 | load_ms 1.5911",
            "ERROR Engine core proc EngineCore_0 died unexpectedly, shutting down client. (chaos die@15s)"]
    run.log("inference", dead)
    run.exit(T0 + 20, "inference", 1, dead)
    run.emit(T0 + 20, "restart_scheduled", "inference", delay_s=1.0, attempt=2, reason="exit 1")
    run.start(T0 + 21, "inference")
    run.emit(T0 + 24, "ready", "inference", probe="http")
    return run


def _stall(run: Run, ts: float) -> None:
    run.emit(ts, "flag", "trainer", type="stall", message="no new step for 20s (last step 29, stall_after 20s)",
             evidence=["last line: Entering barrier for step 30 (chaos hang@30)", "inference is running"],
             action="none (watching)")


def _server_dead_trainer_flagged(tmp_path: Path) -> Run:
    """The inference server dead for good at T0 + 60; the trainer's dependency_down flag raised at T0 + 70."""
    run = Run(tmp_path / "run")
    run.emit(T0, "run_started", None, name="r", components=["inference", "trainer"], how="new")
    run.start(T0, "inference")
    run.emit(T0 + 5, "ready", "inference", probe="http")
    run.start(T0 + 5, "trainer")
    dead = ["ERROR Engine core proc EngineCore_0 died unexpectedly, shutting down client."]
    run.log("inference", dead)
    run.exit(T0 + 60, "inference", 1, dead)
    run.emit(T0 + 60, "fatal", "inference", reason="exit 1; gave up after 0 restarts")
    run.emit(T0 + 70, "flag", "trainer", type="dependency_down", message="inference is down",
             evidence=["inference exited with code 1"], action="waiting")
    return run


def test_a_dependency_down_of_a_run_brought_down_explains_nothing_after_the_resume(tmp_path: Path) -> None:
    """The README's path in sequence: the inference server died for good, the trainer flagged it
    (dependency_down), the user ran `rlsup down` and later `rlsup up --resume`; the trainer then hung with its
    server up. The earlier run's flag was never cleared (its run ended with it raised), so it explained every
    later stall of the trainer, and the hang was listed as the server's consequence. A new start of the run
    (anything but an adoption, where the components kept running) ends what the earlier run's flags said."""
    run = _server_dead_trainer_flagged(tmp_path)
    run.emit(T0 + 90, "stopping", "trainer", signal="SIGTERM", by="shutdown")
    run.exit(T0 + 90, "trainer", None, [], signal="SIGTERM")
    run.emit(T0 + 90, "stopped", "trainer", by="shutdown")
    run.emit(T0 + 91, "run_ended", None, reason="stopped by user (rlsup down)", exit_code=0, outcome="stopped")
    run.emit(T0 + 600, "run_started", None, name="r", components=["inference", "trainer"], how="resumed")
    run.start(T0 + 600, "inference")
    run.emit(T0 + 605, "ready", "inference", probe="http")
    run.start(T0 + 605, "trainer")
    _stall(run, T0 + 700)  # its last step at T0 + 680, the server up since T0 + 605
    rd = diagnose_run(run.root)
    rc = rd.root_cause
    assert rc is not None and (rc.component, rc.category) == ("trainer", "stall"), rc
    assert [(f.component, f.category) for f in rd.independent] == [("inference", "inference_engine_dead")]


def test_a_dependency_down_that_cleared_after_the_last_step_does_not_make_a_later_hang_its_consequence(
        tmp_path: Path) -> None:
    """The README's hang@60 example at a load average of ~400 (`.ci/run`, 2026-11-30): the engine died and was
    back 4 s later; the loaded supervisor flagged the trainer's refused connections 10 s after that and cleared
    the flag a second later, just after the trainer's last step; the trainer then hung at its step 60. It stepped
    with its server back, so the flag explains nothing of the hang: two faults, not one and its consequence."""
    run = _demo_run(tmp_path)  # the engine dead at T0 + 20, ready again at T0 + 24
    run.emit(T0 + 34, "flag", "trainer", type="dependency_down",
             message="trainer cannot reach its dependency inference (starting, down for 14.0s): 3 connection error "
                     "line(s)", evidence=["ConnectionRefusedError"], action="none (watching)")
    run.emit(T0 + 35, "flag_cleared", "trainer", type="dependency_down", message="its dependencies are up again")
    _stall(run, T0 + 54.7)  # its last step at T0 + 34.7: the server had been back for 10 s
    rd = diagnose_run(run.root)
    rc = rd.root_cause
    assert rc is not None and (rc.component, rc.category) == ("trainer", "stall"), rd.verdict
    assert [(f.component, f.category) for f in rd.independent] == [("inference", "inference_engine_dead")]
    # the other side: the same flag with the trainer's last step while the server was down explains the stall
    run2 = _demo_run(tmp_path / "2")
    run2.emit(T0 + 22, "flag", "trainer", type="dependency_down",
              message="trainer cannot reach its dependency inference (starting, down for 2.0s): 3 connection error "
                      "line(s)", evidence=["ConnectionRefusedError"], action="none (watching)")
    run2.emit(T0 + 35, "flag_cleared", "trainer", type="dependency_down", message="its dependencies are up again")
    _stall(run2, T0 + 42)  # its last step at T0 + 22, the server down
    rd2 = diagnose_run(run2.root)
    assert rd2.root_cause is not None and rd2.root_cause.component == "inference", rd2.verdict
    assert ("trainer", "stall") in [(s.component, s.category) for s in rd2.symptoms]


def test_a_dependency_down_still_raised_when_the_run_was_adopted_still_explains(tmp_path: Path) -> None:
    """The other side: a supervisor that took its run over (adopted: the components kept running) keeps what
    the flags said; the trainer starving on a dead server is a symptom of that death, not a hang."""
    run = _server_dead_trainer_flagged(tmp_path)
    run.emit(T0 + 80, "run_started", None, name="r", components=["inference", "trainer"], how="adopted")
    _stall(run, T0 + 120)
    rd = diagnose_run(run.root)
    assert rd.root_cause is not None and rd.root_cause.component == "inference", rd.root_cause
    assert ("trainer", "stall") in [(s.component, s.category) for s in rd.symptoms]


def test_a_hang_after_an_engine_death_the_run_recovered_from_is_the_root_cause(tmp_path: Path) -> None:
    """Issue 27: RLSUP_CHAOS_TRAINER=hang@30 must not be blamed on the inference death 3 s earlier."""
    run = _demo_run(tmp_path)
    _stall(run, T0 + 50)  # progress stopped at T0 + 30, after the engine was back at T0 + 24
    for c in ("trainer", "inference"):
        run.emit(T0 + 90, "stopping", c, signal="SIGTERM", by="shutdown")
        run.exit(T0 + 90, c, None, [], signal="SIGTERM")
        run.emit(T0 + 90, "stopped", c, by="shutdown")
    run.emit(T0 + 91, "run_ended", None, reason="SIGINT received", exit_code=0)
    rd = diagnose_run(run.root)
    rc = rd.root_cause
    assert (rc.component, rc.category, rc.ts) == ("trainer", "stall", T0 + 30)
    assert "hung" in rc.summary and "Entering barrier for step 30" in rc.summary
    assert [(f.component, f.category) for f in rd.independent] == [("inference", "inference_engine_dead")]
    assert rd.independent[0].recovered_ts == T0 + 24
    assert not rd.symptoms  # the engine's own death lines are not the hang's symptoms
    assert rd.verdict.startswith("trainer failed at ") and "(recovered)" in rd.verdict


def test_a_stall_while_its_dependency_was_down_is_a_symptom(tmp_path: Path) -> None:
    run = _demo_run(tmp_path)
    _stall(run, T0 + 42)  # progress stopped at T0 + 22, while the engine was down
    rd = diagnose_run(run.root)
    assert (rd.root_cause.component, rd.root_cause.category) == ("inference", "inference_engine_dead")
    assert any(s.component == "trainer" and s.category == "stall" for s in rd.symptoms)


def test_a_stall_while_a_person_had_stopped_a_peer_is_a_wait_not_a_hang(tmp_path: Path) -> None:
    """`rlsup stop inference` starves the trainer, which is flagged stalled; a crash of the trainer after the
    engine is back is the run's root cause, not the wait (found by the simulator, tests/sim)."""
    run = Run(tmp_path / "run")
    run.emit(T0, "run_started", None, name="demo", pid=1, run_dir=str(run.root), components=["inference", "trainer"])
    run.start(T0 + 1, "inference")
    run.emit(T0 + 3, "ready", "inference", probe="http")
    run.start(T0 + 4, "trainer")
    run.emit(T0 + 20, "command", "inference", command="stop", by="user")
    run.emit(T0 + 20, "stopping", "inference", signal="SIGTERM", by="user")
    run.exit(T0 + 21, "inference", 143, [])
    run.emit(T0 + 21, "stopped", "inference", by="user")
    _stall(run, T0 + 42)  # progress stopped at T0 + 22, while the engine was stopped
    run.start(T0 + 60, "inference")
    run.emit(T0 + 62, "ready", "inference", probe="http")
    crash = ["Traceback (most recent call last):", '  File "/app/train.py", line 3, in <module>',
             "ValueError: bad batch"]
    run.log("trainer", crash)
    run.exit(T0 + 80, "trainer", 1, crash)
    rd = diagnose_run(run.root)
    assert (rd.root_cause.component, rd.root_cause.category) == ("trainer", "python_exception"), rd.root_cause
    assert waited(rd) == {"trainer"}


def _consumers_of_a_stopped_server(tmp_path: Path, how: str) -> Run:
    """`rlsup stop inference` (or, with ``how="crash"``, the server's own death); the orchestrator and the
    trainer flag dependency_down on it, the trainer is flagged stalled, then `rlsup stop orchestrator`."""
    run = Run(tmp_path / "run")
    run.emit(T0, "run_started", None, name="demo", pid=1, run_dir=str(run.root),
             components=["inference", "orchestrator", "trainer"])
    for c, at in (("inference", 1), ("orchestrator", 4), ("trainer", 4)):
        run.start(T0 + at, c)
        run.emit(T0 + at + 1, "ready", c, probe="http")
    if how == "crash":
        dead = ["ERROR Engine core proc EngineCore_0 died unexpectedly, shutting down client."]
        run.log("inference", dead)
        run.exit(T0 + 20, "inference", 1, dead)
        run.emit(T0 + 20, "fatal", "inference", reason="exit 1; gave up after 0 restarts")
    else:
        run.emit(T0 + 20, "stopping", "inference", signal="SIGTERM", by="user")
        run.exit(T0 + 20, "inference", None, [], signal="SIGTERM")
        run.emit(T0 + 20, "stopped", "inference", by="user")
    for c in ("orchestrator", "trainer"):
        run.emit(T0 + 21, "flag", c, type="dependency_down",
                 message=f"{c} cannot reach its dependency inference (stopped): 1 connection error line(s)",
                 evidence=["inference server not reachable", "dependency inference: state stopped"], action="")
    run.emit(T0 + 41, "flag", "trainer", type="stall", message="no new step for 20s (last step 8, stall_after 20s)",
             evidence=["last line: /update_weights_from_disk: the server is down"], action="none (watching)")
    run.emit(T0 + 42, "stopping", "orchestrator", signal="SIGTERM", by="user")
    run.exit(T0 + 42, "orchestrator", None, [], signal="SIGTERM")
    run.emit(T0 + 42, "stopped", "orchestrator", by="user")
    return run


def test_consumers_of_a_server_a_person_stopped_wait_they_do_not_fail(tmp_path: Path) -> None:
    """The fault explorer (RLSUP_EXPLORE_SEED=86): `rlsup stop inference`, then `rlsup stop orchestrator`, then
    `rlsup down`. The consumers' dependency_down flags and the trainer's stall starved by the stop were listed
    as failures, the first of them as the root cause of a run nothing harmed. They wait on a person: no failure,
    listed as waits; the trainer waited, it did not hang."""
    rd = diagnose_run(_consumers_of_a_stopped_server(tmp_path, "stop").root)
    assert rd.failures == [] and rd.root_cause is None, rd.verdict
    assert sorted((f.component, f.category) for f in rd.waits) == [
        ("orchestrator", "dependency_down"), ("trainer", "dependency_down"), ("trainer", "stall")]
    assert waited(rd) == {"trainer"}
    assert rd.to_dict()["waits"][0]["category"] == "dependency_down"
    assert rd.verdict == ("no failure found in the journal or the logs; orchestrator, trainer waited on what was "
                          "stopped or restarted on purpose")


def test_a_live_consumer_whose_log_ends_in_refused_connections_to_a_stopped_server_waits(tmp_path: Path) -> None:
    """Walking the README's path: `rlsup stop inference` on the live demo, then `rlsup diagnose runs/demo` while
    the trainer, still running, logged its refused pushes: the log's tail (no exit recorded) was named the
    root cause. A running consumer whose dependency_down flag waits on a person waits in its log too."""
    run = _serving(tmp_path)
    run.emit(T0 + 20, "stopping", "inference", signal="SIGTERM", by="user")
    run.exit(T0 + 20, "inference", None, [], signal="SIGTERM")
    run.emit(T0 + 20, "stopped", "inference", by="user")
    run.log("trainer", ["Step 12/400 | reward 0.7", "/update_weights_from_disk: the server is down "
                        "(http://127.0.0.1:8731/update_weights_from_disk: [Errno 111] Connection refused)"])
    run.emit(T0 + 21, "flag", "trainer", type="dependency_down", evidence=[], action="",
             message="trainer cannot reach its dependency inference (stopped): 1 connection error line(s)")
    rd = diagnose_run(run.root)
    assert rd.failures == [] and rd.root_cause is None, rd.verdict
    assert [(f.component, f.category, f.source) for f in rd.waits] == [
        ("trainer", "dependency_down", "flag"), ("trainer", "connection_refused", "log")]


def test_consumers_of_a_server_that_died_fail_with_it(tmp_path: Path) -> None:
    """The other side: the same flags on a server that died are its symptoms, the death the root cause."""
    rd = diagnose_run(_consumers_of_a_stopped_server(tmp_path, "crash").root)
    assert rd.root_cause is not None and rd.root_cause.component == "inference", rd.verdict
    assert {(s.component, s.category) for s in rd.symptoms} >= {
        ("orchestrator", "dependency_down"), ("trainer", "dependency_down"), ("trainer", "stall")}
    assert rd.waits == []


def test_a_dependency_flag_on_a_server_a_person_restarts_waits_until_it_is_ready(tmp_path: Path) -> None:
    """`rlsup restart inference`: the consumers' refused connections while it comes back wait on that person;
    a flag after it was ready again (its next death) is a failure."""
    run = _serving(tmp_path)
    run.emit(T0 + 10, "stopping", "inference", signal="SIGTERM", by="user")
    run.exit(T0 + 10, "inference", None, [], signal="SIGTERM")
    run.start(T0 + 11, "inference")
    flag = {"type": "dependency_down", "message": "trainer cannot reach its dependency inference (starting): "
            "1 connection error line(s)", "evidence": [], "action": ""}
    run.emit(T0 + 12, "flag", "trainer", **flag)
    run.emit(T0 + 20, "ready", "inference", probe="http")
    run.emit(T0 + 21, "flag_cleared", "trainer", type="dependency_down", message="inference is back")
    run.emit(T0 + 40, "flag", "trainer", **flag)  # (no death recorded: the flag alone)
    rd = diagnose_run(run.root)
    assert [(f.component, f.ts) for f in rd.waits] == [("trainer", T0 + 12)]
    assert [(f.component, f.category, f.ts) for f in rd.failures] == [("trainer", "dependency_down", T0 + 40)]


def test_a_stall_while_a_person_restarts_a_slow_server_is_a_wait_until_it_is_ready(tmp_path: Path) -> None:
    """`rlsup restart inference`: the server takes two minutes to load (ready at T0 + 140) and the trainer, quiet
    while it waits, is flagged stalled at T0 + 60: a wait on that person, no hang. Once the server is ready
    again, a stall is the trainer's own."""
    run = _serving(tmp_path)
    run.emit(T0 + 20, "stopping", "inference", signal="SIGTERM", by="user", reason="restart requested by user")
    run.exit(T0 + 21, "inference", None, [], signal="SIGTERM")
    run.start(T0 + 21, "inference")
    _stall(run, T0 + 60)
    run.emit(T0 + 140, "ready", "inference", probe="http")
    rd = diagnose_run(run.root)
    assert rd.failures == [] and waited(rd) == {"trainer"}, rd.verdict
    _stall(run, T0 + 300)  # its last step at T0 + 280, the server ready since T0 + 140
    rd = diagnose_run(run.root)
    assert rd.root_cause is not None and (rd.root_cause.component, rd.root_cause.ts) == ("trainer", T0 + 280)


def test_an_exit_rlsup_then_records_as_a_stop_is_no_failure_but_a_forced_one_is(tmp_path: Path) -> None:
    """The platform's SIGTERM reaches every process at once: the orchestrator exits 143 before rlsup's own stop
    and rlsup records it `stopped` by preemption: no failure. A stop rlsup forced on its verdict (a failed
    liveness probe: `stopping` by rlsup, then the exit, `stopped`, a new attempt) stays the trainer's failure."""
    run = Run(tmp_path / "run")
    run.emit(T0, "run_started", None, name="demo", pid=1, run_dir=str(run.root), components=["orchestrator", "trainer"])
    run.start(T0 + 1, "orchestrator")
    run.start(T0 + 1, "trainer")
    run.emit(T0 + 30, "stopping", "trainer", signal="SIGTERM", by="rlsup", reason="liveness probe failed 3 times")
    run.exit(T0 + 31, "trainer", None, [], signal="SIGTERM")
    run.emit(T0 + 31, "stopped", "trainer", by="rlsup")
    run.start(T0 + 32, "trainer")
    run.exit(T0 + 60, "orchestrator", 143, ["Terminated"])
    run.emit(T0 + 60, "stopped", "orchestrator", by="preemption")
    rd = diagnose_run(run.root)
    assert [(f.component, f.attempt) for f in rd.failures] == [("trainer", 1)], rd.failures
    assert rd.components["orchestrator"]["failures"] == 0


def test_a_stall_that_cleared_by_itself_is_no_hang(tmp_path: Path) -> None:
    run = _demo_run(tmp_path)
    _stall(run, T0 + 50)
    run.emit(T0 + 55, "flag_cleared", "trainer", type="stall", message="progress again")
    rd = diagnose_run(run.root)
    assert (rd.root_cause.component, rd.root_cause.category) == ("inference", "inference_engine_dead")


def test_a_stall_cleared_only_by_its_attempt_ending_is_still_a_hang(tmp_path: Path) -> None:
    """The journal the README's hang example writes: the stall flag is cleared when the hung attempt is
    stopped (`flag_cleared` by `attempt_ended`); that is not progress resumed, so the hang stays the root."""
    run = _demo_run(tmp_path)
    _stall(run, T0 + 50)
    run.emit(T0 + 90, "stopping", "trainer", signal="SIGTERM", by="shutdown")
    run.exit(T0 + 90, "trainer", 143, [])
    run.emit(T0 + 90, "flag_cleared", "trainer", type="stall", message="attempt 1 ended", by="attempt_ended")
    run.emit(T0 + 90, "stopped", "trainer", by="shutdown")
    run.emit(T0 + 91, "run_ended", None, reason="SIGINT received", exit_code=0)
    rc = diagnose_run(run.root).root_cause
    assert (rc.component, rc.category) == ("trainer", "stall")


def test_a_false_success_is_a_failure_of_its_own(tmp_path: Path) -> None:
    """Issue 27: RLSUP_CHAOS_TRAINER=exit0@40: the false success is named, before a recovered engine death."""
    run = _demo_run(tmp_path)
    run.exit(T0 + 16, "trainer", 0, ["Step 39/60 | loss 0.1"])
    run.emit(T0 + 16, "flag", "trainer", type="false_success",
             message="exited 0 at step 39 of 60: not finished, treated as a failure", evidence=["exit code 0"])
    run.start(T0 + 17, "trainer")
    run.emit(T0 + 17, "ready", "trainer", probe="started (no readiness probe)")
    run.exit(T0 + 60, "trainer", 0, ["Step 60/60 | loss 0.1"])
    run.emit(T0 + 60, "completed", "trainer")
    rd = diagnose_run(run.root)
    rc = rd.root_cause
    assert (rc.component, rc.category, rc.ts) == ("trainer", "false_success", T0 + 16)
    assert "false success" in rc.summary and rd.verdict.startswith("trainer failed first at ")


def test_a_slow_start_that_cleared_is_no_hang(tmp_path: Path) -> None:
    """A trainer with no step for 21 s after its start (a loaded machine), then progress: the stall
    began when the attempt became ready, which is no restart."""
    run = _demo_run(tmp_path)
    run.emit(T0 + 23.5, "flag", "trainer", type="stall", message="no new step for 21s (last step None, stall_after 20s)",
             evidence=["last line: Inference server at http://127.0.0.1:1: rlsup-tiny"], action="none (watching)")
    run.emit(T0 + 26, "flag_cleared", "trainer", type="stall", message="progress again at step 1")
    crash = ["Traceback (most recent call last):", '  File "/work/train.py", line 57, in <module>',
             "rlsup.trainer.chaos.ChaosCrash: injected failure at step 57 (chaos crash@57)"]
    run.log("trainer", crash)
    run.exit(T0 + 60, "trainer", 1, crash)
    run.start(T0 + 61, "trainer")
    run.emit(T0 + 61, "ready", "trainer", probe="started (no readiness probe)")
    rd = diagnose_run(run.root)
    assert (rd.root_cause.component, rd.root_cause.category) == ("trainer", "python_exception")


def test_a_stray_file_beside_the_rotations_is_not_read_as_one(tmp_path: Path) -> None:
    """The run's logs are read through the one reader of a log's rotation chain (logs.log_chain): a
    `trainer.log.²` ('²'.isdigit() is true, int('²') raises) or `trainer.log.bak` beside the real
    rotations neither breaks `rlsup diagnose` nor joins the log."""
    run = Run(tmp_path / "run")
    run.emit(T0, "run_started", None, name="r", components=["trainer"])
    run.log("trainer", ["step 1", "step 2"], suffix=".1")
    run.log("trainer", excerpt("stream_writer_library_only.log"))
    run.log("trainer", ["Traceback (most recent call last):", "ValueError: not this log"], suffix=".²")
    run.log("trainer", ["not this either"], suffix=".bak")
    rd = diagnose_run(run.root)
    assert rd.components["trainer"]["log_files"] == ["trainer.log.1", "trainer.log"]


def _hms(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


def _crash_after_refused(tmp_path: Path, refused_at: float) -> Run:
    """The README's crash@57 example: the inference server dies at 15 s and is back at 25 s; the trainer
    raises at 40 s. The orchestrator stamps its lines with a time of day only (trainer/steplog.py)."""
    t0 = float(int(time.time()) - 3600)
    run = Run(tmp_path / "run")
    run.emit(t0, "run_started", None, name="demo-chaos", pid=1, run_dir=str(run.root),
             components=["inference", "orchestrator", "trainer"])
    for name in ("inference", "orchestrator", "trainer"):
        run.start(t0, name)
    run.exit(t0 + 15, "inference", None, [], signal="SIGKILL")
    run.start(t0 + 20, "inference")
    run.emit(t0 + 25, "ready", "inference", probe="http")
    refused = [f"{_hms(t0 + refused_at + k)} step 21: inference server not reachable (attempt {k + 2}): "
               f"http://127.0.0.1:8731/v1/completions: [Errno 111] Connection refused; retrying in 1.0s" for k in range(3)]
    steps = [f"{_hms(t0 + 10)} step 20: 16 rollouts written", *([] if refused_at > 40 else refused),
             f"{_hms(t0 + 30)} step 30: 16 rollouts written", *(refused if refused_at > 40 else [])]
    os.utime(run.log("orchestrator", steps), (t0 + 60, t0 + 60))
    tb = ["Traceback (most recent call last):", '  File "/w/trainer/train.py", line 149, in main', "    step()",
          "ValueError: injected failure at step 57"]
    os.utime(run.log("trainer", tb), (t0 + 40, t0 + 40))
    run.exit(t0 + 40, "trainer", 1, tb)
    run.journal.close()
    return run


def test_refused_lines_stamped_with_a_time_of_day_before_the_root_cause_are_not_its_symptoms(tmp_path: Path) -> None:
    """`rlsup diagnose` on the README's crash@57 example listed the orchestrator's refused connections at
    02:27:53 (the injected inference death) as symptoms of the trainer's crash at 02:28:14: a time of day
    without a date was read as no time at all."""
    rd = diagnose_run(_crash_after_refused(tmp_path / "before", refused_at=16).root)
    assert rd.root_cause is not None and (rd.root_cause.component, rd.root_cause.category) == ("trainer",
                                                                                              "python_exception")
    assert not [s for s in rd.symptoms if s.component == "orchestrator"], rd.symptoms
    assert "orchestrator logged errors" not in rd.verdict

    rd = diagnose_run(_crash_after_refused(tmp_path / "after", refused_at=45).root)
    after = [s for s in rd.symptoms if (s.component, s.category) == ("orchestrator", "connection_refused")]
    assert after and after[0].log_lines == 3 and after[0].first_ts == rd.root_cause.ts + 5, rd.symptoms


# ---------------------------------------------------------------------- issue 38: sequences


def test_a_producers_disk_full_death_after_its_consumers_last_step_is_the_root_cause(tmp_path: Path) -> None:
    """The orchestrator dies of a full disk a few seconds after the trainer's last step (the trainer had the
    batches it needed until then); the trainer starves and is flagged. The death explains the stall."""
    run = Run(tmp_path / "run")
    run.emit(T0, "run_started", None, name="demo", components=["orchestrator", "trainer"])
    run.start(T0, "orchestrator")
    run.start(T0, "trainer")
    enospc = ["Traceback (most recent call last):", '  File "/w/orchestrator.py", line 51, in write_rollouts',
              "    f.write(data)", "OSError: [Errno 28] No space left on device"]
    run.log("orchestrator", enospc)
    run.exit(T0 + 103, "orchestrator", 1, enospc)  # 3 s after the trainer's last step (at T0 + 100)
    run.emit(T0 + 103, "fatal", "orchestrator", reason="disk_full")
    run.emit(T0 + 121, "flag", "trainer", type="stall", message="no new step for 21s (last step 57, stall_after 20s)",
             evidence=["last line: Waiting for training batch to arrive"])
    rd = diagnose_run(run.root)
    assert rd.root_cause is not None and (rd.root_cause.component, rd.root_cause.category) == (
        "orchestrator", "disk_full"), format_run(rd)
    assert [(s.component, s.category) for s in rd.symptoms] == [("trainer", "stall")]
    assert "independently" not in rd.verdict and "(recovered)" not in rd.verdict


def test_a_second_component_out_of_the_same_full_disk_is_a_consequence_not_an_independent_fault(
        tmp_path: Path) -> None:
    """Walked with the demo on a 40 MB run dir filled mid-run: the orchestrator's write, then the trainer's a
    second later, both ENOSPC. `rlsup diagnose` named the orchestrator and then "independently, trainer: OSError
    [Errno 28]": one full disk read as two faults. A full disk is the host's, not a component's."""
    run = Run(tmp_path / "run")
    run.emit(T0, "run_started", None, name="demo", components=["orchestrator", "trainer"])
    run.start(T0, "orchestrator")
    run.start(T0, "trainer")
    def enospc(where: str) -> list[str]:
        return ["Traceback (most recent call last):", f'  File "/w/{where}.py", line 50, in write',
                "    f.write(data)", "OSError: [Errno 28] No space left on device"]
    run.log("orchestrator", enospc("rollouts"))
    run.exit(T0 + 12, "orchestrator", 1, enospc("rollouts"))
    run.log("trainer", enospc("atomic"))
    run.exit(T0 + 13, "trainer", 1, enospc("atomic"))
    rd = diagnose_run(run.root)
    assert rd.root_cause is not None and (rd.root_cause.component, rd.root_cause.category) == (
        "orchestrator", "disk_full"), format_run(rd)
    assert ("trainer", "disk_full") in [(s.component, s.category) for s in rd.symptoms], rd.symptoms
    assert "independently" not in rd.verdict and "trainer failed as a consequence" in rd.verdict, rd.verdict


@pytest.mark.parametrize("said", [
    "RuntimeError: [enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file data.pkl: "
    "file write failed",
    "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 832 vs 726",
])
def test_a_checkpoint_write_failing_after_another_component_filled_the_disk_is_a_consequence(
        tmp_path: Path, said: str) -> None:
    """The orchestrator dies of ENOSPC; a second later the trainer's torch.save fails in torch's words, which name
    no errno (the wordings of real full disks: pytorch/pytorch#156955, verl-project/verl#3346). It was listed
    "independently, trainer: RuntimeError ...": the same full disk read as two faults."""
    run = Run(tmp_path / "run")
    run.emit(T0, "run_started", None, name="demo", components=["orchestrator", "trainer"])
    run.start(T0, "orchestrator")
    run.start(T0, "trainer")
    enospc = ["Traceback (most recent call last):", '  File "/w/rollouts.py", line 50, in write', "    f.write(data)",
              "OSError: [Errno 28] No space left on device"]
    run.log("orchestrator", enospc)
    run.exit(T0 + 12, "orchestrator", 1, enospc)
    save = ["Traceback (most recent call last):", '  File "/w/train.py", line 90, in save',
            "    torch.save(state, path)", '  File "/v/torch/serialization.py", line 866, in _save',
            "    zip_file.write_record('data.pkl', data_value, len(data_value))", said]
    run.log("trainer", save)
    run.exit(T0 + 13, "trainer", 1, save)
    rd = diagnose_run(run.root)
    assert rd.root_cause is not None and (rd.root_cause.component, rd.root_cause.category) == (
        "orchestrator", "disk_full"), format_run(rd)
    assert "independently" not in rd.verdict and "trainer failed as a consequence" in rd.verdict, rd.verdict
    # alone (no full disk before it), the same failure is the trainer's own, with the disk named in its hint
    alone = Run(tmp_path / "alone")
    alone.emit(T0, "run_started", None, name="demo", components=["trainer"])
    alone.start(T0, "trainer")
    alone.log("trainer", save)
    alone.exit(T0 + 13, "trainer", 1, save)
    rd = diagnose_run(alone.root)
    assert rd.root_cause is not None and rd.root_cause.component == "trainer", format_run(rd)
    assert "free space and quota" in format_run(rd), format_run(rd)


def test_a_fault_after_a_resume_and_healthy_steps_is_independent_of_the_one_before(tmp_path: Path) -> None:
    """crash@30, resumed, then the OOM killer at step 80: two faults, not one and its consequence; the kill
    shows the line before it."""
    run = Run(tmp_path / "run")
    run.emit(T0, "run_started", None, name="demo", components=["trainer"])
    run.start(T0, "trainer")
    crash = ["Step 30/200", "Traceback (most recent call last):", '  File "/w/train.py", line 88, in step',
             "ValueError: injected failure at step 30"]
    run.log("trainer", crash)
    run.exit(T0 + 30, "trainer", 1, crash)
    run.start(T0 + 32, "trainer")
    run.emit(T0 + 33, "ready", "trainer", probe="started")
    oom = ["Step 79/200", "Step 80/200", "Allocating 61.5 GiB host buffer for step 80 rollout cache"]
    run.log("trainer", oom)
    run.exit(T0 + 90, "trainer", None, oom, signal="SIGKILL")
    run.start(T0 + 92, "trainer")  # resumed again; the run goes on
    run.emit(T0 + 93, "ready", "trainer", probe="started")
    rd = diagnose_run(run.root)
    assert rd.root_cause is not None and rd.root_cause.category == "python_exception"
    assert not [s for s in rd.symptoms if s.component == "trainer"], format_run(rd)
    assert [(f.component, f.category) for f in rd.independent] == [("trainer", "killed")]
    killed = next(f for f in rd.failures if f.category == "killed")
    assert "last line: Allocating 61.5 GiB host buffer for step 80 rollout cache" in killed.diagnosis["evidence"]
    assert "did not recur" in format_run(rd)  # not "it will recur on restart until fixed"
