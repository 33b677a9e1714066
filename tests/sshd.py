"""A real OpenSSH server on 127.0.0.1 for the SSH tests, with its own host key, client key and a
private HOME (``~/.ssh/config``, ``known_hosts``) for the client side."""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd", "/usr/bin/sshd")


class SshdUnavailable(Exception):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sshd:
    def __init__(self, base: Path):
        self.base = base
        self.port = _free_port()
        self.user = getpass.getuser()
        self.home = base / "home"  # the client's HOME: ~/.ssh/config and known_hosts live here
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Sshd:
        sshd = next((p for p in SSHD_CANDIDATES if os.path.exists(p)), None) or shutil.which("sshd")
        if not sshd:
            raise SshdUnavailable("no sshd binary (install openssh-server)")
        keygen = shutil.which("ssh-keygen")
        if not keygen:
            raise SshdUnavailable("no ssh-keygen")
        srv = self.base / "server"
        srv.mkdir(parents=True)
        (self.home / ".ssh").mkdir(parents=True, mode=0o700)
        self.host_key = srv / "host_ed25519"
        self.client_key = self.home / ".ssh" / "id_ed25519"
        for key in (self.host_key, self.client_key):
            subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        auth = srv / "authorized_keys"
        auth.write_text(Path(str(self.client_key) + ".pub").read_text())
        auth.chmod(0o600)
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation directory
        conf = srv / "sshd_config"
        conf.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {self.host_key}",
            f"AuthorizedKeysFile {auth}", f"PidFile {srv / 'sshd.pid'}", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "PubkeyAuthentication yes", "StrictModes no", "UsePAM no",
            "PermitRootLogin prohibit-password", "ClientAliveInterval 5", "LogLevel ERROR",
        ]))
        self.log = srv / "sshd.log"
        self.proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(conf)], stdout=open(self.log, "wb"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SshdUnavailable(f"sshd exited {self.proc.returncode}: {self.log.read_text()[-500:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.05)
        else:
            self.stop()
            raise SshdUnavailable("sshd did not listen within 10 s")
        # The client side, as a user would set it up: an alias with HostName, Port, User, IdentityFile.
        (self.home / ".ssh" / "config").write_text(
            f"Host testpod\n  HostName 127.0.0.1\n  Port {self.port}\n  User {self.user}\n"
            f"  IdentityFile {self.client_key}\n"
            f"Host localhost\n  HostName 127.0.0.1\n  Port {self.port}\n  User {self.user}\n"
            f"  IdentityFile {self.client_key}\n")
        return self

    @property
    def known_hosts(self) -> Path:
        return self.home / ".ssh" / "known_hosts"

    def trust(self) -> None:
        """Record the server's host key in the client's known_hosts (as `ssh` would after 'yes')."""
        pub = Path(str(self.host_key) + ".pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {pub[0]} {pub[1]}\n")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
