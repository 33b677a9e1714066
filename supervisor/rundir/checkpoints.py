"""Latest-complete-checkpoint discovery for the checkpoint layouts of common RL stacks.

It only reads the file system, never writes, so the supervisor can call it on every restart; what
could not be trusted is reported in ``Discovery.skipped`` and ``Discovery.problems``.

A checkpoint counts as *complete* when its name is not a temporary name (``*.tmp``, ``tmp-*``,
``*.partial`` ...), it is not empty, holds no temporary file (unless a completion marker vouches for
it), has the layout's completion marker where the layout has one, and is *settled*: a marker its writer
wrote last vouches for it (prime-rl's ``STABLE``, HF's ``trainer_state.json``, verl's tracker, AReaL's
``recover_info``: see the layouts below), or else nothing in it was modified within ``settle_s`` of ``now``.

A marker is authoritative: a checkpoint whose marker is there is used at once (a trainer that crashes
right after saving resumes from that save, not the one before). A marker file that is itself unreadable
(a half-written ``trainer_state.json``, tracker or ``step_info.json``) is reported in ``problems`` and
not trusted -- unless it was modified within ``settle_s``: then it is taken to be mid-write and only
listed in ``skipped``.

Layouts (what each framework really writes; sources are the upstream files named below):

``prime-rl``
    ``<output_dir>/checkpoints/step_{N}/`` (PrimeIntellect-ai/prime-rl src/prime_rl/utils/utils.py
    ``get_ckpt_dir``/``get_step_path``). Inside: ``trainer/`` written by torch.distributed.checkpoint
    (``.metadata`` is written last by DCP), ``orchestrator/progress.pt``, and a ``STABLE`` file touched
    after a finished save (src/prime_rl/trainer/ckpt.py ``save_stateful``/``WeightCheckpointManager``,
    utils.py ``get_stable_ckpt_steps``). Some versions name the per-component last files explicitly
    (``CKPT_COMPLETE_MARKERS = {"trainer": ".metadata", "orchestrator": "progress.pt"}``).
    rlsup's own reference trainer writes the same ``step_{N}`` shape with a marker written last.
``verl``
    ``<default_local_dir>/global_step_{N}/{actor,critic,...}`` then ``data.pt`` (dataloader state),
    then ``<default_local_dir>/latest_checkpointed_iteration.txt`` holding N, written last "for atomic
    usage" (volcengine/verl verl/trainer/ppo/ray_trainer.py ``_save_checkpoint``;
    verl/utils/checkpoint/checkpoint_manager.py ``find_latest_ckpt_path``). With ``async_save`` the
    tracker is not written; ``data.pt`` is then the in-directory marker.
``hf`` (Transformers Trainer / TRL)
    ``<output_dir>/checkpoint-{N}/`` with ``trainer_state.json`` written after model, optimizer,
    scheduler and RNG state (huggingface/transformers src/transformers/trainer.py ``_save_checkpoint``);
    transformers 4.35-4.36 staged saves in ``tmp-checkpoint-{N}`` and renamed.
``areal``
    ``{fileroot}/checkpoints/{user}/{experiment}/{trial}/`` holds ``recover_info/`` (``step_info.json``
    with the 0-based ``global_step`` of the recover point, plus saver/evaluator/stats_logger/checkpoint
    ``_info.json`` and ``dataloader_info.pkl``) and one folder per model name (``default``, ``actor``
    ...) containing ``recover_checkpoint/`` (overwritten in place by every recover dump) and the
    weight-only periodic saves ``epoch{E}epochstep{S}globalstep{G}/`` (inclusionAI/AReaL
    areal/utils/recover.py ``RecoverInfo.dump``/``RecoverHandler.recover_info_path``,
    areal/utils/saver.py ``get_save_root``/``get_model_save_path``/``get_recover_checkpoint_path``).
    ``latest`` is the recover point from ``step_info.json`` (what AReaL itself resumes from), even if a
    newer weight-only ``globalstep`` folder exists; those are listed in ``checkpoints``.
``glob``
    Any entry under the root whose name (or relative path, if the pattern contains ``/``) fully matches
    ``step_pattern``; the step is the named group ``step`` or else the first group.
``auto``
    ``step_pattern`` given -> ``glob``; else the first of areal, verl, hf, prime-rl whose signature is
    present. Nothing recognisable (for example a run that has not saved yet) -> ``layout`` None.

**When nothing is writing** (:func:`discover`'s ``writer_alive=False``) age says nothing -- a checkpoint
cut off by a crash an hour ago is as old as a finished one -- so completeness alone decides.
"""

