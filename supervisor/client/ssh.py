"""SSH attach: ``rlsup bridge`` run over paramiko, its channel relayed to a local socketpair by two threads so
that the asyncio :class:`Client` reads it as a local socket. Host keys are checked against ``~/.ssh/known_hosts``
(an unknown one refused with its fingerprint unless accepted); ``~/.ssh/config`` and the SSH agent are used."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import shlex
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..records import protocol
from .session import Client, Connector

CONNECT_TIMEOUT_S = 15.0
KEEPALIVE_S = 15
REUSE_TIMEOUT_S = 5.0
CHUNK = 1 << 16


class SshError(Exception):
    """A connection problem the user can act on; the message says what to do."""


class HostKeyUnknown(SshError):
    pass


@dataclass
class SshTarget:
    host: str
    user: str | None = None
    port: int | None = None
    identity: str | None = None

    @classmethod
    def parse(cls, spec: str, *, identity: str | None = None) -> SshTarget:
        """``[user@]host[:port]``; IPv6 as ``[::1]:2222``."""
        user, _, hostport = spec.rpartition("@")
        if hostport.startswith("["):
            host, _, rest = hostport[1:].partition("]")
            p = rest[1:] if rest.startswith(":") else None
        else:
            host, _, p = hostport.partition(":") if hostport.count(":") == 1 else (hostport, "", None)
        port = _port(p, spec) if p is not None else None
        if not host:
            raise SshError(f"bad target {spec!r}: expected [user@]host[:port]")
        return cls(host=host, user=user or None, port=port, identity=identity)

    def label(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}{':' + str(self.port) if self.port else ''}"


def _port(text: str, spec: str) -> int:
    with contextlib.suppress(ValueError):
        if 0 < (port := int(text)) < 65536:
            return port
    raise SshError(f"bad port in {spec!r}")


def _ssh_dir() -> Path:
    return Path(os.path.expanduser("~")) / ".ssh"


def _lookup(host: str) -> dict[str, Any]:
    import paramiko

    cfg_path = _ssh_dir() / "config"
    if not cfg_path.exists():
        return {"hostname": host}
    try:
        cfg = paramiko.SSHConfig.from_path(str(cfg_path))
    except Exception as e:  # a broken ssh config is the user's to fix; say where
        raise SshError(f"cannot read {cfg_path}: {e}") from None
    return dict(cfg.lookup(host))


def _dest(t: SshTarget, cfg: dict[str, Any]) -> tuple[str, int]:
    """Where ``t`` is: its host and port after its ``~/.ssh/config`` entry ``cfg``."""
    return cfg.get("hostname", t.host), int(t.port or cfg.get("port") or 22)


def fingerprint(key: Any) -> str:
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


@dataclass
class _Remote:
    """One SSH connection (possibly through jump hosts) that opens bridge channels."""

    target: SshTarget
    accept: bool  # an unknown host key is accepted (and recorded)
    accept_hint: str
    clients: list[Any] = field(default_factory=list)  # paramiko.SSHClient, jump hosts first

    def alive(self) -> bool:
        if not self.clients:
            return False
        t = self.clients[-1].get_transport()
        return t is not None and t.is_active()

    def close(self) -> None:
        for c in reversed(self.clients):
            with contextlib.suppress(Exception):
                c.close()
        self.clients = []

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        """As paramiko's missing-host-key policy: refuse with the fingerprint, or accept and record it."""
        known_hosts = _ssh_dir() / "known_hosts"
        if not self.accept:
            raise HostKeyUnknown(
                f"the host key of {hostname} is not known (not in {known_hosts}).\n"
                f"  {key.get_name()} key fingerprint is {fingerprint(key)}.\n"
                f"  If that is the right host, accept it once with: {self.accept_hint}\n"
                f"  (or connect with `ssh` and answer yes), then attach again.")
        client.get_host_keys().add(hostname, key.get_name(), key)
        known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(known_hosts, "a") as f:
            f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")

    def connect(self) -> None:
        self.close()
        cfg = _lookup(self.target.host)
        hops = [SshTarget.parse(h) for h in (cfg.get("proxyjump") or "").split(",") if h and h.lower() != "none"]
        sock: Any = None
        if not hops and cfg.get("proxycommand") and cfg["proxycommand"].lower() != "none":
            import paramiko

            sock = paramiko.ProxyCommand(cfg["proxycommand"])
        for hop, after in zip(hops, [*hops[1:], self.target], strict=False):
            client = self._open(hop, _lookup(hop.host), sock)
            sock = client.get_transport().open_channel("direct-tcpip", _dest(after, _lookup(after.host)),
                                                       ("127.0.0.1", 0))
        self._open(self.target, cfg, sock)

    def _open(self, t: SshTarget, cfg: dict[str, Any], sock: Any) -> Any:
        import paramiko

        host, port = _dest(t, cfg)
        user = t.user or cfg.get("user") or os.environ.get("USER") or None
        keys = [os.path.expanduser(k) for k in ([t.identity] if t.identity else []) + list(cfg.get("identityfile") or [])]
        keys = [k for k in keys if os.path.exists(k)]
        known = _ssh_dir() / "known_hosts"
        client = paramiko.SSHClient()
        with contextlib.suppress(OSError):
            client.load_system_host_keys()
        if known.exists():
            try:
                client.load_host_keys(str(known))
            except Exception as e:
                raise SshError(f"cannot read {known}: {e}") from None
        # paramiko calls the policy's missing_host_key and nothing else; this class does not subclass
        # paramiko.MissingHostKeyPolicy only so that paramiko is imported when a connection is made.
        client.set_missing_host_key_policy(self)  # type: ignore[arg-type]
        label = f"{user + '@' if user else ''}{host}:{port}"
        try:
            # key_filename: "the filename, or list of filenames" (paramiko/client.py, SSHClient.connect);
            # types-paramiko has it as `str | None`.
            client.connect(host, port=port, username=user, key_filename=keys or None,  # type: ignore[arg-type]
                           timeout=CONNECT_TIMEOUT_S,
                           banner_timeout=CONNECT_TIMEOUT_S, auth_timeout=CONNECT_TIMEOUT_S, sock=sock,
                           allow_agent=True, look_for_keys=True)
        except HostKeyUnknown:
            raise
        except paramiko.BadHostKeyException as e:
            raise SshError(
                f"the host key of {host} has CHANGED (got {fingerprint(e.key)}, expected "
                f"{fingerprint(e.expected_key)}). This can mean someone is intercepting the connection, or the "
                f"machine was reinstalled. If you trust it, remove the old key with "
                f"`ssh-keygen -R {host if port == 22 else f'[{host}]:{port}'}` and attach again.") from None
        except paramiko.AuthenticationException as e:
            raise SshError(f"authentication to {label} failed ({e}); check the user, your keys "
                           "(-i FILE, IdentityFile in ~/.ssh/config) and the SSH agent") from None
        except (paramiko.SSHException, OSError, EOFError) as e:
            why = str(e).replace("[Errno None] ", "") or type(e).__name__  # paramiko's NoValidConnectionsError
            raise SshError(f"cannot connect to {label}: {why} (is sshd running there, and the port right?)") from None
        if (tr := client.get_transport()) is not None:
            tr.set_keepalive(KEEPALIVE_S)
        self.clients.append(client)
        return client

    def open_bridge(self, command: str, timeout: float = CONNECT_TIMEOUT_S) -> tuple[Any, socket.socket, dict[str, Any]]:
        """Start ``command`` on the remote host and relay its stdio to a local socket."""
        transport = self.clients[-1].get_transport()
        try:
            chan = transport.open_session(timeout=timeout)
            chan.exec_command(command)
        except Exception as e:
            raise SshError(f"cannot start `{command}` on {self.target.label()}: {e}") from None
        local, remote_end = socket.socketpair()
        info: dict[str, Any] = {"stderr": b"", "exit": None, "done": threading.Event()}
        threading.Thread(target=_chan_to_sock, args=(chan, remote_end, info), daemon=True,
                         name="rlsup-ssh-in").start()
        threading.Thread(target=_sock_to_chan, args=(remote_end, chan), daemon=True, name="rlsup-ssh-out").start()
        return chan, local, info


