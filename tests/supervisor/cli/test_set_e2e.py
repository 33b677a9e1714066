"""`rlsup up CONFIG --set KEY.PATH=VALUE` and `rlsup check --set` through the real CLI and daemon: the
override reaches the component's environment, the run keeps it through a take-over after `kill -9` and
`--resume`, a `--resume --set` replaces it, a live run refuses a new one, and a bad one is an error at it."""

from __future__ import annotations

import json
import os
import signal

from tests.conftest import pid_alive, rlsup, wait_for, write_config

CONFIG = """
name: sets
components:
  echo:
    command: ["sh", "-c", "echo LR=$LR; exec sleep 1000"]
    env: {LR: "1e-4"}
"""


def _said(d, attempt: int) -> str:
    """What attempt ``attempt`` of `echo` printed as its LR."""
    def said():
        log = d.run_dir / "logs" / "echo.log"  # a fresh run dir has none until the first attempt starts
        lines = [x for x in log.read_text().splitlines() if x.startswith("LR=")] if log.exists() else []
        return lines[attempt - 1][3:] if len(lines) >= attempt else None
    return wait_for(said, what=f"attempt {attempt} of echo printing LR")


def test_a_set_reaches_the_component_and_stays_with_the_run(tmp_path, daemon):
    cfg = write_config(tmp_path, CONFIG)
    run_dir = tmp_path / "run"
    up = ["up", str(cfg), "-d", "--run-dir", str(run_dir)]
    d = daemon(cfg, env=None)  # the file's value
    assert _said(d, 1) == "1e-4"
    d.cli("down", check=True)

    r = rlsup(*up, "--fresh", "--set", "components.echo.env.LR=1e-5", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert _said(d, 1) == "1e-5"  # a fresh run dir: its first attempt
    assert json.loads((run_dir / "overrides.json").read_text()) == ["components.echo.env.LR=1e-5"]

    # A live run refuses a new override, and says what to do instead.
    live = rlsup(*up, "--set", "components.echo.env.LR=3", cwd=tmp_path)
    assert live.returncode == 2 and "rlsup up --resume --set" in live.stderr, live.stderr

    # kill -9 of the supervisor, `rlsup up` as before without --set: the new supervisor restarts with 1e-5.
    pid = d.pid
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(pid), what="the supervisor gone")
    r = rlsup(*up, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    d.cli("restart", "echo", check=True)
    assert _said(d, 2) == "1e-5"

    # Ended, continued with --resume and no --set: still 1e-5; with --resume --set: the new value.
    d.cli("down", check=True)
    assert rlsup(*up, "--resume", cwd=tmp_path).returncode == 0
    assert _said(d, 3) == "1e-5"
    d.cli("down", check=True)
    assert rlsup(*up, "--resume", "--set", "components.echo.env.LR=2e-5", cwd=tmp_path).returncode == 0
    assert _said(d, 4) == "2e-5"
    assert json.loads((run_dir / "overrides.json").read_text()) == ["components.echo.env.LR=2e-5"]


def test_a_bad_set_is_an_error_at_it(tmp_path):
    cfg = write_config(tmp_path, CONFIG)
    for cmd in ("check", "up"):
        r = rlsup(cmd, str(cfg), "--run-dir", str(tmp_path / "run"), "--set", "components.echo.env=[1",
                  "--set", "components.echo.restart.max_restarts=x", cwd=tmp_path)
        assert r.returncode == 2, (cmd, r.stdout, r.stderr)
        assert "--set components.echo.env=[1: the value is not valid YAML" in r.stderr, r.stderr
        assert ("--set components.echo.restart.max_restarts=x: components.echo.restart.max_restarts: Input should "
                "be a valid integer") in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()  # nothing started


def test_a_continued_run_is_checked_with_the_overrides_it_keeps(tmp_path):
    """`up --resume` runs the preflight on the config the run will use: the file with the run's kept
    `--set`, not the file alone (whose command, here, does not exist)."""
    cfg = write_config(tmp_path, """
        name: kept
        components:
          echo:
            command: ["/nonexistent/bin/trainer"]
    """)
    run_dir = tmp_path / "run"
    up = ["up", str(cfg), "-d", "--run-dir", str(run_dir)]
    fixed = ["--set", 'components.echo.command=["sh", "-c", "echo LR=1; exec sleep 1000"]']
    refused = rlsup(*up, cwd=tmp_path)
    assert refused.returncode == 1 and "/nonexistent/bin/trainer does not exist" in refused.stderr, refused.stderr
    try:
        assert rlsup(*up, *fixed, cwd=tmp_path).returncode == 0
        assert rlsup("down", "--run-dir", str(run_dir), cwd=tmp_path).returncode == 0
        again = rlsup(*up, "--resume", cwd=tmp_path)
        assert again.returncode == 0, again.stdout + again.stderr
        wait_for(lambda: (run_dir / "logs" / "echo.log").read_text().count("LR=1") == 2, what="the second attempt")
    finally:
        rlsup("down", "--run-dir", str(run_dir), cwd=tmp_path, timeout=60)