from __future__ import annotations

import json
import os
import re
import struct
import time
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

LAYOUTS = ("auto", "areal", "prime-rl", "verl", "hf", "glob")

# Files that say "this checkpoint finished" in some stack; any one of them at the top of a checkpoint
# directory is accepted. STABLE is prime-rl's; the rest are common conventions (and candidates for
# rlsup's reference trainer, whose marker name is not fixed yet -- pass `markers=` to add one).
GENERIC_MARKERS = (
    "STABLE",
    "COMPLETE",
    "COMPLETED",
    "DONE",
    "_SUCCESS",
    ".complete",
    ".completed",
    ".done",
    ".finished",
    "complete",
    "done",
)

_TEMP_SUFFIXES = (".tmp", ".temp", ".partial", ".part", ".incomplete", ".inprogress", ".writing", "~")
_TEMP_PREFIXES = ("tmp-", "tmp_", "tmp.", ".tmp", "temp-", "temp_", ".~")
# Infixes of staging names such as rlsup's trainer's ``.step_5.tmp-1234`` (trainer/atomic.py).
_TEMP_INFIXES = (".tmp.", ".tmp-", ".old-")

_PRIME_RE = re.compile(r"step_(\d+)")
_VERL_RE = re.compile(r"global_step_(\d+)")
_HF_RE = re.compile(r"checkpoint-(\d+)")
_AREAL_RE = re.compile(r"epoch(\d+)epochstep(\d+)globalstep(\d+)")

_VERL_TRACKER = "latest_checkpointed_iteration.txt"
_VERL_MARKER = "data.pt"
_HF_MARKER = "trainer_state.json"
# prime-rl component sub-checkpoints and the file each writes last.
_PRIME_COMPONENT_MARKERS = {"trainer": (".metadata", "STABLE"), "orchestrator": ("progress.pt", "STABLE")}
_AREAL_RECOVER_FILES = (
    "step_info.json",
    "saver_info.json",
    "evaluator_info.json",
    "stats_logger_info.json",
    "checkpoint_info.json",
    "dataloader_info.pkl",
)


@dataclass(frozen=True)
class Checkpoint:
    """One complete checkpoint: its step, absolute path, concrete layout and newest mtime in it."""

    step: int
    path: str
    layout: str
    mtime: float


@dataclass(frozen=True)
class Candidate:
    """One step directory (or file) the scan looked at: complete, or ``reason`` says why not."""

    step: int
    path: str
    complete: bool
    reason: str = ""


@dataclass(frozen=True)
class Discovery:
    """Result of one scan. ``checkpoints`` holds complete ones only, ascending by step;
    ``candidates`` every step entry seen (complete or not), ascending by step then path."""

    latest: Checkpoint | None
    layout: str | None
    checkpoints: tuple[Checkpoint, ...]
    skipped: tuple[tuple[str, str], ...]
    problems: tuple[str, ...]
    candidates: tuple[Candidate, ...] = ()


def is_temp_name(name: str) -> bool:
    """True for names writers use while a file or directory is not finished yet."""
    low = name.lower()
    return low.endswith(_TEMP_SUFFIXES) or low.startswith(_TEMP_PREFIXES) or any(i in low for i in _TEMP_INFIXES)


# ---------------------------------------------------------------------------------------------
# small file-system helpers (never raise)


