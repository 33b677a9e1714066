"""The supervisor raises its own open-file limit to the hard limit (thousands of components hold thousands
of log files and pidfds); components still get the soft limit rlsup was started with."""

from __future__ import annotations

import json
import resource
import subprocess

from tests.conftest import PY, cli_env, write_config


def test_components_keep_the_limit_the_supervisor_raised_for_itself(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(1024, hard)
    if hard == resource.RLIM_INFINITY or hard <= low:
        import pytest

        pytest.skip(f"the hard limit ({hard}) leaves nothing to raise")
    cfg = write_config(tmp_path, """
        components:
          probe:
            command: ["sh", "-c", "ulimit -n; cat /proc/$RLSUP_SUP/limits | grep 'Max open files'"]
    """)

    def lowered() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))

    p = subprocess.Popen([PY, "-c", "import os, sys; os.environ['RLSUP_SUP'] = str(os.getpid()); "
                                    "from rlsup.supervisor.cli import main; sys.argv = ['rlsup', 'up', sys.argv[1], "
                                    "'--headless', '--skip-checks', '--run-dir', sys.argv[2]]; main()",
                          str(cfg), str(tmp_path / "run")], env=cli_env(), preexec_fn=lowered,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    log = (tmp_path / "run" / "logs" / "probe.log").read_text().splitlines()
    assert log[0] == str(low)  # the component: the limit rlsup was started with
    sup_soft = int(log[1].split()[3])
    assert sup_soft == hard  # the supervisor: raised to the hard limit
    assert json.loads((tmp_path / "run" / "events.jsonl").read_text().splitlines()[0])["kind"] == "run_started"
