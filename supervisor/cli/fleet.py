"""``rlsup fleet FLEET.yaml``: many pods on one screen (the fleet client is :mod:`rlsup.supervisor.client.fleet`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shlex
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..render.bars import step_text
from .common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, fail

if TYPE_CHECKING:
    from ..client.fleet import PodSpec
    from ..client.session import Connector

    #: The pods to watch and how to reach each one.
    Targets = tuple[list[PodSpec], Callable[[PodSpec], Connector]]


#: --json: how long the pods have to answer. The fleet client (and the SSH and state modules under it) is imported
#: by the fleet command only, not by every other command that builds this parser.
JSON_TIMEOUT_S = 15.0


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "fleet", help="watch and steer the runs on many pods from one screen",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Connect to every pod of FLEET.yaml over SSH in parallel (as `rlsup attach HOST` does) and show one\n"
            "row per pod: connection, run, component states, step/total, rate, ETA, GPU use, the latest flag\n"
            "or diagnosis. A pod whose run has ended shows its final state, how it ended and the diagnosis.\n"
            "Identical failures on several pods, live or ended, are grouped into one fleet flag.\n"
            "Keys: enter opens the pod's full TUI; space selects pods; r/u restart/resume a component and\n"
            "d stops the run (`rlsup down`) on the selected pods, each after a confirmation.\n\n"
            "FLEET.yaml:\n  pods:\n    - host: gpu-pod-1      # or an ~/.ssh/config alias\n      user: root\n"
            "      port: 22\n      run_dir: /workspace/runs/gsm8k-grpo\n      label: qwen-0.5b"),
        epilog="exit codes: 0 (with --json: every pod answered, a run that has ended included), 1 some pod "
               "unreachable, 2 fleet file error.")
    p.add_argument("fleet_file", metavar="FLEET.yaml", nargs="?",
                   help="the pods: host, user, port, run_dir, label (not with --slurm)")
    p.add_argument("--slurm", action="store_true",
                   help="instead of FLEET.yaml: every rlsup run of yours on the Slurm cluster (squeue --json), live, "
                        "pending and recently ended")
    p.add_argument("--json", action="store_true", help="print one snapshot of every pod and the fleet flags, then exit")
    p.add_argument("--timeout", type=float, default=JSON_TIMEOUT_S, metavar="S",
                   help=f"with --json: wait at most S seconds for the pods to answer (default {JSON_TIMEOUT_S:g})")
    p.add_argument("--accept-new-host-key", action="store_true", help="trust and record unknown host keys")
    p.add_argument("--remote-cmd", metavar="CMD", default=None,
                   help="how to run rlsup on the pods (default: $RLSUP_REMOTE_CMD or `rlsup`)")
    p.add_argument("-i", "--identity", metavar="FILE", default=None,
                   help="private key file for every pod (in addition to the agent and ~/.ssh/config)")
    p.set_defaults(func=cmd_fleet)


def format_text(snap: Mapping[str, Any]) -> str:
    """A plain table of the snapshot, for a terminal that is not interactive."""
    from ..client.fleet import gpu_summary, latest_problem, main_component

    lines = [f"FLEET FLAG {f['type']}: {f['message']} ({', '.join(f['pods'])})" for f in snap.get("flags", [])]
    for p in snap.get("pods", []):
        if p["connection"] == "no_run":  # a Slurm job not started, or cancelled before it started
            lines.append(f"{p['label']:<16} {p['error']}")
            continue
        if not p["connected"]:
            lines.append(f"{p['label']:<16} {p['connection']}: {p['error'] or ''}")
            continue
        comps = " ".join(f"{n}={c.get('state')}" for n, c in p["components"].items())
        main = main_component(p["components"])
        prog = f" step {step_text(main[1])}" if main and main[1].get("step") is not None else ""
        problem = latest_problem(p)
        if ended := p.get("ended"):  # the final state, read back from the pod's run dir
            diag = ended.get("diagnosis") or {}
            why = f" | {ended.get('component')}: {diag.get('summary') or diag.get('category')}" if diag else (
                f" | {problem}" if problem else "")
            lines.append(f"{p['label']:<16} {(p.get('run') or {}).get('name') or '?'}: {ended['note']}\n"
                         f"{'':<16} {comps}{prog}{why}")
            continue
        lines.append(f"{p['label']:<16} {(p.get('run') or {}).get('name') or '?'}: {comps}{prog}"
                     f"  gpu {gpu_summary(p.get('gpus'))}" + (f"  | {problem}" if problem else ""))
        if p.get("attach"):
            lines.append(f"{'':<16} attach: {p['attach']}")
    return "\n".join(lines)


def _run_loop(coro: Any) -> Any:
    # Not asyncio.run: its executor shutdown would join an SSH dial stuck on a silent host.
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def cmd_fleet(args: argparse.Namespace) -> int:
    if args.slurm:
        targets = _slurm_targets()
    elif args.fleet_file:
        targets = _file_targets(args)
    else:
        return fail("rlsup fleet: give FLEET.yaml, or --slurm for your runs on the Slurm cluster", EXIT_USAGE)
    if isinstance(targets, int):
        return targets
    specs, connector_for = targets
    interactive = sys.stdout.isatty() and sys.stdin.isatty()
    if args.json or not interactive:
        return _print_snapshot(args, specs, connector_for)
    return _fleet_tui(args, specs, connector_for)


def _slurm_targets() -> Targets | int:
    """``--slurm``: the pods are the user's rlsup jobs on the cluster (exit code 1 if squeue fails)."""
    from ..slurm.jobs import SlurmError
    from .slurm_up import slurm_fleet

    try:
        return slurm_fleet()
    except SlurmError as e:
        return fail(f"rlsup: {e}")


