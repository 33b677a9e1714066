"""Checkpoint discovery against real directory trees built the way each framework writes them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from rlsup.supervisor.rundir.checkpoints import (
    LAYOUTS,
    Checkpoint,
    Discovery,
    discover,
    is_temp_name,
    resume_args,
)

Found = Discovery  # the name the supervisor's side of issue 6 used for a scan result


def find(root: str | Path, layout: str = "auto", *, step: int | None = None, **kw: Any) -> Checkpoint | None:
    """The latest complete checkpoint, or the complete one at exactly ``step``; None if there is none."""
    found = discover(root, layout, **kw)
    return found.latest if step is None else next((c for c in found.checkpoints if c.step == step), None)


def list_checkpoints(root: str | Path, layout: str = "auto", step_pattern: str | None = None,
                     **kw: Any) -> list[Checkpoint]:
    """Every complete checkpoint under ``root``, ascending by step."""
    return list(discover(root, layout, step_pattern, **kw).checkpoints)


def find_step(root: str | Path, layout: str, step: int, step_pattern: str | None = None,
              **kw: Any) -> Checkpoint | None:
    """The complete checkpoint at exactly ``step``, or None."""
    return next((c for c in list_checkpoints(root, layout, step_pattern, **kw) if c.step == step), None)

NOW = 1_700_000_000.0
OLD = NOW - 3600.0


_ROOT: list[Path] = []


@pytest.fixture(autouse=True)
def _test_root(tmp_path: Path):
    _ROOT[:] = [tmp_path]
    yield
    _ROOT.clear()


def write(path: Path, data: str | bytes = "x", mtime: float = OLD) -> Path:
    """Write a file with the given mtime; its new parent folders get the old mtime, as on a settled disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    os.utime(path, (mtime, mtime))
    parent = path.parent
    while _ROOT and parent != _ROOT[0] and _ROOT[0] in parent.parents:
        os.utime(parent, (OLD, OLD))
        parent = parent.parent
    return path


def age_tree(root: Path, mtime: float = OLD) -> None:
    """Give every entry under root (directories included) the same old mtime."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.utime(os.path.join(dirpath, name), (mtime, mtime))
    os.utime(root, (mtime, mtime))


def steps(d) -> list[int]:
    return [c.step for c in d.checkpoints]


def skipped_names(d) -> dict[str, str]:
    return {Path(p).name: reason for p, reason in d.skipped}


# ---------------------------------------------------------------------------------------------
# prime-rl (and rlsup's reference trainer, which writes the same step_{N} shape)


def prime_step(ckpts: Path, n: int, *, stable: bool = True, orch: bool = True) -> Path:
    d = ckpts / f"step_{n}"
    write(d / "trainer" / "__0_0.distcp", b"\0" * 64)
    write(d / "trainer" / ".metadata", b"meta")
    if orch:
        write(d / "orchestrator" / "progress.pt", b"p")
    if stable:
        write(d / "STABLE", "")
    return d


def test_prime_rl_latest_complete_skips_half_written(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    ck = out / "checkpoints"
    prime_step(ck, 10)
    prime_step(ck, 20)
    # step 30: DCP shards written, .metadata (written last by DCP) and STABLE not yet
    write(ck / "step_30" / "trainer" / "__0_0.distcp", b"\0" * 64)
    # step 40: STABLE written 1.2 s ago: the marker is written last, so it counts at once
    fresh = prime_step(ck, 40)
    write(fresh / "STABLE", "", mtime=NOW - 1.2)
    # step 45: trainer part written 0.1 s ago, no STABLE yet; a per-component last file does not
    # vouch for the whole step: the orchestrator's progress.pt (which this run writes) is not there
    write(ck / "step_45" / "trainer" / ".metadata", b"meta", mtime=NOW - 0.1)
    (ck / "step_50").mkdir()  # empty
    age_tree(ck / "step_50")
    age_tree(ck / "step_30")

    d = discover(out, "prime-rl", now=NOW)  # output dir: checkpoints/ is found below it
    assert d.layout == "prime-rl"
    assert steps(d) == [10, 20, 40]
    assert d.latest is not None and d.latest.step == 40
    assert d.latest.path == str((ck / "step_40").absolute())
    assert d.latest.layout == "prime-rl"
    assert d.latest.mtime == NOW - 1.2
    sk = skipped_names(d)
    assert sk["step_30"].startswith("no completion marker")
    assert "trainer/.metadata missing" in sk["step_30"]
    assert "orchestrator/progress.pt missing" in sk["step_45"]
    assert sk["step_50"] == "empty directory"
    assert d.problems == ()


def test_prime_rl_component_markers_without_stable(tmp_path: Path) -> None:
    ck = tmp_path / "checkpoints"
    prime_step(ck, 5, stable=False)  # trainer/.metadata + orchestrator/progress.pt
    d5 = prime_step(ck, 6, stable=False)
    (d5 / "orchestrator" / "progress.pt").unlink()  # orchestrator not finished
    age_tree(d5)
    d = discover(ck, "prime-rl", now=NOW)
    assert steps(d) == [5]
    assert "orchestrator/progress.pt missing" in skipped_names(d)["step_6"]


def test_reference_stack_marker_or_settled(tmp_path: Path) -> None:
    """rlsup's trainer: files + a marker written last; unknown marker names need non-empty + settled."""
    ck = tmp_path / "run" / "checkpoints"
    write(ck / "step_1" / "model.pt", b"m")  # no marker anywhere in the tree: settled is enough
    d = discover(tmp_path / "run", now=NOW)
    assert d.layout == "prime-rl" and steps(d) == [1]

    # Once any checkpoint carries a marker, one without it is an interrupted save.
    write(ck / "step_2" / "model.pt", b"m")
    write(ck / "step_2" / "COMPLETE", "")
    write(ck / "step_3" / "model.pt", b"m")  # writer died before its marker
    d = discover(ck, now=NOW)
    assert steps(d) == [2]
    sk = skipped_names(d)
    assert sk["step_3"].startswith("no completion marker")
    assert sk["step_1"].startswith("no completion marker")  # same rule: markers are in use here


