"""The real-process fault explorer (issue 38 item 3): seeded random sequences of real faults and user
actions against the demo stack (configs/demo-chaos.yaml, its RLSUP_CHAOS_* knobs, a short
RLSUP_DEMO_STEPS) under ``rlsup up -d``, with ``rlsup attach --plain`` clients attached; after each
action and at the end, the promises are checked from the journal, ``status --json``,
``diagnose --json``, the clients' output and the processes left (tests/explorer/checks.py).

Budget: ``RLSUP_EXPLORE_SEQUENCES`` sequences (default 1, so the README's test command stays in its time)
from seed ``RLSUP_EXPLORE_BASE`` (default 0); ``.ci/run`` runs 5 more (seeds 1-5, beside the Slurm stage) and
``.ci/explore.sh`` alone runs 20 (seeds 1-20). ``RLSUP_EXPLORE_SEED=N`` replays one sequence: every
failure prints the line to paste. Sequences with a full disk run on a 128 MiB tmpfs (root only; as a
user, ``unshare --user --map-root-user --mount`` gives one); elsewhere that action becomes a kill -9.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.explorer import checks
from tests.explorer.sequence import Sequence, generate
from tests.explorer.world import World

SEQUENCES = int(os.environ.get("RLSUP_EXPLORE_SEQUENCES", "1"))
BASE = int(os.environ.get("RLSUP_EXPLORE_BASE", "0"))
ONE = os.environ.get("RLSUP_EXPLORE_SEED")
SEEDS = [int(ONE)] if ONE else list(range(BASE, BASE + SEQUENCES))

pytestmark = [pytest.mark.slow]


@pytest.fixture
def token() -> str:
    """What marks every process of the run (tests/faults/harness.py's way). Not "rlsupfault-...": the token
    travels as RLSUP_FAULT_TOKEN, a secret-named variable, and the redactor masks the pieces of a secret an
    event's string starts or ends with, so every "rlsup" in the journal read "***" ("stopping (SIGTERM, by
    ***; ...)")."""
    return f"#Qx{uuid.uuid4().hex[:16]}#"


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


def _mount(tmp: Path) -> Path | None:
    mnt = tmp / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128m,mode=0700", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    return mnt if r.returncode == 0 else None


def _umount(mnt: Path) -> None:
    if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _report(seq: Sequence, world: World, violations: list[str]) -> str:
    return "\n".join([
        f"the promises broke in {seq.describe()}",
        f"replay: RLSUP_EXPLORE_SEED={seq.seed} python -m pytest -n 0 tests/explorer/test_explorer.py",
        "violations:", *(f"  - {v}" for v in violations),
        "what was done:", *(f"  {line}" for line in world.log),
        "what the clients printed last:",
        *(f"  client {n}: {' | '.join(f.out.strip().splitlines()[-8:])}" for n, f in enumerate(world.followers, 1)),
        f"run dir: {world.run_dir}" + (f" (copied to {world.tmp / 'run'})" if world.disk is not None else ""),
    ])


def _explore(world: World) -> list[str]:
    seq = world.seq
    up = world.up()
    if up.returncode != 0:
        return [f"rlsup up -d exited {up.returncode}: {(up.stdout + up.stderr).strip()[-800:]}"]
    world.attach()
    for action in seq.actions:
        world.say(f"{action}: {world.do(action)}")
        found = checks.after_step(world)
        if found:
            return [f"after {action}: {v}" for v in found]
    if seq.ending == "finish":
        world.say(f"finish: {world.finish()}")
    found = checks.status_matches_processes(world)
    if not world.ended():
        down = world.down()
        out = down.stdout + down.stderr
        if down.returncode == 1 and "no supervisor is running" in out and world.ended():
            world.say("the run had ended by itself meanwhile: `down` found nothing running (exit 1, as documented)")
        elif down.returncode != 0:
            found.append(f"rlsup down exited {down.returncode}: {out.strip()[-800:]}")
    return found + checks.after_down(world) + checks.at_end(world)


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("seed", SEEDS)
def test_a_seeded_sequence_of_real_faults_keeps_the_promises(seed, tmp_path, token):
    seq = generate(seed, disk=_can_mount())
    print(seq.describe())
    disk = _mount(tmp_path) if any(a.kind == "disk_full" for a in seq.actions) else None
    if disk is None and any(a.kind == "disk_full" for a in seq.actions):
        pytest.skip(f"{seq.describe()}: cannot mount a tmpfs here for its full disk")
    world = World(tmp_path, seq, token, disk)
    violations = ["the sequence did not finish"]
    try:
        violations = _explore(world)
    finally:
        world.teardown()
        if disk is not None:
            if violations:  # what the run wrote outlives the tmpfs, for the report's reader
                shutil.copytree(world.run_dir, tmp_path / "run", ignore=shutil.ignore_patterns("*.sock"),
                                dirs_exist_ok=True)
            _umount(disk)
    print("\n".join(world.log))
    assert not violations, _report(seq, world, violations)