@dataclass(frozen=True)
class _TreeInfo:
    newest: float  # newest mtime of the entry and everything below it
    files: int  # regular files below (0 -> empty)
    temp: str | None  # first temporary-named entry found below, relative path


def _tree_info(path: Path) -> _TreeInfo:
    try:
        st = path.stat()
    except OSError:
        return _TreeInfo(0.0, 0, None)
    if not path.is_dir():
        return _TreeInfo(st.st_mtime, 1 if st.st_size > 0 else 0, None)
    newest, files, temp = st.st_mtime, 0, None
    stack = [path]
    while stack:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except OSError:
            continue
        with it:
            for e in it:
                try:
                    est = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                newest = max(newest, est.st_mtime)
                if temp is None and is_temp_name(e.name):
                    temp = os.path.relpath(e.path, path)
                if e.is_dir(follow_symlinks=False):
                    stack.append(Path(e.path))
                else:
                    files += 1
    return _TreeInfo(newest, files, temp)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _listdir(path: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError:
        return []


def _short(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 80 else text[:77] + "..."


# ---------------------------------------------------------------------------------------------
# file-set completeness (what decides when no writer is alive)

_TORCH_ZIP_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
_ZIP_MAGIC = b"PK\x03\x04"
_MAX_CONTENT_FILES = 4096  # a scan stays cheap on a huge checkpoint; the rest is taken on trust


def safetensors_problem(path: Path) -> str | None:
    """None when ``path`` is a whole safetensors file, else why not.

    The format (huggingface/safetensors, docs "Format"): 8-byte little-endian header length N, N bytes
    of JSON mapping each tensor to ``data_offsets`` [begin, end) relative to the end of the header; a
    file cut off mid-write is shorter than ``8 + N + max(end)``.
    """
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return f"{path.name}: {size} bytes, shorter than a safetensors header"
            (n,) = struct.unpack("<Q", head)
            if n > 100_000_000 or 8 + n > size:
                return f"{path.name}: header of {n} bytes does not fit in the file's {size} bytes (cut off)"
            header = json.loads(fh.read(n))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        return f"{path.name}: unreadable safetensors header ({_short(exc)})"
    if not isinstance(header, dict):
        return f"{path.name}: safetensors header is not a JSON object"
    end = 0
    for key, info in header.items():
        if key == "__metadata__":
            continue
        offs = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) for o in offs)):
            return f"{path.name}: tensor {key!r} has no data_offsets"
        end = max(end, offs[1])
    want = 8 + n + end
    if size < want:
        return f"{path.name}: {size} bytes, its header says {want} (cut off)"
    return None