def test_marker_convention_rejects_old_unmarked_only_when_markers_in_use(tmp_path: Path) -> None:
    ck = tmp_path / "checkpoints"
    write(ck / "step_2" / "model.pt", b"m")
    write(ck / "step_2" / "DONE", "")
    write(ck / "step_3" / "model.pt", b"m")
    d = discover(ck, now=NOW)
    assert steps(d) == [2]
    assert skipped_names(d)["step_3"].startswith("no completion marker")


def test_custom_marker_and_temp_file_inside(tmp_path: Path) -> None:
    ck = tmp_path / "checkpoints"
    write(ck / "step_7" / "weights.bin", b"w")
    write(ck / "step_7" / "weights.bin.tmp", b"w")  # rename has not happened yet
    d = discover(ck, now=NOW)
    assert steps(d) == []
    assert "temporary file 'weights.bin.tmp'" in skipped_names(d)["step_7"]
    write(ck / "step_8" / "weights.bin", b"w")
    write(ck / "step_8" / "ckpt.ok", "")
    d = discover(ck, now=NOW, markers=["ckpt.ok"])
    assert steps(d) == [8]  # markers now in use: step_7 lacks one and has a temp file
    assert d.latest is not None and d.latest.step == 8


# ---------------------------------------------------------------------------------------------
# verl


def verl_step(root: Path, n: int, *, data: bool = True) -> Path:
    d = root / f"global_step_{n}"
    write(d / "actor" / "model_world_size_1_rank_0.pt", b"\0" * 32)
    write(d / "actor" / "huggingface" / "config.json", "{}")
    if data:
        write(d / "data.pt", b"d")
    return d


def test_verl_tracker_is_trusted_and_newer_dirs_skipped(tmp_path: Path) -> None:
    verl_step(tmp_path, 100)
    verl_step(tmp_path, 200)
    verl_step(tmp_path, 300, data=False)  # in progress: actor saved, data.pt and tracker not yet
    write(tmp_path / "latest_checkpointed_iteration.txt", "200")
    d = discover(tmp_path, now=NOW)
    assert d.layout == "verl"
    assert steps(d) == [100, 200]
    assert d.latest is not None and d.latest.step == 200
    assert "newer than latest_checkpointed_iteration.txt (200)" in skipped_names(d)["global_step_300"]
    assert d.problems == ()


def test_verl_corrupt_tracker_falls_back_to_data_pt_scan(tmp_path: Path) -> None:
    verl_step(tmp_path, 100)
    verl_step(tmp_path, 200)
    verl_step(tmp_path, 300, data=False)
    write(tmp_path / "latest_checkpointed_iteration.txt", "\x00\x00garbage")
    d = discover(tmp_path, "verl", now=NOW)
    assert steps(d) == [100, 200]
    assert len(d.problems) == 1
    p = d.problems[0]
    assert p.startswith("latest_checkpointed_iteration.txt is corrupt (")
    assert "not trusted" in p and "falling back to the directory scan" in p
    assert skipped_names(d)["global_step_300"] == "no completion marker: data.pt missing"


