"""A component that makes steps: ``Step N/TOTAL | reward R`` lines, checkpoints, a chosen way to end.

    stepper.py --total 20 [--sleep 0.05] [--ckpt DIR --ckpt-every K [--ckpt-marker NAME]]
               [--exit-at N --exit-code C --once MARKERFILE] [--resume-step S]

``--exit-at N`` ends the process with ``--exit-code`` right after step N (only while ``--once`` does
not exist yet; it is created then, so a restarted attempt goes on). Checkpoints are directories
``DIR/step_K`` with a ``weights.bin`` (and the marker file if asked), written before the step line.
SIGUSR1 (what rlsup sends on a preemption with ``preempt: {signal: SIGUSR1}``) checkpoints the last step done
at once, with ``--ckpt``.

``--linger S`` (in a Slurm step): on SIGTERM, the step's ``srun`` client is ended at once (SIGKILL: the
supervisor sees the attempt end) while the task goes on for up to ``S`` seconds: the step is still ending in
Slurm after its srun did (a real-Slurm CI run caught rlsup's requeue in that window).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--total", type=int, default=20)
p.add_argument("--sleep", type=float, default=0.02)
p.add_argument("--ckpt")
p.add_argument("--ckpt-every", type=int, default=0)
p.add_argument("--ckpt-marker")
p.add_argument("--exit-at", type=int)
p.add_argument("--exit-code", type=int, default=0)
p.add_argument("--once")
p.add_argument("--resume-step", type=int, default=0)
p.add_argument("--linger", type=float, default=0.0)
a = p.parse_args()


def checkpoint(step: int) -> None:
    d = os.path.join(a.ckpt, f"step_{step}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "weights.bin"), "wb") as f:
        f.write(os.urandom(256))
    if a.ckpt_marker:
        open(os.path.join(d, a.ckpt_marker), "w").close()


def srun_client() -> int | None:
    """The pid of this step's srun client (on this host: the test cluster's nodes are one machine)."""
    want = [f"--jobid={os.environ.get('SLURM_JOB_ID')}", f"--job-name={os.environ.get('SLURM_JOB_NAME')}"]
    for d in os.listdir("/proc"):
        try:
            argv = open(f"/proc/{d}/cmdline", "rb").read().decode(errors="replace").split("\0")
        except (OSError, ValueError):
            continue
        if d.isdigit() and argv and argv[0].endswith("srun") and all(w in argv for w in want):
            return int(d)
    return None


def linger(*_: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if (pid := srun_client()) is not None:
        os.kill(pid, signal.SIGKILL)
    time.sleep(a.linger)
    os._exit(0)


if a.linger:
    signal.signal(signal.SIGTERM, linger)
done = a.resume_step
asked = []
signal.signal(signal.SIGUSR1, lambda *_: asked.append(1))
start = a.resume_step + 1
print(f"starting at step {start} (resumed from {a.resume_step})", flush=True)
for step in range(start, a.total + 1):
    time.sleep(a.sleep)
    if asked and a.ckpt:
        asked.clear()
        checkpoint(done)
        print(f"Checkpoint of step {done} written on SIGUSR1", flush=True)
    if a.ckpt and a.ckpt_every and step % a.ckpt_every == 0:
        checkpoint(step)
    print(f"Step {step}/{a.total} | reward {step / a.total:.3f}", flush=True)
    done = step
    if a.exit_at == step and not (a.once and os.path.exists(a.once)):
        if a.once:
            open(a.once, "w").close()
        sys.exit(a.exit_code)
print("done", flush=True)
