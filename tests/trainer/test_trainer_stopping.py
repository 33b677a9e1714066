"""rlsup's stop (SIGTERM) in the trainer (rlsup.trainer.stopping): a checkpoint asked for on SIGUSR1 is written
*and said* before the trainer exits, though rlsup stops it the moment the checkpoint appears (the preemption
journey lost that line under load); outside a held block SIGTERM exits at once, with `finally` blocks run."""

from __future__ import annotations

import signal
import subprocess
import textwrap

from tests.conftest import PY

PROGRAM = textwrap.dedent("""
    import os, signal, sys
    from rlsup.trainer import loop
    from rlsup.trainer.stopping import install_sigterm_exit

    install_sigterm_exit()
    loop.CHECKPOINT.install()
    os.kill(os.getpid(), signal.SIGUSR1)  # the supervisor asks for a checkpoint now

    def save(step):
        os.kill(os.getpid(), signal.SIGTERM)  # ...and stops the trainer as soon as it sees one
        print(f"saved step {step}", flush=True)

    try:
        loop.CHECKPOINT.honour(41, save)
        print("went on training", flush=True)
    finally:
        print("finally ran", flush=True)
""")


def test_a_sigterm_while_an_asked_for_checkpoint_is_written_waits_for_the_line_that_says_so():
    p = subprocess.run([PY, "-c", PROGRAM], capture_output=True, text=True, timeout=60)
    out = p.stdout + p.stderr
    assert p.returncode == 128 + signal.SIGTERM, out
    assert "saved step 41" in out and "Checkpoint of step 41 written on SIGUSR1" in out, out
    assert "SIGTERM during a checkpoint asked for on SIGUSR1" in out, out
    assert "went on training" not in out and "finally ran" in out, out


def test_a_sigterm_outside_a_held_block_exits_at_once_through_finally():
    program = PROGRAM.replace("loop.CHECKPOINT.honour(41, save)", "os.kill(os.getpid(), signal.SIGTERM)")
    p = subprocess.run([PY, "-c", program], capture_output=True, text=True, timeout=60)
    out = p.stdout + p.stderr
    assert p.returncode == 128 + signal.SIGTERM and "went on training" not in out and "finally ran" in out, out