def test_verl_tracker_names_missing_dir(tmp_path: Path) -> None:
    verl_step(tmp_path, 100)
    write(tmp_path / "latest_checkpointed_iteration.txt", "150\n")
    d = discover(tmp_path, "verl", now=NOW)
    assert steps(d) == [100]
    assert d.problems == ("latest_checkpointed_iteration.txt names step 150 but global_step_150 is missing",)


# ---------------------------------------------------------------------------------------------
# Hugging Face Trainer / TRL


def hf_step(root: Path, n: int, *, state: str | None = None) -> Path:
    d = root / f"checkpoint-{n}"
    write(d / "model.safetensors", b"\0" * 32)
    write(d / "optimizer.pt", b"o")
    write(d / "trainer_state.json", state if state is not None else json.dumps({"global_step": n}))
    return d


def test_hf_marker_temp_name_and_corrupt_state(tmp_path: Path) -> None:
    hf_step(tmp_path, 500)
    hf_step(tmp_path, 1000)
    hf_step(tmp_path, 1500, state='{"global_step": 15')  # truncated JSON
    d2000 = tmp_path / "checkpoint-2000"  # model written, trainer_state.json (last) not yet
    write(d2000 / "model.safetensors", b"\0")
    hf_step(tmp_path, 2500).rename(tmp_path / "tmp-checkpoint-2500")  # transformers 4.35 staging
    d = discover(tmp_path, now=NOW)
    assert d.layout == "hf"
    assert steps(d) == [500, 1000]
    assert d.latest is not None and d.latest.step == 1000
    sk = skipped_names(d)
    assert sk["checkpoint-1500"] == "trainer_state.json is corrupt"
    assert sk["checkpoint-2000"] == "no completion marker: trainer_state.json missing"
    assert sk["tmp-checkpoint-2500"].startswith("temporary name")
    assert len(d.problems) == 1 and d.problems[0].startswith(
        "checkpoint-1500/trainer_state.json is corrupt ("
    )


def test_hf_marker_counts_at_once_and_half_written_state_is_not_a_problem(tmp_path: Path) -> None:
    d = hf_step(tmp_path, 10)
    write(d / "trainer_state.json", "{}", mtime=NOW - 0.2)  # written last, just now
    assert steps(discover(tmp_path, now=NOW)) == [10]
    # save_to_json mid-write: truncated and fresh -> skipped quietly, the older one is used
    hf_step(tmp_path, 20, state='{"global_st')
    os.utime(tmp_path / "checkpoint-20" / "trainer_state.json", (NOW - 0.1, NOW - 0.1))
    d2 = discover(tmp_path, now=NOW)
    assert steps(d2) == [10] and d2.problems == ()
    assert "modified just now" in skipped_names(d2)["checkpoint-20"]
    # the same file left like that (the trainer died mid-write) is a corrupt marker: reported
    d3 = discover(tmp_path, now=NOW + 60)
    assert steps(d3) == [10] and d3.problems[0].startswith("checkpoint-20/trainer_state.json is corrupt")


def test_settling_uses_injected_now(tmp_path: Path) -> None:
    """Only where nothing vouches for a checkpoint (no marker anywhere) does the age rule decide."""
    write(tmp_path / "step_10" / "model.pt", b"m", mtime=NOW - 4.0)
    assert steps(discover(tmp_path, now=NOW, settle_s=5.0)) == []
    assert skipped_names(discover(tmp_path, now=NOW))["step_10"] == "still being written: modified 4.0 s ago"
    assert steps(discover(tmp_path, now=NOW + 2.0, settle_s=5.0)) == [10]
    assert steps(discover(tmp_path, now=NOW, settle_s=3.0)) == [10]
    d = discover(tmp_path, now=NOW - 10.0)
    assert "in the future" in skipped_names(d)["step_10"]


# ---------------------------------------------------------------------------------------------
# AReaL


def areal_tree(tmp_path: Path, global_step: int | None = 7, step_info: str | None = None) -> Path:
    root = tmp_path / "checkpoints" / "user" / "gsm8k-grpo" / "trial0"
    for g in (3, 7, 9):  # weight-only periodic saves (HF format)
        write(root / "default" / f"epoch0epochstep{g}globalstep{g}" / "model.safetensors", b"w")
        write(root / "default" / f"epoch0epochstep{g}globalstep{g}" / "config.json", "{}")
    write(root / "default" / "recover_checkpoint" / "model.safetensors", b"w")
    write(root / "default" / "recover_checkpoint" / "optim.pt", b"o")
    info = root / "recover_info"
    if step_info is None:
        step_info = json.dumps({"epoch": 0, "epoch_step": global_step, "global_step": global_step})
    write(info / "step_info.json", step_info)
    for name in ("saver_info.json", "evaluator_info.json", "stats_logger_info.json", "checkpoint_info.json"):
        write(info / name, "{}")
    write(info / "dataloader_info.pkl", b"\x80")
    age_tree(root)
    return root


