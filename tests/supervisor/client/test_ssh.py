"""SSH attach against a real sshd on 127.0.0.1: host-key checks, the bridge, reconnect after a cut."""

from __future__ import annotations

import asyncio
import signal
import subprocess

import psutil
import pytest

from rlsup.supervisor.client.session import Client, Session
from rlsup.supervisor.client.ssh import HostKeyUnknown, SshError, SshTarget, ssh_connector
from rlsup.supervisor.records.events import is_lifecycle
from tests.conftest import PATIENCE, PY, async_wait_for, cli_env, wait_for, write_config
from tests.supervisor.run.test_server import Recorder

REMOTE = f"{PY} -m rlsup.supervisor.cli"

CFG = """
name: sshrun
components:
  ticker:
    command: ["{py}", "-u", "-c", "import time\\nfor i in range(1, 100000):\\n    print(f'tick {i}', flush=True)\\n    time.sleep(0.05)"]
  sleeper:
    command: ["{py}", "-c", "import time; time.sleep(1000)"]
"""


@pytest.fixture
def ssh_home(sshd, monkeypatch):
    monkeypatch.setenv("HOME", str(sshd.home))
    if sshd.known_hosts.exists():
        sshd.known_hosts.unlink()
    return sshd


@pytest.fixture
def run(tmp_path, daemon):
    d = daemon(write_config(tmp_path, CFG))
    d.wait_event(lambda e: e["kind"] == "started" and e["component"] == "sleeper", what="started")
    return d


def _connect_once(connect):
    async def go():
        c = await connect()
        snap = await c.snapshot(lines=3)
        await c.close()
        return snap

    return asyncio.run(go())


def test_unknown_host_key_is_refused_with_its_fingerprint(ssh_home, run):
    connect = ssh_connector(SshTarget.parse("testpod"), run_dir=str(run.run_dir), remote_cmd=REMOTE)
    with pytest.raises(HostKeyUnknown) as exc:
        _connect_once(connect)
    fp = subprocess.run(["ssh-keygen", "-lf", str(ssh_home.host_key) + ".pub"], capture_output=True,
                        text=True).stdout.split()[1]
    assert fp.startswith("SHA256:") and fp in str(exc.value)
    assert "--accept-new-host-key" in str(exc.value)
    assert not ssh_home.known_hosts.exists()


def test_accept_new_host_key_then_known(ssh_home, run):
    connect = ssh_connector(SshTarget.parse("testpod"), run_dir=str(run.run_dir), remote_cmd=REMOTE,
                            accept_new_host_key=True)
    snap = _connect_once(connect)
    assert snap["state"]["components"]["ticker"]["state"] == "running"
    assert f"[127.0.0.1]:{ssh_home.port}" in ssh_home.known_hosts.read_text()
    # Known now: a plain connection works.
    plain = ssh_connector(SshTarget.parse("testpod"), run_dir=str(run.run_dir), remote_cmd=REMOTE)
    assert _connect_once(plain)["state"]["run"]["name"] == "sshrun"
    # A changed host key is refused loudly.
    other = ssh_home.base / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kind, b64 = open(str(other) + ".pub").read().split()[:2]
    ssh_home.known_hosts.write_text(f"[127.0.0.1]:{ssh_home.port} {kind} {b64}\n")
    with pytest.raises(SshError) as exc:
        _connect_once(ssh_connector(SshTarget.parse("testpod"), run_dir=str(run.run_dir), remote_cmd=REMOTE))
    assert "CHANGED" in str(exc.value) and "ssh-keygen -R" in str(exc.value)


def test_remote_errors_are_explained(ssh_home, run, tmp_path):
    ssh_home.trust()
    nothing = ssh_connector(SshTarget.parse("testpod"), run_dir=str(tmp_path / "nope"), remote_cmd=REMOTE)
    with pytest.raises(SshError) as exc:
        _connect_once(nothing)
    assert "no supervisor is running" in str(exc.value)
    missing = ssh_connector(SshTarget.parse("testpod"), run_dir=str(run.run_dir), remote_cmd="/nonexistent/rlsup")
    with pytest.raises(SshError) as exc:
        _connect_once(missing)
    assert "--remote-cmd" in str(exc.value)
    with pytest.raises(SshError):
        SshTarget.parse("host:notaport")
    t = SshTarget.parse("alice@[::1]:2222")
    assert (t.user, t.host, t.port) == ("alice", "::1", 2222)


def _bridge_session_process(run_dir) -> psutil.Process:
    """The per-connection sshd process that serves our bridge (killing it cuts the TCP link)."""
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if " bridge " in cmd + " " and str(run_dir) in cmd:
            for parent in p.parents():
                if parent.name().startswith("sshd") and len(parent.children()) <= 2 and parent.ppid() != 1:
                    return parent
    raise AssertionError("no sshd session process found for the bridge")