def torch_zip_problem(path: Path) -> str | None:
    """None when ``path`` is not a zip (legacy torch pickle: nothing to check) or a zip whose central
    directory reads (zipfile writes it last, so torch.save cut off mid-write has none)."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        return f"{path.name}: unreadable ({_short(exc)})"
    if magic != _ZIP_MAGIC:
        return None
    try:
        with zipfile.ZipFile(path) as zf:
            zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        return f"{path.name}: torch zip archive without a readable central directory ({_short(exc)}): cut off"
    return None


def content_problem(path: str | Path) -> str | None:
    """Why the files under ``path`` do not make a whole checkpoint, or None when nothing contradicts it.

    Checked: temporary files left behind, ``*.safetensors.index.json`` shards (present, and each a whole
    safetensors file), every other ``*.safetensors`` file, torch zip checkpoints, a DCP directory (files
    ``*.distcp``) without its ``.metadata``. Files of other kinds are taken as they are.
    """
    root = Path(path)
    if not root.is_dir():
        return _file_problem(root)
    files, dirs_with_distcp, temp = _files_under(root)
    if temp is not None:
        return f"temporary file {temp!r} left behind: its writer died mid-write"
    if not files:
        return "empty directory"
    for d in sorted(dirs_with_distcp):
        if not (d / ".metadata").is_file():
            return f"{os.path.relpath(d, root)}/.metadata missing: the DCP save did not finish"
    indexed: set[Path] = set()
    indices = (_index_problem(p, indexed) for p in files if p.name.endswith(".safetensors.index.json"))
    lone = (_file_problem(p) for p in files if p not in indexed)  # after the indices, which fill `indexed`
    return next(filter(None, indices), None) or next(filter(None, lone), None)


def _file_problem(p: Path) -> str | None:
    """Why the single file ``p`` is not whole, by its kind (safetensors, torch zip); None for other kinds."""
    if p.suffix == ".safetensors":
        return safetensors_problem(p)
    if p.suffix in _TORCH_ZIP_SUFFIXES:
        return torch_zip_problem(p)
    return None


def _files_under(root: Path) -> tuple[list[Path], set[Path], str | None]:
    """The files under ``root`` in a stable order (about ``_MAX_CONTENT_FILES`` of them), the directories
    holding DCP shards (``*.distcp``), and the first temporary file met (relative), where the walk stops."""
    files: list[Path] = []
    dirs_with_distcp: set[Path] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if is_temp_name(name):
                return files, dirs_with_distcp, os.path.relpath(p, root)
            if name.endswith(".distcp"):
                dirs_with_distcp.add(Path(dirpath))
            files.append(p)
            if len(files) >= _MAX_CONTENT_FILES:
                break
    return files, dirs_with_distcp, None


def _index_problem(idx: Path, indexed: set[Path]) -> str | None:
    """Why the shards named by the safetensors index ``idx`` are not all there and whole; each shard it
    names is added to ``indexed`` (checked here, so not again as a lone file)."""
    try:
        weight_map = json.loads(idx.read_text(encoding="utf-8")).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError("no weight_map")
    except (OSError, ValueError, AttributeError) as exc:
        return f"{idx.name} is unreadable ({_short(exc)})"
    for shard in sorted(set(map(str, weight_map.values()))):
        sp = idx.parent / shard
        indexed.add(sp)
        if not sp.is_file():
            return f"{shard} missing (named by {idx.name})"
        why = safetensors_problem(sp)
        if why:
            return why
    return None


@dataclass
class _Scan:
    """Accumulates the outcome of one discover() call."""

    layout: str
    now: float
    settle_s: float
    markers: tuple[str, ...]
    writer_alive: bool = True
    found: dict[int, Checkpoint] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)

    def skip(self, path: Path, reason: str, step: int | None = None) -> None:
        self.skipped.append((str(path), reason))
        if step is not None:
            self.candidates.append(Candidate(step, str(path), False, reason))

    def age(self, newest: float) -> str | None:
        """The settle rule, which only means something while a writer may still be writing."""
        age = self.now - newest
        if not self.writer_alive:
            return None
        if age < 0:
            return f"still being written: modified {-age:.1f} s in the future (clock skew?)"
        return f"still being written: modified {age:.1f} s ago" if age < self.settle_s else None

    def marker_in(self, path: Path) -> str | None:
        return next((n for n in self.markers if (path / n).is_file()), None) if path.is_dir() else None

    def accept(
        self,
        step: int,
        path: Path,
        *,
        marker: str | None,
        require_marker: str | None = None,
        trusted: bool = False,
    ) -> None:
        """Apply the common completeness rules; ``require_marker`` names what is missing, if any.

        ``marker`` is whatever says the content is whole (it lifts the temp-file-inside rule);
        ``trusted`` says it is an explicit completion marker written last, which also lifts the
        age rule.
        """
        alive = self.writer_alive
        dead = "" if alive else " (and nothing is writing it any more)"
        info = None if is_temp_name(path.name) else _tree_info(path)
        if info is None:
            why: str | None = f"temporary name {path.name!r}: " + (
                "still being written" if alive else "a save cut off when its writer died")
        elif info.files == 0:
            why = "empty" + (" directory" if path.is_dir() else " file") + dead
        elif require_marker is not None:
            why = f"no completion marker: {require_marker}" + dead
        elif marker is None and info.temp is not None:
            why = f"contains temporary file {info.temp!r}: " + (
                "still being written" if alive else "left behind by a writer that died")
        elif not alive and not trusted and (problem := content_problem(path)) is not None:
            # No marker vouches for it and age means nothing now: the files themselves must be whole.
            why = f"incomplete: {problem}"
        else:
            why = None if trusted else self.age(info.newest)
        if why is not None or info is None:
            self.skip(path, why or "", step)
            return
        self.candidates.append(Candidate(step, str(path), True, ""))
        prev = self.found.get(step)
        if prev is None or info.newest > prev.mtime:
            self.found[step] = Checkpoint(step, str(path), self.layout, info.newest)

    def fresh(self, path: Path) -> bool:
        """True when ``path`` was modified within ``settle_s`` while a writer may still be at work: a
        marker file possibly mid-write. With no writer alive nothing is mid-write."""
        return self.age(_mtime(path)) is not None  # (an unreadable one is as old as can be)

    def result(self, latest: Checkpoint | None = None) -> Discovery:
        cks = tuple(self.found[s] for s in sorted(self.found))
        if latest is None and cks:
            latest = cks[-1]
        cands = tuple(sorted(self.candidates, key=lambda c: (c.step, c.path, not c.complete)))
        return Discovery(latest, self.layout, cks, tuple(self.skipped), tuple(self.problems), cands)


# ---------------------------------------------------------------------------------------------
# layouts


def _steps_in(root: Path, regex: re.Pattern[str], group: int = 1) -> list[tuple[int, Path]]:
    """(step, path) for entries of ``root`` whose name is ``regex`` possibly wrapped in a temp name."""
    # exact name, or the exact name inside a temporary name (tmp-checkpoint-5, step_5.tmp)
    return [(int(m.group(group)), Path(e.path)) for e in _listdir(root)
            if (m := regex.search(e.name)) and (e.name == m.group(0) or is_temp_name(e.name))]


def _scan_prime(root: Path, scan: _Scan) -> Discovery:
    entries = _steps_in(root, _PRIME_RE) or _steps_in(root / "checkpoints", _PRIME_RE)
    marks = {p: scan.marker_in(p) for _, p in entries}
    # Once any checkpoint here carries a marker, the writer uses markers: one without is unfinished.
    uses_markers = any(marks.values())
    # prime-rl resumes every component from the same step_N (`--resume.step N`, configs/shared.py
    # ResumeConfig): the trainer from step_N/trainer (CheckpointManager.load raises "Checkpoint not found"
    # without it, src/prime_rl/trainer/ckpt.py), the orchestrator from step_N/orchestrator/progress.pt
    # (src/prime_rl/orchestrator/ckpt.py). A step is offered only when the trainer's part is there, and
    # the orchestrator's too once this run writes orchestrator checkpoints at all.
    with_orch = any((p / "orchestrator").is_dir() for _, p in entries)
    for step, path in entries:
        marker = marks[path]
        # Only a top-level marker (STABLE ...) is written after everything: per-component last files
        # say that component is done, not that another one will not still appear.
        trusted = marker is not None
        missing = None
        if marker is None and path.is_dir():
            comps = [c for c in _PRIME_COMPONENT_MARKERS if (path / c).is_dir()]
            missing = next((f"{c}/{names[0]} missing" for c, names in _PRIME_COMPONENT_MARKERS.items()
                            if c in comps and not any((path / c / n).is_file() for n in names)), None)
            if missing is None and comps and "trainer" not in comps:
                missing = ("trainer/.metadata missing: only the orchestrator's part is here, and the "
                           "trainer fails on it with 'Checkpoint not found'")
            elif missing is None and with_orch and "trainer" in comps and "orchestrator" not in comps:
                missing = "orchestrator/progress.pt missing (the orchestrator resumes from the same step)"
            if missing is None and comps:
                marker = f"{comps[0]}/{_PRIME_COMPONENT_MARKERS[comps[0]][0]}"
            elif missing is None and uses_markers:
                missing = f"none of {', '.join(scan.markers[:3])}... (other checkpoints here have one)"
        scan.accept(step, path, marker=marker, require_marker=missing, trusted=trusted)
    return scan.result()


def _scan_verl(root: Path, scan: _Scan) -> Discovery:
    entries = _steps_in(root, _VERL_RE)
    tracker_path = root / _VERL_TRACKER
    tracked: int | None = None
    if tracker_path.is_file():
        try:
            text = tracker_path.read_text(encoding="utf-8", errors="strict").strip()
            tracked = int(text.splitlines()[0] if text else "")  # ValueError on garbage or empty
        except (OSError, ValueError, IndexError, UnicodeDecodeError) as exc:
            if scan.fresh(tracker_path):  # verl rewrites it in place: empty for a moment
                scan.skip(tracker_path, f"unreadable and modified just now ({_short(exc)}): being written")
            else:
                scan.problems.append(
                    f"{_VERL_TRACKER} is corrupt ({_short(exc)}); not trusted; falling back to the "
                    f"directory scan (global_step_N counts only with {_VERL_MARKER}, written after the "
                    "model shards, and settled)"
                )
        else:
            if not any(s == tracked for s, p in entries if not is_temp_name(p.name)):
                scan.problems.append(
                    f"{_VERL_TRACKER} names step {tracked} but global_step_{tracked} is missing"
                )
    for step, path in entries:
        marker = _VERL_MARKER if (path / _VERL_MARKER).is_file() else None
        if tracked is not None and step > tracked and not is_temp_name(path.name):
            scan.skip(path, f"newer than {_VERL_TRACKER} ({tracked}): still being written or abandoned", step)
            continue
        if tracked is not None:
            # The tracker is written after the whole step directory: it vouches for steps <= it.
            scan.accept(step, path, marker=marker or _VERL_TRACKER, trusted=True)
        else:
            scan.accept(step, path, marker=marker, require_marker=None if marker else f"{_VERL_MARKER} missing")
    return scan.result()


def _scan_hf(root: Path, scan: _Scan) -> Discovery:
    for step, path in _steps_in(root, _HF_RE):
        state = path / _HF_MARKER
        if is_temp_name(path.name) or not state.is_file():
            scan.accept(step, path, marker=None,
                        require_marker=None if is_temp_name(path.name) else f"{_HF_MARKER} missing")
            continue
        try:
            data = json.loads(state.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            if scan.fresh(state):  # save_to_json writes in place: truncated for a moment
                scan.skip(path, f"{_HF_MARKER} unreadable and modified just now: still being written", step)
                continue
            scan.problems.append(
                f"{path.name}/{_HF_MARKER} is corrupt ({_short(exc)}); not trusted; {path.name} skipped, older "
                "checkpoints are independent and still used"
            )
            scan.skip(path, f"{_HF_MARKER} is corrupt", step)
            continue
        gs = data.get("global_step")
        if isinstance(gs, int) and gs != step:
            scan.problems.append(f"{path.name}/{_HF_MARKER} says global_step {gs}; using the name's {step}")
        scan.accept(step, path, marker=_HF_MARKER, trusted=True)
    return scan.result()


def _areal_roots(root: Path) -> tuple[Path, list[Path]]:
    """(save_root holding recover_info, folders to scan for epoch*globalstep* saves)."""
    if (root / "recover_info").is_dir() or not (root.parent / "recover_info").is_dir():
        return root, [root] + [Path(e.path) for e in _listdir(root) if e.is_dir() and e.name != "recover_info"]
    return root.parent, [root]  # root is a model-name folder such as .../trial/default


def _scan_areal(root: Path, scan: _Scan) -> Discovery:
    save_root, folders = _areal_roots(root)
    for folder in folders:
        for step, path in _steps_in(folder, _AREAL_RE, group=3):
            scan.accept(step, path, marker=None)

    info_dir = save_root / "recover_info"
    g = _areal_recover_step(info_dir, scan)
    latest = None if g is None else _areal_recover_point(save_root, info_dir, g, scan)
    return scan.result(latest)


_AREAL_FALLBACK = "falling back to the newest settled epoch*globalstep* folder (weights only, no optimizer state)"


def _areal_recover_step(info_dir: Path, scan: _Scan) -> int | None:
    """The step ``recover_info/step_info.json`` names, or None (absent, unreadable, or not a recover
    point: the reason is in ``scan.problems``)."""
    step_info = info_dir / "step_info.json"
    if not step_info.exists():
        return None
    try:
        data = json.loads(step_info.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("global_step"), int):
            raise ValueError("no integer global_step")
    except (OSError, ValueError) as exc:
        if scan.fresh(step_info):  # RecoverInfo.dump rewrites it in place
            scan.skip(info_dir, f"step_info.json unreadable and modified just now ({_short(exc)})")
            scan.problems.append(f"recover_info is being rewritten; not trusted yet; {_AREAL_FALLBACK}")
        else:
            scan.problems.append(
                f"recover_info/step_info.json is corrupt ({_short(exc)}); not trusted; {_AREAL_FALLBACK}"
            )
        return None
    g: int = data["global_step"]
    if g < 0 or (isinstance(data.get("epoch"), int) and data["epoch"] < 0):
        scan.problems.append(
            f"recover_info/step_info.json has global_step {g}: not a recover point; {_AREAL_FALLBACK}"
        )
        return None
    return g


def _areal_recover_point(save_root: Path, info_dir: Path, g: int, scan: _Scan) -> Checkpoint | None:
    """The recover point of step ``g`` when its dump finished (recorded in ``scan``), else None with
    the reason skipped and in ``scan.problems``."""
    missing = [n for n in _AREAL_RECOVER_FILES if not (info_dir / n).is_file()]
    recover_ckpts = [
        Path(e.path) / "recover_checkpoint"
        for e in _listdir(save_root)
        if e.is_dir() and (Path(e.path) / "recover_checkpoint").is_dir()
    ]
    ckpt_newest = max((_tree_info(p).newest for p in recover_ckpts), default=0.0)
    newest = max(_tree_info(info_dir).newest, ckpt_newest)
    # RecoverHandler.dump saves every recover_checkpoint first and then RecoverInfo.dump writes
    # step_info.json ... dataloader_info.pkl: when all of those are at least as new as the newest
    # checkpoint file, this dump finished and step_info names what recover_checkpoint holds. Otherwise
    # (a dump in progress, or mtimes lost by a copy) only the age rule can tell.
    info_oldest = min((_mtime(info_dir / n) for n in _AREAL_RECOVER_FILES), default=0.0)
    ordered = bool(recover_ckpts) and not missing and info_oldest >= ckpt_newest
    reason = None if ordered else scan.age(newest)
    if missing:
        scan.skip(info_dir, f"recover point {g} incomplete: {', '.join(missing)} missing", g)
        scan.problems.append(f"recover_info lacks {', '.join(missing)}; not trusted; {_AREAL_FALLBACK}")
        return None
    if reason is not None:
        scan.skip(info_dir, f"recover point {g} {reason}", g)
        scan.problems.append(f"recover_info is {reason}; {_AREAL_FALLBACK}")
        return None
    if recover_ckpts:
        path = next((p for p in recover_ckpts if p.parent.name in ("default", "actor")), recover_ckpts[0])
    elif g in scan.found:
        path = Path(scan.found[g].path)
    else:
        path = info_dir
    latest = Checkpoint(g, str(path), "areal", newest)
    scan.found[g] = latest
    scan.candidates.append(Candidate(g, str(path), True, ""))
    return latest


def _scan_glob(root: Path, scan: _Scan, pattern: str) -> Discovery:
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        scan.problems.append(f"step_pattern {pattern!r} is not a valid regex ({exc})")
        return scan.result()
    group: str | int = "step" if "step" in rx.groupindex else 1
    if rx.groups < 1:
        scan.problems.append(f"step_pattern {pattern!r} has no group for the step")
        return scan.result()
    candidates: list[tuple[int, Path]] = []
    for path in sorted(root.glob("*/" * pattern.count("/") + "*")):  # as deep as the pattern
        rel = path.relative_to(root).as_posix()
        m = rx.fullmatch(rel)
        if m is None or m.group(group) is None:
            continue
        try:
            candidates.append((int(m.group(group)), path))
        except ValueError:
            scan.problems.append(f"{rel}: step group {m.group(group)!r} is not an integer")
    marks = {p: scan.marker_in(p) for _, p in candidates}
    uses_markers = any(marks.values())
    for step, path in candidates:
        missing = None
        if uses_markers and marks[path] is None and path.is_dir():
            missing = "none (other checkpoints here have one)"
        scan.accept(step, path, marker=marks[path], require_marker=missing, trusted=marks[path] is not None)
    return scan.result()


def _detect(root: Path) -> str | None:
    names = [e.name for e in _listdir(root)]
    if ((root / "recover_info" / "step_info.json").exists() or (root.parent / "recover_info").is_dir()
            or any(_AREAL_RE.fullmatch(n) for n in names)
            or any(_AREAL_RE.fullmatch(e.name) for d in _listdir(root) if d.is_dir() for e in _listdir(Path(d.path)))):
        return "areal"
    if _VERL_TRACKER in names or _steps_in(root, _VERL_RE):
        return "verl"
    if _steps_in(root, _HF_RE):
        return "hf"
    if _steps_in(root, _PRIME_RE) or _steps_in(root / "checkpoints", _PRIME_RE):
        return "prime-rl"
    return None


def discover(
    root: str | Path,
    layout: str = "auto",
    step_pattern: str | None = None,
    *,
    writer_alive: bool = True,
    now: float | None = None,
    settle_s: float = 5.0,
    markers: Iterable[str] = (),
) -> Discovery:
    """Scan ``root`` for complete checkpoints of ``layout``; never raises for file-system state.

    ``writer_alive`` (default True): a process may still be writing, so a checkpoint no completion
    marker vouches for is skipped while anything in it was modified within ``settle_s`` of ``now``
    (default ``time.time()``). False (the component's whole process tree is gone): age does not matter;
    the layout's marker or, where it has none, the file set decides (:func:`content_problem`).
    ``markers`` adds completion-marker file names to the known set (prime-rl and glob layouts).
    Raises ValueError only for a bad ``layout`` or ``glob`` without ``step_pattern``.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown checkpoint layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    if layout == "glob" and not step_pattern:
        raise ValueError("layout 'glob' needs step_pattern (a regex with a 'step' group or one group)")
    now = time.time() if now is None else now
    path = Path(root).expanduser().absolute()
    concrete: str | None = layout
    if layout == "auto":
        concrete = "glob" if step_pattern else (_detect(path) if path.is_dir() else None)
    if not path.exists():
        return Discovery(None, concrete, (), (), ())
    if not path.is_dir():
        return Discovery(None, concrete, (), (), (f"{path} is not a directory",))
    if concrete is None:
        return Discovery(None, None, (), (), ())
    scan = _Scan(concrete, now, settle_s, tuple(markers) + GENERIC_MARKERS, writer_alive)
    scanner = _SCANNERS.get(concrete)
    return scanner(path, scan) if scanner is not None else _scan_glob(path, scan, step_pattern or "")


_SCANNERS: dict[str, Callable[[Path, _Scan], Discovery]] = {
    "prime-rl": _scan_prime, "verl": _scan_verl, "hf": _scan_hf, "areal": _scan_areal,
}
"""The scan of each layout that needs nothing but the root; ``glob`` also needs its step pattern."""


def resume_args(template: Sequence[str], ckpt: Checkpoint) -> list[str]:
    """``template`` with ``{step}`` and ``{checkpoint}`` replaced; other braces are left alone."""
    return [a.replace("{step}", str(ckpt.step)).replace("{checkpoint}", ckpt.path) for a in template]
