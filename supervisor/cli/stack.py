"""``rlsup stack NAME [--native]``: where a component's processes are right now (py-spy, via the supervisor)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import EXIT_FAILED, EXIT_OK, client_call, client_parser, fail, say

HELP = """\
Take the Python stacks of every process of NAME's current attempt (all ranks of a torchrun, the
children of a launcher) with py-spy, and print where each one is: the innermost function of its
main thread and the line of your own code that led there, grouped where ranks agree:

  stack: 7 ranks (0-2,4-7) in all_reduce at train.py:212
  stack: rank 3 in load_batch at data.py:88
  stacks: runs/demo/stacks/trainer.2.20250101T120000Z.txt

The full dump (every thread, every frame) is written under <run_dir>/stacks/. The supervisor takes
them (it owns the processes; this works over `rlsup attach HOST` too), each process paused for
milliseconds. rlsup also takes them by itself when it flags a stall, and before a liveness probe
ends a hung component: the flag's evidence, `rlsup why NAME` and `rlsup report` show them.

py-spy needs ptrace: as root in a container, add the SYS_PTRACE capability (`docker run
--cap-add SYS_PTRACE`); on a host with kernel.yama.ptrace_scope above 0, run rlsup as root or
set it to 0. rlsup says which when it cannot read a process.

examples:
  rlsup stack trainer              where is the trainer stuck?
  rlsup stack trainer --native     with C/C++ frames too (a wait inside NCCL or CUDA)
  rlsup stack trainer --json       the answer as JSON (lines, path, each process)
"""


def add_parsers(sub: Any) -> None:
    p = client_parser(sub, "stack", "the Python stacks of a component's processes (py-spy): where it hangs", HELP,
                      cmd_stack)
    p.add_argument("name", metavar="NAME", help="the component")
    p.add_argument("--native", action="store_true", help="also C/C++ frames (py-spy --native; slower)")
    p.add_argument("--json", action="store_true", help="print the supervisor's answer as JSON")


def cmd_stack(args: argparse.Namespace) -> int:
    async def fn(client: Any, paths: Any) -> int:
        reply = await client.request("command", command="stack", component=args.name, check=False,
                                     args={"native": True} if args.native else {}, timeout=300)
        if args.json:
            say(json.dumps(reply, indent=2, default=str))
            return EXIT_OK if reply.get("ok") else EXIT_FAILED
        if not reply.get("ok") and not reply.get("lines"):
            return fail(f"rlsup: {reply.get('error', 'refused')}")
        say(f"{args.name} attempt {reply.get('attempt')}: {len(reply.get('processes') or [])} process(es)")
        for line in reply.get("lines") or []:
            say(f"  {line}")
        return EXIT_OK if reply.get("ok") else EXIT_FAILED

    return client_call(args, fn)