def test_areal_recover_point_is_latest(tmp_path: Path) -> None:
    root = areal_tree(tmp_path)
    d = discover(root, now=NOW)
    assert d.layout == "areal"
    assert d.latest is not None and d.latest.step == 7
    assert d.latest.path == str(root / "default" / "recover_checkpoint")
    assert steps(d) == [3, 7, 9]  # weight-only saves stay findable
    assert find(root, step=9, now=NOW).path.endswith("epoch0epochstep9globalstep9")  # type: ignore[union-attr]
    # pointing at the model-name folder finds recover_info one level up
    assert discover(root / "default", now=NOW).latest.step == 7  # type: ignore[union-attr]


def test_areal_corrupt_recover_file_not_trusted(tmp_path: Path) -> None:
    root = areal_tree(tmp_path, step_info='{"epoch": 0, "global_st')
    d = discover(root, "areal", now=NOW)
    assert len(d.problems) == 1
    p = d.problems[0]
    assert p.startswith("recover_info/step_info.json is corrupt (") and "not trusted" in p
    assert "weights only" in p
    assert d.latest is not None and d.latest.step == 9
    assert d.latest.path.endswith("epoch0epochstep9globalstep9")


def test_areal_recover_info_being_written(tmp_path: Path) -> None:
    root = areal_tree(tmp_path)
    (root / "recover_info" / "dataloader_info.pkl").unlink()
    d = discover(root, "areal", now=NOW)
    assert any("dataloader_info.pkl missing" in r for _, r in d.skipped)
    assert d.latest is not None and d.latest.step == 9  # fell back, and said so
    assert any("falling back" in p for p in d.problems)
    # recover_checkpoint rewritten in place 0.5 s ago: the recover point is not settled
    root2 = areal_tree(tmp_path / "b")
    write(root2 / "default" / "recover_checkpoint" / "optim.pt", b"o2", mtime=NOW - 0.5)
    d2 = discover(root2, "areal", now=NOW)
    assert "still being written: modified 0.5 s ago" in dict(d2.skipped).get(str(root2 / "recover_info"), "")


# ---------------------------------------------------------------------------------------------
# glob, auto, edge cases, find, resume_args


def test_glob_named_group_files_and_dirs(tmp_path: Path) -> None:
    write(tmp_path / "model_step100.pt", b"w")
    write(tmp_path / "model_step200.pt", b"w")
    write(tmp_path / "model_step300.pt.partial", b"w")
    write(tmp_path / "model_step400.pt", b"")  # empty file
    write(tmp_path / "notes.txt", "n")
    d = discover(tmp_path, "glob", step_pattern=r"model_step(?P<step>\d+)\.pt(\.partial)?", now=NOW)
    assert d.layout == "glob"
    assert steps(d) == [100, 200]
    assert skipped_names(d)["model_step300.pt.partial"].startswith("temporary name")
    assert skipped_names(d)["model_step400.pt"] == "empty file"


def test_glob_first_group_and_nested_pattern(tmp_path: Path) -> None:
    write(tmp_path / "run1" / "iter_0000050" / "w.pt", b"w")
    write(tmp_path / "run1" / "iter_0000100" / "w.pt", b"w")
    d = discover(tmp_path, step_pattern=r"run1/iter_(\d+)", now=NOW)  # auto + pattern -> glob
    assert d.layout == "glob"
    assert steps(d) == [50, 100]


def test_glob_bad_pattern_reported(tmp_path: Path) -> None:
    d = discover(tmp_path, "glob", step_pattern="step_(", now=NOW)
    assert d.latest is None and "not a valid regex" in d.problems[0]
    with pytest.raises(ValueError):
        discover(tmp_path, "glob")
    with pytest.raises(ValueError):
        discover(tmp_path, "megatron")


def test_auto_detection(tmp_path: Path) -> None:
    verl_step(tmp_path / "v", 1)
    hf_step(tmp_path / "h", 1)
    prime_step(tmp_path / "p" / "checkpoints", 1)
    areal_tree(tmp_path / "a")
    (tmp_path / "empty").mkdir()
    assert discover(tmp_path / "v", now=NOW).layout == "verl"
    assert discover(tmp_path / "h", now=NOW).layout == "hf"
    assert discover(tmp_path / "p", now=NOW).layout == "prime-rl"
    assert (
        discover(tmp_path / "a" / "checkpoints" / "user" / "gsm8k-grpo" / "trial0", now=NOW).layout == "areal"
    )
    e = discover(tmp_path / "empty", now=NOW)
    assert e.layout is None and e.latest is None and e.problems == ()
    assert set(LAYOUTS) == {"auto", "areal", "prime-rl", "verl", "hf", "glob"}