def _chan_to_sock(chan: Any, sock: socket.socket, info: dict[str, Any]) -> None:
    try:
        while data := chan.recv(CHUNK):
            sock.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(Exception):
            while chan.recv_stderr_ready():
                info["stderr"] += chan.recv_stderr(CHUNK)
            if chan.exit_status_ready():
                info["exit"] = chan.recv_exit_status()
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        info["done"].set()


def _sock_to_chan(sock: socket.socket, chan: Any) -> None:
    try:
        while data := sock.recv(CHUNK):
            chan.sendall(data)
    except (OSError, EOFError):
        pass
    finally:
        with contextlib.suppress(Exception):
            chan.close()
        with contextlib.suppress(OSError):
            sock.close()


def attach_command(target: str, *, run_dir: str | None = None, identity: str | None = None,
                   remote_cmd: str | None = None, extra: str = "") -> str:
    """The ``rlsup attach`` command line that reaches the same run the same way, quoted to paste as printed."""
    options = (("--run-dir", run_dir), ("-i", identity), ("--remote-cmd", remote_cmd))
    parts = ["rlsup", "attach", shlex.quote(target), *(f"{o} {shlex.quote(v)}" for o, v in options if v)]
    return " ".join(parts) + (f" {extra}" if extra else "")


async def _bridge_channel(remote: _Remote, command: str) -> tuple[Any, socket.socket, dict[str, Any]]:
    """``rlsup bridge`` started on the remote: over the SSH connection while it lives (a channel that does not
    open soon means it is half dead after a cut), else over a new one."""
    opened: tuple[Any, socket.socket, dict[str, Any]] | None = None
    if remote.alive():
        with contextlib.suppress(SshError):
            opened = await asyncio.to_thread(remote.open_bridge, command, REUSE_TIMEOUT_S)
    if opened is None:
        await asyncio.to_thread(remote.connect)
        opened = await asyncio.to_thread(remote.open_bridge, command)
    return opened


