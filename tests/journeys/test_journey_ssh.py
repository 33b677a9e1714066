"""SSH attach and the fleet against a real sshd, every hint rlsup prints pasted back as printed: the
unknown-host-key hint, the re-attach hint after detaching, the fleet's own host-key hint and each
pod's attach command. The target has no ~/.ssh/config entry and no agent, and rlsup is not on the
remote PATH, so `-i` and `--remote-cmd` are what make it work (issue 27 item 11: hints dropped them)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time

import pytest

from tests.conftest import PY, wait_for
from tests.journeys.conftest import PATIENCE, Workdir, readme_command

REMOTE = f"{PY} -m rlsup.supervisor.cli"

CONFIG = """\
name: sshjourney
components:
  ticker:
    command: ["{py}", "-u", "-c", "import time\\nfor i in range(1, 100000):\\n    print(f'Step {{i}}', flush=True)\\n    time.sleep(0.2)"]
    progress: {{preset: rlsup}}
"""

pytestmark = [pytest.mark.slow]


@pytest.fixture
def pod(workdir, sshd):
    """A live run on "the pod" (this machine, reached over SSH), and a client HOME that knows no host."""
    w: Workdir = workdir
    (w.path / "configs" / "ssh.yaml").write_text(CONFIG.format(py=PY))
    w.sh("rlsup up configs/ssh.yaml -d", check=True)
    w.wait_event(lambda e: e["kind"] == "started", name="sshjourney", what="ticker started")
    if sshd.known_hosts.exists():
        sshd.known_hosts.unlink()
    (sshd.home / ".ssh" / "config").rename(sshd.home / ".ssh" / "config.off")  # no alias: the options must do it
    yield w
    (sshd.home / ".ssh" / "config.off").rename(sshd.home / ".ssh" / "config")


def _client_env(w: Workdir, sshd) -> dict:
    env = {**w.env, "HOME": str(sshd.home)}
    env.pop("SSH_AUTH_SOCK", None)
    env.pop("RLSUP_REMOTE_CMD", None)
    return env


def _follow(w: Workdir, env: dict, command: str, out_name: str) -> tuple[str, str]:
    """Run a printed `rlsup attach ...` command as printed (no terminal: the text follower), wait for
    the run's events, detach with Ctrl-C; (stdout, stderr)."""
    out = w.path / out_name
    with open(out, "w") as f:
        p = subprocess.Popen(["bash", "-c", command], cwd=w.path, env=env, stdout=f, stderr=subprocess.PIPE,
                             text=True, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: "ticker" in out.read_text() or p.poll() is not None, PATIENCE, 0.1, what="events over SSH")
        assert p.poll() is None, p.communicate()[1]
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=PATIENCE)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    return out.read_text(), err


def _hint(text: str, after: str) -> str:
    line = next(ln for ln in text.splitlines() if after in ln)
    return line.split(after, 1)[1].strip()


def test_ssh_attach_hints_paste_back_as_printed(pod, sshd):
    w = pod
    env = _client_env(w, sshd)
    run_dir = str(w.run_dir("sshjourney"))
    # The README's form (`rlsup attach gpu-pod-1 --run-dir /workspace/runs/demo`), with this pod's
    # address, its key and where rlsup lives there.
    readme = readme_command("rlsup attach gpu-pod-1")
    assert readme.startswith("rlsup attach gpu-pod-1 --run-dir ")
    first = (f"rlsup attach {sshd.user}@127.0.0.1:{sshd.port} --run-dir {shlex.quote(run_dir)} "
             f"-i {shlex.quote(str(sshd.client_key))} --remote-cmd {shlex.quote(REMOTE)}")
    refused = subprocess.run(["bash", "-c", first], cwd=w.path, env=env, capture_output=True, text=True,
                             timeout=PATIENCE, stdin=subprocess.DEVNULL)
    assert refused.returncode == 1 and "SHA256:" in refused.stderr, refused.stderr
    accept = _hint(refused.stderr, "accept it once with:")
    assert "--accept-new-host-key" in accept

    out, err = _follow(w, env, accept, "accept.out")
    assert "run sshjourney" in out
    again = _hint(err, "Re-attach with:")
    assert " -i " in again and "--remote-cmd" in again and "--run-dir" in again, again

    out, err = _follow(w, env, again, "again.out")  # known host now: the hint alone must do
    assert "ticker" in out
    assert _hint(err, "Re-attach with:") == again
    # Each event once on a fresh attach (issue 27 item 9: `attach --plain` printed every one twice).
    started = [ln for ln in out.splitlines() if "run sshjourney" in ln]
    assert len(started) == len({ln for ln in started}), out


def test_fleet_hints_paste_back_as_printed(pod, sshd):
    w = pod
    env = _client_env(w, sshd)
    run_dir = str(w.run_dir("sshjourney"))
    fleet = w.path / "fleet.yaml"
    fleet.write_text(f"pods:\n  - {{host: 127.0.0.1, port: {sshd.port}, user: {sshd.user}, "
                     f"run_dir: {json.dumps(run_dir)}, label: pod-a}}\n")
    cmd = (f"rlsup fleet fleet.yaml --json --timeout 20 -i {shlex.quote(str(sshd.client_key))} "
           f"--remote-cmd {shlex.quote(REMOTE)}")
    r = subprocess.run(["bash", "-c", cmd], cwd=w.path, env=env, capture_output=True, text=True, timeout=PATIENCE,
                       stdin=subprocess.DEVNULL)
    pods = json.loads(r.stdout)["pods"]
    assert r.returncode == 1 and not pods[0]["connected"], r.stdout
    accept = _hint(pods[0]["error"], "accept it once with:")
    assert accept.startswith("rlsup fleet fleet.yaml -i ") and "--remote-cmd" in accept
    r = subprocess.run(["bash", "-c", accept + " --json --timeout 20"], cwd=w.path, env=env, capture_output=True,
                       text=True, timeout=PATIENCE, stdin=subprocess.DEVNULL)
    pods = json.loads(r.stdout)["pods"]
    assert r.returncode == 0 and pods[0]["connected"], r.stdout + r.stderr
    attach = pods[0]["attach"]
    out, err = _follow(w, env, attach, "fleet-attach.out")
    assert "ticker" in out and _hint(err, "Re-attach with:") == attach

    w.sh("rlsup down", check=True)
    deadline = time.monotonic() + 30
    while True:  # the ended pod answers too, and says when it ended
        r = subprocess.run(["bash", "-c", cmd], cwd=w.path, env=env, capture_output=True, text=True, timeout=PATIENCE,
                           stdin=subprocess.DEVNULL)
        pods = json.loads(r.stdout)["pods"]
        if pods[0].get("ended") or time.monotonic() > deadline:
            break
    assert r.returncode == 0 and pods[0]["ended"]["note"].startswith("ended at "), r.stdout