def test_nonexistent_root_and_file_root(tmp_path: Path) -> None:
    d = discover(tmp_path / "nope", now=NOW)
    assert d.latest is None and d.checkpoints == () and d.layout is None
    assert discover(tmp_path / "nope", "hf").layout == "hf"
    f = write(tmp_path / "file", "x")
    assert "not a directory" in discover(f, "hf").problems[0]
    assert find(tmp_path / "nope") is None


def test_find_latest_or_exact_step(tmp_path: Path) -> None:
    for n in (10, 20, 30):
        hf_step(tmp_path, n)
    assert find(tmp_path, now=NOW).step == 30  # type: ignore[union-attr]
    assert find(tmp_path, "hf", step=20, now=NOW).path == str(tmp_path / "checkpoint-20")  # type: ignore[union-attr]
    assert find(tmp_path, step=25, now=NOW) is None
    (tmp_path / "checkpoint-30" / "trainer_state.json").unlink()  # being rewritten
    assert find(tmp_path, step=30, now=NOW) is None
    assert find(tmp_path, now=NOW).step == 20  # type: ignore[union-attr]


def test_default_now_is_wall_clock(tmp_path: Path) -> None:
    d = tmp_path / "step_1"
    d.mkdir()
    (d / "model.pt").write_bytes(b"m")  # written just now, no marker
    assert find(tmp_path) is None
    assert find(tmp_path, settle_s=0.0) is not None
    (d / "STABLE").write_text("")  # the marker vouches for it at once
    assert find(tmp_path).step == 1  # type: ignore[union-attr]


def test_resume_args_substitution() -> None:
    ck = Checkpoint(step=1869, path="/runs/x/checkpoints/step_1869", layout="prime-rl", mtime=OLD)
    tpl = ["--resume-step", "{step}", "--ckpt={checkpoint}", "--extra", '{"k": 1}', "s{step}-{step}"]
    assert resume_args(tpl, ck) == [
        "--resume-step",
        "1869",
        "--ckpt=/runs/x/checkpoints/step_1869",
        "--extra",
        '{"k": 1}',
        "s1869-1869",
    ]
    assert tpl[1] == "{step}"  # template untouched
    assert resume_args([], ck) == []


@pytest.mark.parametrize(
    ("name", "temp"),
    [
        ("step_5.tmp", True),
        ("tmp-checkpoint-5", True),
        ("weights.partial", True),
        ("a.tmp.1234", True),
        ("model.safetensors", False),
        ("checkpoint-5", False),
        ("template.json", False),
        (".step_6.tmp-4242", True),
        (".step_6.old-4242", True),
    ],
)
def test_temp_names(name: str, temp: bool) -> None:
    assert is_temp_name(name) is temp


# ---------------------------------------------------------------------------------------------
# completion markers are authoritative; the age rule only for what nothing vouches for


def test_reference_trainer_checkpoint_is_accepted_at_once(tmp_path: Path) -> None:
    """The demo trainer's real writer (trainer/checkpoint.py): staged in .step_N.tmp-PID, STABLE last,
    renamed. A crash right after save must resume from that save, so no settle delay applies."""
    torch = pytest.importorskip("torch")
    from rlsup.trainer import checkpoint as ref
    from rlsup.trainer.policy import Policy, save_weights

    policy = Policy()
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    out = tmp_path / "out"
    ref.write(out, 2, lambda d: save_weights(policy, d), opt, {"steps": 4})
    ref.write(out, 4, lambda d: save_weights(policy, d), opt, {"steps": 4})
    # a save interrupted before its rename: the staging dir is left behind
    stale = out / "checkpoints" / f".step_6.tmp-{os.getpid()}"
    stale.mkdir()
    (stale / "model.pt").write_bytes(b"half")
    d = discover(out)  # wall clock: written milliseconds ago
    assert d.layout == "prime-rl"
    assert steps(d) == [2, 4] and d.latest is not None and d.latest.step == 4
    assert d.latest.path == str(ref.checkpoint_dir(out, 4).absolute())
    assert skipped_names(d)[stale.name].startswith("temporary name")
    assert d.problems == ()
    assert [c.step for c in list_checkpoints(out, "prime-rl")] == ref.complete_steps(out)


