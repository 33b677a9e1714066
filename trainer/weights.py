"""Published policy weights: ``OUT/weights/step_{N}/`` plus ``OUT/weights/latest.json``.

A weights dir holds ``model.pt``, ``config.json``, ``meta.json`` ({"step", "total"}) and the
completion marker ``STABLE``, and appears atomically.  ``latest.json`` ({"step", "path"}) is
rewritten atomically *after* the inference server was told, so an orchestrator that reads step N
there can rely on rollouts from then on coming from weights >= N (unless the server was down).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from rlsup.trainer import atomic
from rlsup.trainer.policy import Policy, save_weights

MARKER = "STABLE"
_STEP_DIR = re.compile(r"step_(\d+)\Z")


def publish(weights_dir: Path, step: int, total: int, policy: Policy, keep: int = 3) -> Path:
    """Write ``weights_dir/step_{step}`` atomically, prune all but the newest ``keep``; return it."""
    final = Path(weights_dir) / f"step_{step}"
    tmp = atomic.temp_dir_for(final)
    save_weights(policy, tmp)
    (tmp / "meta.json").write_text(json.dumps({"step": step, "total": total}))
    (tmp / MARKER).write_text("")
    atomic.publish_dir(tmp, final)
    steps = sorted(int(m.group(1)) for p in Path(weights_dir).iterdir() if (m := _STEP_DIR.match(p.name)))
    for old in steps[:-keep]:
        if old != step:
            shutil.rmtree(Path(weights_dir) / f"step_{old}", ignore_errors=True)
    return final


def mark_latest(weights_dir: Path, step: int, path: Path) -> None:
    atomic.write_text(Path(weights_dir) / "latest.json", json.dumps({"step": step, "path": str(path)}))


def latest(weights_dir: Path) -> tuple[int, Path] | None:
    """``(step, path)`` from ``latest.json``, or ``None`` when nothing is published yet."""
    try:
        data = json.loads((Path(weights_dir) / "latest.json").read_text())
    except FileNotFoundError:
        return None
    return int(data["step"]), Path(data["path"])


def read_meta(path: Path) -> dict:
    return json.loads((Path(path) / "meta.json").read_text())
