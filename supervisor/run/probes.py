"""Readiness and liveness probes: http (2xx), tcp (connect), file (exists).

Log-regex readiness is matched on the log path itself (see component.py). Every probe is a
coroutine returning ``(ok, detail)`` and never raises for a failed check.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import ssl
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from ..config.model import parse_hostport


@functools.cache
def _ssl() -> ssl.SSLContext:
    """For https probes, made at the first one (loading the CA store costs every supervisor's start tens of
    ms otherwise). Health endpoints are local: a self-signed cert is not a failure."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


async def check_http(url: str, timeout: float) -> tuple[bool, str]:
    u = urlsplit(url)
    host = u.hostname or "127.0.0.1"
    port = u.port or (443 if u.scheme == "https" else 80)
    path = (u.path or "/") + (f"?{u.query}" if u.query else "")
    writer = None

    async def talk() -> bytes:
        nonlocal writer
        reader, writer = await asyncio.open_connection(host, port, ssl=_ssl() if u.scheme == "https" else None)
        hosthdr = u.netloc.rsplit("@", 1)[-1]
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {hosthdr}\r\nUser-Agent: rlsup-probe\r\n"
                     f"Accept: */*\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        return await reader.readline()

    try:
        status_line = await asyncio.wait_for(talk(), timeout)
    except (TimeoutError, asyncio.TimeoutError):
        return False, f"GET {url}: no answer within {timeout:g}s"
    except OSError as e:
        return False, f"GET {url}: {e.strerror or e}"
    finally:
        if writer is not None:
            writer.close()
    parts = status_line.decode("latin-1").split()
    if len(parts) >= 2 and parts[1].isdigit():
        code = int(parts[1])
        return 200 <= code < 300, f"GET {url}: HTTP {code}"
    return False, f"GET {url}: not an HTTP answer"


async def check_tcp(target: str, timeout: float) -> tuple[bool, str]:
    host, port = parse_hostport(target)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        writer.close()
        return True, f"tcp {target}: open"
    except (TimeoutError, asyncio.TimeoutError):
        return False, f"tcp {target}: no answer within {timeout:g}s"
    except OSError as e:
        return False, f"tcp {target}: {e.strerror or e}"


async def check(kind: str, target: str, timeout: float) -> tuple[bool, str]:
    if kind == "file":
        return (True, f"file {target} exists") if os.path.exists(target) else (False, f"file {target} does not exist")
    return await (check_http if kind == "http" else check_tcp)(target, timeout)


def _port_of(target: str) -> int | None:
    """The TCP port of a probe target (``http://host:port/path`` or ``host:port``)."""
    try:
        if "://" in target:
            u = urlsplit(target)
            return u.port or (443 if u.scheme == "https" else 80)
        return int(target.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return None


def listening_inodes(port: int) -> set[int]:
    """Socket inodes listening on ``port`` (IPv4 and IPv6); none where /proc cannot tell."""
    found: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                cols = row.split()
                if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                    found.add(int(cols[9]))
    return found


def socket_inodes(pid: int) -> set[int]:
    out: set[int] = set()
    with contextlib.suppress(OSError):  # gone, or not ours to read
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):  # closed meanwhile
                if (link := os.readlink(f"/proc/{pid}/fd/{fd}")).startswith("socket:["):
                    out.add(int(link[8:-1]))
    return out


def held_by(target: str, pids: Iterable[int]) -> bool | None:
    """Whether the socket listening on ``target``'s port belongs to one of ``pids``; None if that
    cannot be known (no listener visible in this network namespace, or /proc unreadable)."""
    port = _port_of(target)
    if port is None:
        return None
    inodes = listening_inodes(port)
    if not inodes:
        return None
    return any(socket_inodes(p) & inodes for p in pids)