def test_verl_tracker_vouches_at_once_but_data_pt_alone_settles(tmp_path: Path) -> None:
    verl_step(tmp_path, 100)
    d200 = verl_step(tmp_path, 200)
    write(d200 / "data.pt", b"d", mtime=NOW - 0.3)
    write(tmp_path / "latest_checkpointed_iteration.txt", "200", mtime=NOW - 0.2)
    assert steps(discover(tmp_path, now=NOW)) == [100, 200]
    # async_save: no tracker, data.pt is only an in-directory hint -> the age rule decides
    (tmp_path / "latest_checkpointed_iteration.txt").unlink()
    d = discover(tmp_path, "verl", now=NOW)
    assert steps(d) == [100]
    assert skipped_names(d)["global_step_200"] == "still being written: modified 0.3 s ago"
    assert steps(discover(tmp_path, "verl", now=NOW + 10)) == [100, 200]


def test_verl_tracker_mid_rewrite_is_not_a_problem(tmp_path: Path) -> None:
    verl_step(tmp_path, 100)
    verl_step(tmp_path, 200)
    write(tmp_path / "latest_checkpointed_iteration.txt", "", mtime=NOW - 0.05)  # open("w") truncated it
    d = discover(tmp_path, "verl", now=NOW)
    assert d.problems == ()
    assert "modified just now" in skipped_names(d)["latest_checkpointed_iteration.txt"]
    assert steps(d) == [100, 200]  # the directory scan still finds the settled ones


def test_areal_finished_dump_is_accepted_at_once(tmp_path: Path) -> None:
    root = areal_tree(tmp_path)
    # a dump that finished 0.2 s ago: checkpoint files first, then step_info ... dataloader_info last
    write(root / "default" / "recover_checkpoint" / "optim.pt", b"o2", mtime=NOW - 0.4)
    write(root / "recover_info" / "step_info.json", json.dumps({"epoch": 0, "global_step": 8}), mtime=NOW - 0.3)
    for name in ("saver_info.json", "evaluator_info.json", "stats_logger_info.json", "checkpoint_info.json"):
        write(root / "recover_info" / name, "{}", mtime=NOW - 0.25)
    write(root / "recover_info" / "dataloader_info.pkl", b"\x80", mtime=NOW - 0.2)
    d = discover(root, now=NOW)
    assert d.latest is not None and d.latest.step == 8 and d.problems == ()
    assert d.latest.path == str(root / "default" / "recover_checkpoint")


def test_areal_half_rewritten_recover_info_is_not_trusted(tmp_path: Path) -> None:
    root = areal_tree(tmp_path)
    write(root / "default" / "recover_checkpoint" / "optim.pt", b"o2", mtime=NOW - 0.4)
    # step_info already names the new point, dataloader_info.pkl is still the old dump's
    write(root / "recover_info" / "step_info.json", json.dumps({"epoch": 0, "global_step": 8}), mtime=NOW - 0.3)
    d = discover(root, now=NOW)
    assert d.latest is not None and d.latest.step == 9  # newest weight-only save, said so
    assert any("still being written" in r for _, r in d.skipped)
    assert any("falling back" in p for p in d.problems)


def test_areal_step_info_mid_write_and_left_corrupt(tmp_path: Path) -> None:
    root = areal_tree(tmp_path)
    write(root / "recover_info" / "step_info.json", '{"epo', mtime=NOW - 0.1)
    d = discover(root, now=NOW)
    assert d.problems and d.problems[0].startswith("recover_info is being rewritten")
    assert d.latest is not None and d.latest.step == 9
    later = discover(root, now=NOW + 60)  # nobody finished it: a corrupt recover file
    assert later.problems[0].startswith("recover_info/step_info.json is corrupt")
    assert later.latest is not None and later.latest.step == 9


def test_areal_weight_only_saves_half_written(tmp_path: Path) -> None:
    root = areal_tree(tmp_path, step_info="[]")  # a JSON list: corrupt
    (root / "default" / "epoch0epochstep11globalstep11").mkdir()  # empty
    write(root / "default" / "epoch0epochstep12globalstep12" / "model.safetensors", b"w", mtime=NOW - 1)
    d = discover(root, "areal", now=NOW)
    assert steps(d) == [3, 7, 9]
    sk = skipped_names(d)
    assert sk["epoch0epochstep11globalstep11"] == "empty directory"
    assert sk["epoch0epochstep12globalstep12"] == "still being written: modified 1.0 s ago"
    assert d.problems[0].startswith("recover_info/step_info.json is corrupt (no integer global_step)")


