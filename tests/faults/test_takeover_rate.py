"""The rate and ETA after a take-over or a pause of the supervisor: the step lines it catches up on are not
counted as steps made at the moment it reads them.

``kill -9`` of the supervisor while the trainer steps fast, a few seconds without one while its monitor
keeps writing the log, then ``rlsup up -d`` again: the new supervisor adopts the trainer and reads the
lines it missed in one go. Those lines were written over the seconds it was away; counted as if made when
read, a trainer making 2 steps/s showed 45-78 steps/s and an ETA of minutes for hours. The same after a
SIGSTOP of the supervisor (~140 steps/s for 10). Every rate the supervisor reports is compared with the rate
the trainer's own clock gives (it prints its time with each step): no timing of ours is asserted, so the
machine's load moves the figures, not the verdict.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
from pathlib import Path

from tests.conftest import wait_for
from tests.faults import harness
from tests.faults.harness import LIVENESS_S, Subscriber, alive, figure

fault_run, token = harness.fault_run, harness.token

TOTAL = 100000
# A step every 0.02 s (50 steps/s), or as many seconds as the file `pace` says once the test writes it.
TRAINER = """
import os, sys, time
step = 0
while True:
    step += 1
    print(f"Step {step}/TOTAL t={time.monotonic():.4f}", flush=True)
    time.sleep(float(open(sys.argv[1]).read()) if os.path.exists(sys.argv[1]) else 0.02)
""".replace("TOTAL", str(TOTAL))

CONFIG = """
name: takeover-rate
components:
  trainer:
    command: ["{py}", "{tmp}/trainer.py", "{tmp}/pace"]
    progress: {pattern: 'Step (?P<step>\\d+)/(?P<total>\\d+)'}
"""


def _wait(pred, what: str) -> None:
    wait_for(pred, LIVENESS_S, 0.1, what=what)


def _own_times(run_dir: Path) -> dict[int, float]:
    """Each step's time, as the trainer's own clock printed it (its log, rotations included)."""
    out = {}
    for f in sorted((run_dir / "logs").glob("trainer.log*")):
        for line in f.read_text(errors="replace").splitlines():
            if line.startswith("Step ") and " t=" in line:
                out[int(line.split()[1].split("/")[0])] = float(line.rsplit("t=", 1)[1])
    return out


def _set_pace(run, seconds: float) -> None:
    tmp = Path(run.tmp) / "pace.tmp"
    tmp.write_text(str(seconds))
    tmp.rename(Path(run.tmp) / "pace")


def _own_rate(run_dir: Path, since_step: int) -> float:
    """The trainer's rate by its own clock, over its steps from ``since_step`` on (the median interval)."""
    times = _own_times(run_dir)
    gaps = [times[s] - times[s - 1] for s in range(since_step + 1, max(times) + 1) if s in times and s - 1 in times]
    return 1.0 / statistics.median(gaps)


def test_rate_after_a_take_over_is_not_inflated_by_the_lines_caught_up_on(fault_run, token):
    run = fault_run()
    (Path(run.tmp) / "trainer.py").write_text(TRAINER)
    run.write_config(CONFIG)
    run.up()

    def saved_step() -> int:  # the step state.json holds: where the next supervisor goes on from
        try:
            return int(json.loads((run.run_dir / "state.json").read_text())["components"]["trainer"].get("step") or 0)
        except (OSError, ValueError, KeyError):
            return 0

    _wait(lambda: saved_step() >= 20, "state.json to hold a step")
    saved = saved_step()
    old = run.pid
    os.kill(old, signal.SIGKILL)
    _wait(lambda: not alive(old), "the supervisor to die")
    time.sleep(2.0)  # the trainer steps on, its monitor writes the log: the backlog
    # Then 2 steps/s: the steps read live are far apart next to any delay in reading them.
    _set_pace(run, 0.5)
    time.sleep(0.6)
    seq = run.events()[-1]["seq"]
    run.up()
    adopted = run.wait_event(lambda e: e["kind"] == "adopted" and e["component"] == "trainer", since=seq,
                             what="adopted")
    sub = Subscriber(run.run_dir / "rlsup.sock")
    try:
        def rated() -> list[dict]:
            return [e for e in sub.events if e.get("kind") == "progress" and e.get("component") == "trainer"
                    and e.get("rate") is not None]

        _wait(lambda: len(rated()) >= 5, "five progress events with a rate after the take-over")
        reported = [(e["step"], e["rate"]) for e in rated()]
    finally:
        sub.close()
    first = min(s for s, _ in reported)
    real = _own_rate(run.run_dir, first)  # over the steps read live
    assert real < 5, real  # the slow pace the test set, 2 steps/s or less under load (a sanity check)
    figure("rate_after_take_over", own_rate=round(real, 2), reported=[[s, round(r, 2)] for s, r in reported],
           backlog_steps=first - saved, load=os.getloadavg()[0])
    # Each rate is over the window of points read since the take-over: the first, over two of them, moves with
    # how late each was read (the machine's load); the median of the first five much less. The burst, counted,
    # made them 20-40x the trainer's rate.
    rates = [r for _, r in reported]
    assert statistics.median(rates) <= 3 * real and max(rates) <= 10 * real, (
        f"steps/s reported after the take-over (adopted {adopted['ts']:.3f}), the trainer's own rate {real:.2f}: "
        f"{reported}")
    # What `rlsup status` shows (the state's rate and ETA, as the TUI and Prometheus read them), a few steps on.
    shown = run.status()["components"]["trainer"]
    assert shown["rate"] is not None and shown["rate"] <= 3 * real, (shown["rate"], real)
    assert shown["eta_s"] >= (TOTAL - shown["step"]) / (3 * real) - 1.0, (shown, real)


def test_rate_after_the_supervisor_was_stopped_is_the_trainers(fault_run, token):
    """SIGSTOP of the supervisor for 3 s while the trainer makes 10 steps/s, then SIGCONT: the 30 step lines read
    at once were counted as steps made at that instant (~70 steps/s shown for 10)."""
    run = fault_run()
    (Path(run.tmp) / "trainer.py").write_text(TRAINER)
    _set_pace(run, 0.1)
    run.write_config(CONFIG)
    run.up()
    sub = Subscriber(run.run_dir / "rlsup.sock")
    try:
        _wait(lambda: sub.attached and any(e.get("kind") == "progress" and e.get("rate") for e in sub.events),
              "a rate")
        time.sleep(3.0)  # a full window of steps read as they came
        os.kill(run.pid, signal.SIGSTOP)
        time.sleep(3.0)
        since = time.time()
        os.kill(run.pid, signal.SIGCONT)

        def rated() -> list[dict]:
            return [e for e in sub.events if e.get("kind") == "progress" and e.get("component") == "trainer"
                    and e.get("rate") is not None and e.get("ts", 0) >= since]

        _wait(lambda: len(rated()) >= 5, "five progress events with a rate after SIGCONT")
        reported = [(e["step"], e["rate"]) for e in rated()]
    finally:
        sub.close()
    real = _own_rate(run.run_dir, reported[0][0] - 60)  # over the window's steps, the stop's among them
    figure("rate_after_sigstop", own_rate=round(real, 2), reported=[[s, round(r, 2)] for s, r in reported],
           load=os.getloadavg()[0])
    assert max(r for _, r in reported) <= 3 * real, (f"steps/s reported after SIGCONT, the trainer's own rate "
                                                     f"{real:.2f}: {reported}")
