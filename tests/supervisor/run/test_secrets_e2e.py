"""Secrets a component prints or is given never reach a client, the journal or the report; the log on
disk stays byte-exact (it is the component's own output, in a 0700 run dir)."""

from __future__ import annotations

import json

from tests.conftest import read_events, rlsup, write_config

PAT = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
COOKIE = "s%3A9f8e7d6c5b4a39281716051a2b3c4d5e6f"


def test_a_printed_token_is_masked_for_every_client_but_kept_on_disk(tmp_path, headless):
    cfg = write_config(tmp_path, f"""
        components:
          leaky:
            command: ["{{py}}", "-c", "import os; print('token is', os.environ['GITHUB_PAT']); print('cookie', os.environ['SESSION_COOKIE']); raise SystemExit(3)"]
            env: {{GITHUB_PAT: {PAT}, SESSION_COOKIE: "{COOKIE}"}}
            restart: {{policy: never}}
    """)
    h = headless(cfg, "--logs")
    assert h.wait() == 1
    run_dir = tmp_path / "run"
    assert PAT in (run_dir / "logs" / "leaky.log").read_text()  # byte-exact on disk
    shown = rlsup("logs", "leaky", "--run-dir", str(run_dir)).stdout
    assert "token is ***" in shown and PAT not in shown and COOKIE not in shown
    assert PAT not in h.output and COOKIE not in h.output  # --logs prints what clients see
    journal = (run_dir / "events.jsonl").read_text()
    assert PAT not in journal and COOKIE not in journal
    assert PAT not in json.dumps(read_events(run_dir))
    report = rlsup("report", "--run-dir", str(run_dir)).stdout
    assert PAT not in report and COOKIE not in report