def test_glob_marker_vouches_unmarked_settles(tmp_path: Path) -> None:
    write(tmp_path / "ckpt_0005" / "w.pt", b"w", mtime=NOW - 0.5)
    write(tmp_path / "ckpt_0005" / "DONE", "", mtime=NOW - 0.5)
    write(tmp_path / "ckpt_0003" / "w.pt", b"w")
    d = discover(tmp_path, "glob", r"ckpt_(?P<step>\d+)", now=NOW)  # step_pattern positionally
    assert steps(d) == [5]  # marker in use: the unmarked ckpt_0003 is an interrupted save
    write(tmp_path / "files" / "model_7.pt", b"w", mtime=NOW - 0.5)
    write(tmp_path / "files" / "model_6.pt", b"w")
    d2 = discover(tmp_path / "files", "glob", r"model_(\d+)\.pt", now=NOW)
    assert steps(d2) == [6]
    assert skipped_names(d2)["model_7.pt"] == "still being written: modified 0.5 s ago"


def test_list_checkpoints_and_find_step(tmp_path: Path) -> None:
    for n in (10, 20, 30):
        hf_step(tmp_path, n)
    write(tmp_path / "checkpoint-40" / "model.safetensors", b"w")  # no trainer_state.json
    cks = list_checkpoints(tmp_path, "auto", now=NOW)
    assert [c.step for c in cks] == [10, 20, 30] and all(isinstance(c, Checkpoint) for c in cks)
    assert find_step(tmp_path, "hf", 20, now=NOW).path == str(tmp_path / "checkpoint-20")  # type: ignore[union-attr]
    assert find_step(tmp_path, "hf", 40, now=NOW) is None
    assert find_step(tmp_path, "auto", 25) is None
    assert list_checkpoints(tmp_path / "missing", "hf") == []
    write(tmp_path / "g" / "it_3" / "w", b"w")
    assert find_step(tmp_path / "g", "glob", 3, r"it_(\d+)", now=NOW).step == 3  # type: ignore[union-attr]
    assert Found is Discovery
    found = discover(tmp_path, "hf", None, now=NOW)
    assert found.latest is not None and found.latest.step == 30


# ---------------------------------------------------------------------------------------------
# writer_alive=False: completeness decides, not age (issue 17), on files written by the real writers

torch = pytest.importorskip("torch")


def _dcp_save(path: Path) -> None:
    """The trainer half of a prime-rl checkpoint, written as prime-rl writes it:
    src/prime_rl/trainer/ckpt.py CheckpointManager.save_to_path -> dcp_save(state_dict, checkpoint_id=path)
    (torch.distributed.checkpoint; its FileSystemWriter writes ``.metadata`` last). Single process."""
    import torch.distributed.checkpoint as dcp

    state = {"app": {"w": torch.arange(16, dtype=torch.float32), "step": torch.tensor(3)}}
    dcp.save(state, checkpoint_id=str(path), no_dist=True)


def _orchestrator_save(ckpt_dir: Path, step: int) -> None:
    """prime-rl src/prime_rl/orchestrator/ckpt.py CheckpointManager.save: mkstemp(prefix="progress.pt.",
    suffix=".tmp") in step_N/orchestrator, torch.save into it, os.replace to progress.pt."""
    import tempfile

    d = ckpt_dir / f"step_{step}" / "orchestrator"
    d.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix="progress.pt.", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        torch.save({"progress": {"step": step}, "train_source": {}}, f)
    os.replace(tmp, d / "progress.pt")


def test_prime_rl_step_offered_only_with_the_trainers_checkpoint(tmp_path: Path) -> None:
    ck = tmp_path / "outputs" / "checkpoints"  # prime-rl utils/pathing.py get_ckpt_dir(output_dir)
    _dcp_save(ck / "step_10" / "trainer")
    _orchestrator_save(ck, 10)
    # step 20: the orchestrator saved, the trainer was killed before its DCP save began
    _orchestrator_save(ck, 20)
    # step 30: the trainer's DCP save was cut off before .metadata (shards only)
    _dcp_save(ck / "step_30" / "trainer")
    (ck / "step_30" / "trainer" / ".metadata").unlink()
    _orchestrator_save(ck, 30)
    for alive in (True, False):
        d = discover(ck, "prime-rl", writer_alive=alive, now=time_now() + 3600)
        assert steps(d) == [10], alive
        reasons = {Path(c.path).name: c.reason for c in d.candidates if not c.complete}
        assert "trainer/.metadata missing" in reasons["step_20"] and "Checkpoint not found" in reasons["step_20"]
        assert "trainer/.metadata missing" in reasons["step_30"]
        assert [(c.step, c.complete) for c in d.candidates] == [(10, True), (20, False), (30, False)]