def test_reconnect_after_the_link_is_cut(ssh_home, run):
    ssh_home.trust()
    connect = ssh_connector(SshTarget.parse("testpod"), run_dir=str(run.run_dir), remote_cmd=REMOTE)

    async def scenario():
        rec = Recorder()
        s = Session(connect, rec, lines=50, backoff=(0.2, 1.0))
        task = asyncio.ensure_future(s.run())
        await asyncio.wait_for(s.connected.wait(), 20)
        victim = await asyncio.to_thread(_bridge_session_process, run.run_dir)
        victim.kill()  # the link drops as a network cut would
        await async_wait_for(lambda: not s.connected.is_set(), PATIENCE, what="the session to see the link drop")
        local = await Client.open_unix(run.sock, name="test")
        assert (await local.command("restart", "sleeper"))["ok"]
        await local.close()
        await async_wait_for(lambda: s.connected.is_set() and any(
            e.get("kind") == "started" and e.get("component") == "sleeper" and e.get("attempt") == 2
            for e in rec.events), 20, what="the session reconnected and saw the sleeper's attempt 2")
        s.close()
        await task
        return rec

    rec = asyncio.run(scenario())
    assert any(st == "reconnecting" for st, _ in rec.status)
    assert [st for st, _ in rec.status].count("attached") >= 2
    life = [e["seq"] for e in rec.events if is_lifecycle(e["kind"])]
    assert life == sorted(set(life))
    assert any(e["kind"] == "started" and e.get("attempt") == 2 for e in rec.events)
    ticks = [int(x.split()[1]) for x in rec.logs["ticker"]]
    assert ticks == list(range(ticks[0], ticks[0] + len(ticks))) or rec.gaps


def test_cli_attach_localhost_over_ssh(ssh_home, run):
    env = cli_env({"HOME": str(ssh_home.home), "RLSUP_REMOTE_CMD": REMOTE})
    refused = subprocess.run([PY, "-m", "rlsup.supervisor.cli", "attach", "localhost", "--run-dir", str(run.run_dir)],
                             capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert refused.returncode == 1 and "SHA256:" in refused.stderr and "--accept-new-host-key" in refused.stderr
    out_file = ssh_home.base / "attach.out"
    with open(out_file, "w") as f:
        p = subprocess.Popen([PY, "-m", "rlsup.supervisor.cli", "attach", "localhost", "--run-dir",
                              str(run.run_dir), "--accept-new-host-key"], stdout=f, stderr=subprocess.PIPE,
                             text=True, env=env, stdin=subprocess.DEVNULL)
    wait_for(lambda: "sleeper" in out_file.read_text(), timeout=30, what="events over SSH")
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=20)
    out = out_file.read_text()
    assert p.returncode == 0, err
    assert "run sshrun started" in out and "sleeper" in out
    assert "training continues" in err and "rlsup attach localhost" in err
    wait_for(lambda: run.cli("status").returncode == 0, what="run still alive after detach")


def test_a_session_over_ssh_attaches_to_the_run_resumed_after_its_end(ssh_home, run):
    """A TUI over SSH left open through `rlsup down`: while the run is over, each dial reaches `rlsup bridge`
    serving the ended run from its run dir (still ended, dropped); once `up --resume` ran there, the session
    attaches to the new supervisor."""
    ssh_home.trust()
    ssh = ssh_connector(SshTarget.parse("testpod"), run_dir=str(run.run_dir), remote_cmd=REMOTE)
    dials: list[bool] = []  # each connection's server: an ended run read back (True) or a live supervisor

    async def connect():
        client = await ssh()
        dials.append(bool(client.server.get("ended")))
        return client

    async def scenario():
        rec = Recorder()
        s = Session(connect, rec, lines=0, backoff=(0.2, 1.0), reopen_s=0.5)
        task = asyncio.ensure_future(s.run())
        await asyncio.wait_for(s.connected.wait(), 20)
        assert (await asyncio.to_thread(run.cli, "down", timeout=60)).returncode == 0
        await async_wait_for(lambda: rec.status and rec.status[-1][0] == "ended", PATIENCE, what="the end")
        await async_wait_for(lambda: True in dials, PATIENCE, what="a dial that found the run ended")
        assert not task.done() and rec.status[-1][0] == "ended", rec.status  # and it was dropped
        r = await asyncio.to_thread(run.cli, "up", str(run.config), "-d", "--resume", timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        await async_wait_for(lambda: s.connected.is_set() and sum(
            e.get("kind") == "started" and e.get("component") == "sleeper" for e in rec.events) >= 2, 60,
            what="attached to the resumed run, its sleeper started again")
        s.close()
        await task
        return rec

    rec = asyncio.run(scenario())
    statuses = [st for st, _ in rec.status]
    assert statuses[statuses.index("ended"):][:3] == ["ended", "reconnecting", "attached"], rec.status
    assert [e["kind"] for e in rec.events if e["kind"] in ("run_started", "run_ended")][-2:] == \
        ["run_ended", "run_started"]
