"""`rlsup down` on a run that has just ended by itself says so, not that its supervisor is gone.

Found by the fault explorer (issue 38): `down` racing a run's own end printed "no supervisor owns ...
(supervisor pid N is gone); ending the run's processes without it", words for a crashed supervisor.
"""

from __future__ import annotations

from tests.conftest import rlsup, wait_for, write_config


def test_down_after_the_run_ended_by_itself_says_how_it_ended(tmp_path):
    cfg = write_config(tmp_path, """
        name: quick
        components:
          once:
            command: "true"
            restart: {policy: never}
    """)
    run_dir = tmp_path / "runs" / "quick"
    rlsup("up", str(cfg), "-d", "--run-dir", str(run_dir), cwd=tmp_path, check=True)
    wait_for(lambda: '"run_ended"' in (run_dir / "events.jsonl").read_text()
             and not (run_dir / "rlsup.sock").exists(), timeout=60, what="the run to end by itself")
    r = rlsup("down", "--run-dir", str(run_dir), cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "has already ended (completed" in r.stderr and "nothing to stop" in r.stderr, r.stderr
    assert "is gone" not in r.stdout + r.stderr
