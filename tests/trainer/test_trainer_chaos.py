from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlsup.trainer import chaos


def test_parse() -> None:
    faults = chaos.parse("crash@57, slow@10:0.5,die@30s,none")
    assert [f.name for f in faults] == ["crash@57", "slow@10", "die@30s"]
    assert faults[1].arg == 0.5 and faults[2].at == 30.0
    assert chaos.parse(None) == [] and chaos.parse("") == []
    for bad in ("boom@3", "crash", "crash@x", "die@soon"):
        with pytest.raises(ValueError, match="bad chaos item"):
            chaos.parse(bad)


def test_crash_fires_once_per_run_dir(tmp_path: Path) -> None:
    c = chaos.Chaos("crash@3", tmp_path, "trainer")
    c.step(2)
    with pytest.raises(chaos.ChaosCrash, match="step 3"):
        c.step(3)
    assert (tmp_path / "trainer-crash@3").exists()
    again = chaos.Chaos("crash@3", tmp_path, "trainer")  # the resumed process
    again.step(3)
    again.step(4)
    with pytest.raises(chaos.ChaosCrash):  # markers are per component; a step past N still fires
        chaos.Chaos("crash@3", tmp_path, "orchestrator").step(5)


def test_slow_applies_every_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(chaos.time, "sleep", slept.append)
    c = chaos.Chaos("slow@2:0.1", tmp_path, "t")
    c.step(1)
    assert slept == []
    c.step(2)
    c.step(3)
    assert slept == [0.1, 0.1]


def test_oom_is_a_sigkill_after_an_allocation_message(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", f"from rlsup.trainer.chaos import Chaos; Chaos('oom@5', {str(tmp_path)!r}, 'x').step(5)"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == -9
    assert "Allocating" in r.stdout


def test_exit0_and_die_and_hang(tmp_path: Path) -> None:
    base = f"import time\nfrom rlsup.trainer.chaos import Chaos\nc = Chaos(SPEC, {str(tmp_path)!r}, 'x')\n"
    exit0 = subprocess.run([sys.executable, "-c", base.replace("SPEC", "'exit0@2'") + "c.step(2)\nraise SystemExit(3)"],
                           capture_output=True, text=True, timeout=20)
    assert exit0.returncode == 0 and "Stopping early at step 2" in exit0.stdout

    # it sleeps ten minutes: an exit within the 90 s allowed is the timer's
    die = subprocess.run([sys.executable, "-c", base.replace("SPEC", "'die@0.3s'") + "c.start_timers()\ntime.sleep(600)"],
                         capture_output=True, text=True, timeout=90)
    assert die.returncode == 1 and "died unexpectedly" in die.stderr

    hang = subprocess.Popen([sys.executable, "-c", base.replace("SPEC", "'hang@1'") + "c.step(1)\nprint('escaped', flush=True)"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert "Entering barrier" in hang.stdout.readline()
        with pytest.raises(subprocess.TimeoutExpired):
            hang.wait(timeout=1.0)  # alive, and not progressing
    finally:
        hang.kill()
        hang.wait()
    # all three were recorded, so a restarted process gets past them
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x-die@0.3s", "x-exit0@2", "x-hang@1"]


def test_a_marker_the_full_disk_refused_leaves_no_half_written_sibling(tmp_path, monkeypatch):
    """RLSUP_EXPLORE_SEED=146: the disk filled while the inference server armed its die@10s fault; the marker's
    write failed (the fault did not fire) and left `.inference-die@10s.tmp-PID` in work/chaos, which the explorer
    read as the fault having fired. A write the disk refuses leaves the old file and nothing beside it."""
    import errno

    from rlsup.trainer import atomic

    marker = tmp_path / "chaos" / "inference-die@10s"
    atomic.write_text(marker, "old\n")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        atomic.write_text(marker, "new\n")
    monkeypatch.undo()
    assert [p.name for p in marker.parent.iterdir()] == ["inference-die@10s"] and marker.read_text() == "old\n"