def _file_targets(args: argparse.Namespace) -> Targets | int:
    """The pods of FLEET.yaml, reached over SSH (exit code 2 on a fleet file error)."""
    from ..client.fleet import load_fleet, ssh_connectors
    from ..config.loader import ConfigError

    try:
        specs = load_fleet(args.fleet_file)
    except ConfigError as e:
        return fail(e.report(args.fleet_file), EXIT_USAGE)
    options = (("-i", args.identity), ("--remote-cmd", args.remote_cmd))
    again = ["rlsup", "fleet", shlex.quote(args.fleet_file), *(f"{o} {shlex.quote(v)}" for o, v in options if v)]
    return specs, ssh_connectors(remote_cmd=args.remote_cmd, accept_new_host_key=args.accept_new_host_key,
                                 identity=args.identity, accept_hint=" ".join([*again, "--accept-new-host-key"]))


def _print_snapshot(args: argparse.Namespace, specs: list[PodSpec],
                    connector_for: Callable[[PodSpec], Connector]) -> int:
    """--json, or a terminal that is not interactive: one snapshot of every pod, printed."""
    from ..client.fleet import fleet_snapshot

    snap = _run_loop(fleet_snapshot(specs, connector_for, timeout=args.timeout))
    hints = {s.label: s.attach_hint(identity=args.identity, remote_cmd=args.remote_cmd) for s in specs}
    for pod in snap["pods"]:  # the command that opens this pod's TUI, as it can be pasted
        pod["attach"] = hints.get(pod["label"])
    print(json.dumps(snap, indent=1, default=str) if args.json else format_text(snap))
    return EXIT_OK if all(p["connected"] or p["connection"] == "no_run" for p in snap["pods"]) else EXIT_FAILED


def _fleet_tui(args: argparse.Namespace, specs: list[PodSpec], connector_for: Callable[[PodSpec], Connector]) -> int:
    """The fleet screen; a pod chosen on it opens its full TUI, and leaving that comes back to the fleet."""
    from rlsup.tui.app import run_tui
    from rlsup.tui.fleet import run_fleet_tui

    from .attach import REOPEN_SSH_S

    while True:
        chosen = run_fleet_tui(specs, connector_for)
        if chosen is None:
            return EXIT_OK
        spec = next(s for s in specs if s.label == chosen)
        run_tui(connector_for(spec), target=f"{spec.label} ({spec.target_label()})",
                attach_hint=spec.attach_hint(identity=args.identity, remote_cmd=args.remote_cmd), reopen_s=REOPEN_SSH_S)