async def _bridge_failure(e: Exception, info: dict[str, Any], command: str, target: SshTarget) -> SshError:
    """Why the bridge did not answer, from what the remote printed (a missing ``rlsup``: how to point at it)."""
    await asyncio.to_thread(info["done"].wait, 1.0)  # a moment for the relay thread to collect the remote's stderr
    err = info["stderr"].decode("utf-8", "replace").strip()
    code = info.get("exit")
    if code in (126, 127) or "not found" in err or "No such file or directory" in err:
        return SshError(f"`{command}` is not runnable on {target.label()} ({err or 'exit 127'}); pass "
                        "--remote-cmd /path/to/venv/bin/rlsup (or set RLSUP_REMOTE_CMD)")
    return SshError(f"{target.label()}: {err or e}")


def ssh_connector(target: SshTarget, *, run_dir: str | None = None, remote_cmd: str | None = None,
                  accept_new_host_key: bool = False, accept_hint: str | None = None) -> Connector:
    """A :data:`~rlsup.supervisor.client.session.Connector` over SSH, reusing the SSH connection while it lives.
    ``accept_hint``: the command that trusts an unknown host key (default: ``rlsup attach`` with its options)."""
    if accept_hint is None:
        accept_hint = attach_command(target.label(), run_dir=run_dir, identity=target.identity,
                                     remote_cmd=remote_cmd, extra="--accept-new-host-key")
    remote = _Remote(target, accept_new_host_key, accept_hint)
    command = f"{remote_cmd or os.environ.get('RLSUP_REMOTE_CMD') or 'rlsup'} bridge" + (
        f" --run-dir {shlex.quote(run_dir)}" if run_dir else "")
    lock = asyncio.Lock()

    async def connect() -> Client:
        async with lock:
            chan, local, info = await _bridge_channel(remote, command)
        reader, writer = await asyncio.open_unix_connection(sock=local, limit=protocol.STREAM_LIMIT)
        client = Client(reader, writer, name="tui")
        try:
            await client.start(timeout=CONNECT_TIMEOUT_S)
        except (ConnectionError, asyncio.TimeoutError, protocol.ProtocolError) as e:
            await client.close()
            if isinstance(e, protocol.VersionMismatch):
                raise
            raise await _bridge_failure(e, info, command, target) from None
        return client

    connect.remote = remote  # type: ignore[attr-defined]  # for tests and clean shutdown
    return connect
