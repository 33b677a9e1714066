"""Where a component's next attempt starts: the checkpoint it resumes from, and what that says.

Called by the component itself when it spawns (not a trip through the run and back); it decides nothing
about the lifecycle.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config.model import Component as ComponentCfg
from ..records import events as ev


def plan_resume(name: str, cfg: ComponentCfg, step: int | None, run_root: Path,
                emit: Callable[[ev.Event], Any], *, clean: bool = True) -> dict[str, Any]:
    """Where the next attempt starts: the newest *complete* checkpoint, chosen now that the
    component's process tree is gone (nothing of it is writing, so age says nothing). If
    checkpoints exist and none is complete, a ``checkpoint_problem`` flag says so before the start
    and the ``started`` event lists each candidate with why it was not used. What it has to say goes
    to ``emit``; the plan is ``{}`` (no resume configured), ``{"rejected"}`` or ``{"step", "checkpoint",
    "args"}``."""
    r = cfg.resume
    if r is None:
        return {}
    from .checkpoints import discover, resume_args

    def problem(message: str, evidence: list[str], action: str) -> None:
        emit(ev.FlagRaised(name, type="checkpoint_problem", message=message, evidence=evidence, action=action))

    try:
        found = discover(r.checkpoints, r.layout, step_pattern=r.step_pattern, writer_alive=False)
    except (OSError, ValueError) as e:
        problem(f"cannot read {r.checkpoints}: {e}", [r.checkpoints], "starting without a checkpoint")
        return {"rejected": [{"step": None, "path": r.checkpoints, "reason": str(e)}]}
    rejected = [{"step": c.step, "path": c.path, "reason": c.reason} for c in found.candidates if not c.complete]
    for said in found.problems:
        problem(said, [r.checkpoints], "not trusted; resuming from the newest checkpoint that is complete")
    ck = found.latest
    if step is not None:
        ck = next((x for x in found.checkpoints if x.step == step), None)
        if ck is None:
            steps = ", ".join(str(x.step) for x in found.checkpoints) or "none"
            problem(f"no complete checkpoint at step {step}", [f"complete checkpoints in {r.checkpoints}: {steps}"],
                    "started from the latest complete checkpoint instead")
            ck = found.latest
    if ck is None:
        if found.candidates:
            problem(f"none of {len(rejected)} checkpoint(s) in {r.checkpoints} is complete; starting from scratch",
                    [f"{c['path']}: {c['reason']}" for c in rejected][:20],
                    "starting without a checkpoint; `rlsup resume NAME --step N` picks one by hand")
        return {"rejected": rejected}
    if r.clean and clean:  # not when a partner restarting with it already cleaned and started
        clean_future(name, cfg, ck.step, run_root, emit)
    return {"step": ck.step, "checkpoint": ck.path, "args": resume_args(r.args, ck)}


def clean_future(name: str, cfg: ComponentCfg, step: int, run_root: Path, emit: Callable[[ev.Event], Any]) -> None:
    """``resume.clean``: delete artefacts of steps after the one resumed from, each path journaled."""
    from .artifacts import CleanRefused, clean_after

    r = cfg.resume
    assert r is not None
    base = Path(cfg.cwd or os.getcwd())
    roots = [run_root, base, Path(r.checkpoints)] + [Path(w.path) for w in cfg.watch]
    try:
        deleted = clean_after(r.clean, step, base=base, allowed_roots=[p.absolute() for p in roots])
    except CleanRefused as e:
        emit(ev.FlagRaised(name, type="clean_refused",
                           message=f"resume.clean refused {len(e.refused)} path(s) outside the run's directories",
                           evidence=[f"{p}: {why}" for p, why in e.refused][:20],
                           action="deleted nothing that was refused; resuming anyway"))
        deleted = list(e.deleted)
    except OSError as e:
        emit(ev.FlagRaised(name, type="clean_refused", message=f"resume.clean failed: {e}", evidence=[],
                           action="resuming anyway"))
        return
    if deleted:
        emit(ev.ArtefactsCleaned(name, step=step, paths=[str(p) for p in deleted]))