def time_now() -> float:
    import time

    return time.time()


def _hf_sharded(path: Path) -> None:
    """A model directory with model.safetensors.index.json and two shards, written by transformers'
    save_pretrained (src/transformers/modeling_utils.py PreTrainedModel.save_pretrained, max_shard_size)."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(path, safe_serialization=True, max_shard_size="20KB")


def test_writer_gone_fresh_complete_checkpoint_is_used_at_once(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    _hf_sharded(ck / "step_7")  # just written: every mtime is now
    assert len(list((ck / "step_7").glob("model-*.safetensors"))) >= 2
    now = time_now()
    alive = discover(ck, "glob", step_pattern=r"step_(\d+)", now=now, settle_s=60)
    assert steps(alive) == [] and "still being written" in skipped_names(alive)["step_7"]
    gone = discover(ck, "glob", step_pattern=r"step_(\d+)", now=now, settle_s=60, writer_alive=False)
    assert steps(gone) == [7] and gone.latest is not None and gone.latest.step == 7
    assert gone.candidates[0].complete and gone.candidates[0].reason == ""


def test_writer_gone_old_but_cut_off_checkpoints_are_rejected_with_reasons(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    _hf_sharded(ck / "step_1")
    # step_2: a shard cut off mid-write (the crash came during save_pretrained)
    _hf_sharded(ck / "step_2")
    shard = sorted((ck / "step_2").glob("model-*.safetensors"))[-1]
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    # step_3: the index names a shard that was never written
    _hf_sharded(ck / "step_3")
    sorted((ck / "step_3").glob("model-*.safetensors"))[0].unlink()
    # step_4: torch.save zip cut off (its central directory is written last)
    (ck / "step_4").mkdir()
    torch.save({"w": torch.zeros(256)}, ck / "step_4" / "optimizer.pt")
    raw = (ck / "step_4" / "optimizer.pt").read_bytes()
    (ck / "step_4" / "optimizer.pt").write_bytes(raw[:-40])
    # step_5: whole torch zip + an abandoned temporary file
    (ck / "step_5").mkdir()
    torch.save({"w": torch.zeros(4)}, ck / "step_5" / "optimizer.pt")
    (ck / "step_5" / "model.safetensors.tmp").write_bytes(b"partial")
    age_tree(ck)  # an hour old: age alone would accept them all

    alive = discover(ck, "glob", step_pattern=r"step_(\d+)", now=NOW + 7200)
    assert steps(alive) == [1, 2, 3, 4]  # today's settle rule cannot tell
    gone = discover(ck, "glob", step_pattern=r"step_(\d+)", now=NOW + 7200, writer_alive=False)
    assert steps(gone) == [1] and gone.latest is not None and gone.latest.step == 1
    why = {c.step: c.reason for c in gone.candidates if not c.complete}  # the rejected ones
    assert set(why) == {2, 3, 4, 5}
    assert "cut off" in why[2] and shard.name in why[2]
    assert "missing (named by model.safetensors.index.json)" in why[3]
    assert "optimizer.pt" in why[4] and "central directory" in why[4]
    assert "model.safetensors.tmp" in why[5] and "left behind" in why[5]


def test_writer_gone_marker_layouts_need_no_settling(tmp_path: Path) -> None:
    # transformers Trainer._save_checkpoint writes trainer_state.json last: it decides, fresh or not
    out = tmp_path / "grpo"
    write(out / "checkpoint-5" / "model.safetensors", b"x", mtime=time_now())
    write(out / "checkpoint-5" / "trainer_state.json", json.dumps({"global_step": 5}), mtime=time_now())
    write(out / "checkpoint-6" / "model.safetensors", b"x", mtime=time_now())
    d = discover(out, "hf", writer_alive=False)
    assert steps(d) == [5]
    assert [(c.step, c.complete) for c in d.candidates] == [(5, True), (6, False)]
    assert "trainer_state.json missing" in d.candidates[1].reason
    # a half-written trainer_state.json is corrupt, not "being written", once nothing writes
    write(out / "checkpoint-7" / "model.safetensors", b"x", mtime=time_now())
    write(out / "checkpoint-7" / "trainer_state.json", '{"global_st', mtime=time_now())
    assert steps(discover(out, "hf", writer_alive=True)) == [5]
    gone = discover(out, "hf", writer_alive=False)
    assert any("checkpoint-7/trainer_state.json is corrupt" in p for p in gone.problems)
