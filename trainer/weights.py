"""Published policy weights: ``OUT/weights/step_{N}/`` plus ``OUT/weights/latest.json``.

A weights dir holds ``model.pt``, ``config.json``, ``meta.json`` ({"step", "total"}) and the
completion marker ``STABLE``, and appears atomically.  ``latest.json`` ({"step", "path", "engine",
"server_model", "shapes"}) is rewritten atomically only once the inference server has *loaded* step N (see
``rlsup.trainer.sync``): it is what the server serves, not what was published. :func:`published` is the
newest complete step directory -- what the orchestrator paces itself by and what a restarted server loads.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path

from rlsup.trainer import atomic

MARKER = atomic.MARKER
REJECTED = "REJECTED"  # written into a published dir an inference server failed to load (why, inside)


def write(weights_dir: Path, step: int, write_model: Callable[[Path], None], meta: dict[str, object],
          keep: int = 3) -> Path:
    """The weights dir of ``step`` for any policy: ``write_model(dir)`` writes the model, then
    ``meta.json`` and the marker; the dir appears atomically (every file fsynced) and all but the
    newest ``keep`` go."""
    final = Path(weights_dir) / f"step_{step}"
    tmp = atomic.temp_dir_for(final)
    write_model(tmp)
    (tmp / "meta.json").write_text(json.dumps(meta))
    (tmp / MARKER).write_text("")
    atomic.publish_dir(tmp, final)
    atomic.prune(weights_dir, atomic.steps(weights_dir), keep, step)
    return final


def mark_latest(weights_dir: Path, step: int, path: Path, **extra: object) -> None:
    """Record that the server loaded ``path`` (weights of ``step``); ``extra``: what it reported."""
    atomic.write_text(Path(weights_dir) / "latest.json",
                      json.dumps({"step": step, "path": str(path), **{k: v for k, v in extra.items()
                                                                       if v is not None}}))


def published(weights_dir: Path, good: bool = False) -> tuple[int, Path] | None:
    """``(step, path)`` of the newest complete (``STABLE``) published weights dir, or None. ``good``: skipping
    dirs marked :data:`REJECTED` (what a restarted server should load)."""
    for step in reversed(atomic.steps(weights_dir)):
        path = Path(weights_dir) / f"step_{step}"
        if (path / MARKER).exists() and not (good and (path / REJECTED).exists()):
            return step, path
    return None


def reject(path: Path, why: str) -> None:
    """Mark ``path`` as weights a server could not load, so a restarted server skips it. A path that does not
    exist (a bad path) needs no mark."""
    if Path(path).is_dir():
        with contextlib.suppress(OSError):
            atomic.write_text(Path(path) / REJECTED, why + "\n")


def tensor_shapes(path: Path) -> dict[str, list[int]] | None:
    """Every tensor's shape in the ``*.safetensors`` files of ``path``, from their headers alone (an 8-byte
    little-endian length, then JSON); None when there are none or one cannot be read."""
    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        return None
    shapes: dict[str, list[int]] = {}
    try:
        for f in files:
            with open(f, "rb") as fh:
                n = int.from_bytes(fh.read(8), "little")
                if not 0 < n < 100_000_000:
                    return None
                header = json.loads(fh.read(n))
            shapes.update({k: list(v["shape"]) for k, v in header.items() if k != "__metadata__"})
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return shapes


def shape_difference(new: dict[str, list[int]], good: dict[str, list[int]], new_name: str,
                     good_name: str) -> str | None:
    """Why weights with tensor shapes ``new`` cannot be loaded into a server serving ``good`` (a tensor both
    have, of another shape), or None. Only tensors both name are compared: a model saved with tied embeddings
    has no ``lm_head.weight`` where the trainer's copy of it has one (see :func:`comparable`)."""
    for name in sorted(set(new) & set(good)):
        if new[name] != good[name]:
            return f"tensor {name} is {new[name]} in {new_name} but {good[name]} in {good_name}"
    return None


def comparable(new: dict[str, list[int]], good: dict[str, list[int]]) -> bool:
    """Whether two sets of tensors name mostly the same tensors (at least half of ``new``'s), so that equal
    shapes say they are the same model: weights saved under other names cannot be checked this way."""
    return 2 * len(set(new) & set(good)) >= len(new) > 0


def model_dir(model: str) -> Path | None:
    """The local directory of ``model``: itself when it is one, else the Hugging Face cache's snapshot of that
    hub name when the cache has it (no download); None otherwise."""
    if Path(model).is_dir():
        return Path(model)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, local_files_only=True, allow_patterns=["*.safetensors"]))
    except Exception:  # not installed, not a hub name, not cached: nothing to compare against
        return None


def latest(weights_dir: Path) -> tuple[int, Path] | None:
    """``(step, path)`` from ``latest.json``, or ``None`` when nothing is published yet."""
    found = served(weights_dir)
    return None if found is None else found[:2]


def served(weights_dir: Path) -> tuple[int, Path, dict[str, list[int]] | None] | None:
    """``(step, path, tensor shapes)`` of what ``latest.json`` says the server loaded (shapes: None when not
    recorded), or ``None`` before it loaded anything."""
    try:
        data = json.loads((Path(weights_dir) / "latest.json").read_text())
    except FileNotFoundError:
        return None
    shapes = data.get("shapes")
    return int(data["step"]), Path(data["path"]), shapes if isinstance(shapes, dict) else None
