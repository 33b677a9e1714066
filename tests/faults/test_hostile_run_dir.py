"""Fault 2 of issue 16: a run dir another user can influence is refused, and nothing is written
through a link.

Run as root with a run dir under /tmp, another local user (created for the test; skipped where
that is impossible) prepares the ground: owns the run dir or its parent, plants symbolic links
where rlsup writes (``events.jsonl`` to a root-owned file, ``logs`` to their own directory, ...),
or tries to rename the control socket. rlsup refuses with a message that says what is wrong and
exits 1, never with a traceback; the link targets are untouched.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.faults import harness
from tests.faults.harness import as_user, assert_no_orphans, processes_with

# The fault matrix's fixtures (not in a conftest.py here: it would shadow tests/conftest.py for
# the `from conftest import ...` of other test modules).
fault_run, other_user, token = harness.fault_run, harness.other_user, harness.token

CONFIG = """
name: hostile
components:
  talker:
    command: ["sh", "-c", "echo HF_TOKEN=hf_secretsecretsecret; exec sleep 100000"]
"""


@pytest.fixture
def shared_tmp(token):
    """Fresh paths directly under /tmp (sticky, world-writable), removed afterwards."""
    made: list[Path] = []

    def path(suffix: str) -> Path:
        p = Path("/tmp") / f"{token}-{suffix}"
        made.append(p)
        return p

    yield path
    for p in made:
        if p.is_symlink() or p.is_file():
            p.unlink()
        elif p.exists():
            shutil.rmtree(p, ignore_errors=True)


def _mkdir_as(user, path: Path, mode: int = 0o755) -> None:
    r = as_user(*user, "import os, sys; os.mkdir(sys.argv[1]); os.chmod(sys.argv[1], int(sys.argv[2]))",
                str(path), str(mode))
    assert r.returncode == 0, r.stderr


def _refused(r, *needles: str) -> str:
    out = r.stdout + r.stderr
    assert r.returncode == 1, f"expected a refusal (exit 1), got {r.returncode}:\n{out}"
    assert "Traceback" not in out and "internal error" not in out, out
    for n in needles:
        assert n in out, f"{n!r} not in:\n{out}"
    return out


def _try_both_ways(fault_run, run_dir: Path, *needles: str) -> None:
    """`up -d` and `up --headless` both refuse, and start nothing."""
    run = fault_run(run_dir=run_dir)
    run.write_config(CONFIG)
    _refused(run.up(check=False), *needles)
    proc = run.headless()
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, out
    assert "Traceback" not in out, out
    for n in needles:
        assert n in out, out
    assert not processes_with(run.token), "a refused start left processes behind"


def test_a_run_dir_owned_by_another_user_is_refused(fault_run, other_user, shared_tmp):
    run_dir = shared_tmp("run")
    _mkdir_as(other_user, run_dir, 0o777)
    _try_both_ways(fault_run, run_dir, str(run_dir), "belongs to user")
    assert os.listdir(run_dir) == [], "rlsup wrote into another user's directory"


def test_a_parent_owned_by_another_user_is_refused(fault_run, other_user, shared_tmp):
    """Whoever owns the parent can rename the run dir away and put their own in its place."""
    parent = shared_tmp("parent")
    _mkdir_as(other_user, parent, 0o755)
    run_dir = parent / "run"
    _try_both_ways(fault_run, run_dir, str(parent), "another user")
    assert not run_dir.exists(), "rlsup created a run dir in a directory another user controls"


def _plant(user, link: Path, target: Path) -> None:
    r = as_user(*user, "import os, sys; os.symlink(sys.argv[1], sys.argv[2])", str(target), str(link))
    assert r.returncode == 0, r.stderr


LINKS = ["events.jsonl", "state.json", "rlsup.lock", "supervisor.log", "rlsup.sock", "logs", "monitors",
         "logs/talker.log"]


@pytest.mark.parametrize("name", LINKS)
def test_links_planted_in_the_run_dir_are_not_followed(fault_run, other_user, shared_tmp, tmp_path, name):
    """A root-owned run dir that was left writable by others (0777): another user planted a link
    before rlsup tightened it. rlsup must not write through it (nor just crash on it)."""
    base = shared_tmp("base")
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)
    run_dir = base / "run"
    run_dir.mkdir()
    os.chmod(run_dir, 0o777)
    if name.startswith("logs/"):
        (run_dir / "logs").mkdir()
        os.chmod(run_dir / "logs", 0o777)
    # Their targets: a root-owned file that must not change, and a directory of theirs.
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    os.chmod(victim, 0o644)
    before = (victim.read_bytes(), victim.stat().st_mtime_ns)
    theirs = shared_tmp("theirs")
    _mkdir_as(other_user, theirs, 0o777)
    target = theirs if name in ("logs", "monitors") else victim
    _plant(other_user, run_dir / name, target)

    run = fault_run(run_dir=run_dir)
    run.write_config(CONFIG)
    out = _refused(run.up(check=False), f"{run_dir / name} is a symbolic link", "does not follow links")
    assert (run_dir / name).is_symlink(), out  # left as it was, for whoever looks into it
    assert (victim.read_bytes(), victim.stat().st_mtime_ns) == before, "rlsup wrote through a planted link"
    assert os.listdir(theirs) == [], f"rlsup wrote into another user's directory: {os.listdir(theirs)}"
    assert_no_orphans(run.token, run_dir, timeout=30)


@pytest.mark.parametrize("name", ["events.jsonl", "logs/talker.log"])
def test_a_file_of_another_user_where_rlsup_writes_is_refused(fault_run, other_user, shared_tmp, name):
    """Not a link but their own file (which they could read afterwards, secrets and all)."""
    base = shared_tmp("base")
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)
    run_dir = base / "run"
    (run_dir / "logs").mkdir(parents=True)
    os.chmod(run_dir, 0o777)
    os.chmod(run_dir / "logs", 0o777)
    r = as_user(*other_user, "import sys; open(sys.argv[1], 'w').write('theirs\\n')", str(run_dir / name))
    assert r.returncode == 0, r.stderr
    run = fault_run(run_dir=run_dir)
    run.write_config(CONFIG)
    _refused(run.up(check=False), f"{run_dir / name} belongs to user")
    assert (run_dir / name).read_text() == "theirs\n"
    assert_no_orphans(run.token, run_dir, timeout=30)


def test_another_user_can_neither_reach_nor_move_the_socket(fault_run, other_user, shared_tmp):
    base = shared_tmp("base")
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)  # a parent they can read, as /tmp is
    run = fault_run(run_dir=base / "run")
    run.write_config(CONFIG)
    run.up()
    run.wait_event(lambda e: e["kind"] == "started", what="started")
    sock = run.run_dir / "rlsup.sock"
    assert stat.S_IMODE(os.stat(run.run_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(sock).st_mode) & 0o077 == 0, oct(os.stat(sock).st_mode)
    probe = """
import os, socket, sys
sock, log = sys.argv[1], sys.argv[2]
for what, fn in [("rename", lambda: os.rename(sock, sock + ".moved")), ("unlink", lambda: os.unlink(sock)),
                 ("connect", lambda: socket.socket(socket.AF_UNIX).connect(sock)), ("read", lambda: open(log).read()),
                 ("list", lambda: os.listdir(os.path.dirname(sock)))]:
    try:
        fn()
        print(what, "ALLOWED")
    except PermissionError:
        print(what, "refused")
"""
    r = as_user(*other_user, probe, str(sock), str(run.run_dir / "logs" / "talker.log"))
    assert r.returncode == 0, r.stderr
    assert "ALLOWED" not in r.stdout, r.stdout
    assert r.stdout.count("refused") == 5, r.stdout
    assert sock.exists()
    assert run.status()["components"]["talker"]["state"] == "running"
    assert run.down().returncode == 0
    assert_no_orphans(run.token, run.run_dir)
