"""``rlsup bridge``: stdin/stdout <-> the control socket, byte for byte.

SSH attach runs this on the remote host, so the protocol crosses the network unchanged inside
the SSH channel. It ends when either side closes; the supervisor is never affected.
"""

from __future__ import annotations

import os
import selectors
import socket
import sys
from pathlib import Path

from ..rundir.layout import sock_address

CHUNK = 1 << 16


def relay(sock_path: Path, stdin_fd: int = 0, stdout_fd: int = 1) -> int:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with sock_address(Path(sock_path)) as addr:
            s.connect(addr)
    except OSError as e:
        print(f"rlsup bridge: cannot connect to {sock_path}: {e.strerror}", file=sys.stderr)
        return 1
    sel = selectors.PollSelector()  # epoll refuses /dev/null and regular files as stdin; poll takes them
    sel.register(stdin_fd, selectors.EVENT_READ, "in")
    sel.register(s, selectors.EVENT_READ, "sock")
    try:
        while True:
            for key, _ in sel.select():
                if key.data == "in":
                    data = os.read(stdin_fd, CHUNK)
                    if not data:
                        return 0  # the client went away
                    s.sendall(data)
                else:
                    data = s.recv(CHUNK)
                    if not data:
                        return 0  # the supervisor closed (the run ended)
                    view = memoryview(data)
                    while view:
                        view = view[os.write(stdout_fd, view):]
    except (BrokenPipeError, ConnectionResetError):
        return 0
    finally:
        sel.close()
        s.close()
