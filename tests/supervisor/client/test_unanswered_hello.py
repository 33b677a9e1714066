"""A supervisor that accepts the connection but does not answer its hello (SIGSTOPped, or too loaded): the dial
fails with why, and the connection's reader is not left behind.

Found by the fault explorer (RLSUP_EXPLORE_SEED=251: a take-over, the new supervisor SIGSTOPped for 8 s,
`restart-supervisor`): `rlsup attach --plain`, reconnecting while the supervisor was stopped, ended its output
with "Task was destroyed but it is pending! ... Client._read_loop()": each dial that timed out left its reader
task pending until the loop closed. The retry's message was empty too ("; retrying in 1.0s").
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys

from rlsup.supervisor.client.session import Client


def _readers() -> list[asyncio.Task]:
    return [t for t in asyncio.all_tasks() if "_read_loop" in repr(t.get_coro())]


def test_a_dial_whose_hello_is_not_answered_fails_with_why_and_leaves_no_reader(tmp_path):
    sock = tmp_path / "rlsup.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock))
    listener.listen(8)
    # a real process holding the socket, stopped: the kernel accepts the connection, nobody reads it
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(60)"], pass_fds=(listener.fileno(),))
    os.kill(holder.pid, signal.SIGSTOP)
    listener.close()

    async def dial() -> tuple[str, int]:
        try:
            await Client.open_unix(sock, timeout=0.3)
        except asyncio.TimeoutError as e:
            said = str(e)
        else:
            said = "answered"
        await asyncio.sleep(0)
        return said, len(_readers())

    try:
        said, left = asyncio.run(dial())
    finally:
        holder.kill()
        holder.wait()
    assert said == "no answer from the supervisor within 0.3s", said
    assert left == 0
