"""rlsup.trainer.sync against the failures the real engines showed (tests/engines/ ran them; servers.py
replays them): a failed vLLM reload, an SGLang that dies on a wrong-shape checkpoint, vLLM dev mode's
/server_info, a source build's version, a trainer stopped mid-reload, the prefix-cache reset."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from servers import EngineServer

from rlsup.trainer import sync as sync_mod
from rlsup.trainer import weights as weights_mod
from rlsup.trainer.sync import WeightSync, detect, parse_version


def _dir(tmp: Path, step: int) -> Path:
    d = tmp / "weights" / f"step_{step}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "STABLE").write_text("")
    (d / "config.json").write_text("{}")
    return d


def test_vllm_dev_mode_server_info_is_not_taken_for_sglang() -> None:
    """vLLM 0.32.0 in dev mode answers GET /server_info; with the trainer's default hint (sglang) it was
    detected as SGLang and sent /update_weights_from_disk (404)."""
    s = EngineServer("vllm", "0.32.0")
    try:
        assert sync_mod.request("GET", f"{s.url}/server_info").ok  # the route that misled detection
        for hint in ("sglang", "auto", "vllm"):
            e = detect(s.url, hint)
            assert (e.kind, e.raw, e.rl_router) == ("vllm", "0.32.0", True), hint
    finally:
        s.close()


def test_source_build_version_is_unknown_not_old() -> None:
    assert parse_version("0.1.dev12345+g1234abc") is None
    assert parse_version("0.1.dev1") is None
    assert parse_version("0.32.0+cpu") == (0, 32, 0)
    assert parse_version("0.10.2") == (0, 10, 2)
    assert parse_version("0.5.23") == (0, 5, 23)


def test_source_build_uses_the_newest_reload(tmp_path: Path) -> None:
    """A vLLM built from a source checkout without tags reports 0.1.devN; taken as < 0.16 it got
    update_config, which answers 500 on 0.32.0 (recorded)."""
    s = EngineServer("vllm", "0.32.0")
    s.version = "0.1.dev9999+gabcdef"  # what /version answers; the behaviour stays 0.32.0's
    try:
        ws = WeightSync(s.url, "vllm", tmp_path / "weights", tries=1, out=io.StringIO())
        r = ws.publish(1, _dir(tmp_path, 1))
        assert r.loaded, r.detail
        methods = [b["method"] for c, b in s.calls if c == "POST /collective_rpc"]
        assert methods == ["reload_weights"]
    finally:
        s.close()


def test_failed_vllm_reload_is_never_resumed_and_the_server_is_restarted(tmp_path: Path) -> None:
    s = EngineServer("vllm", "0.32.0")
    restarts: list[str] = []
    good = _dir(tmp_path, 1)
    bad = _dir(tmp_path, 2)
    s.bad_paths.add(str(bad))

    def restart() -> tuple[bool, str]:
        restarts.append("inference")
        s.dead = True  # stopped ...

        def back() -> None:
            time.sleep(0.3)
            s.broken = s.dead = s.paused = False  # ... and started again, serving the last good weights
            s.resumed.set()
            s.serving = s.config_model = weights_mod.published(tmp_path / "weights", good=True)[1].as_posix()
        threading.Thread(target=back, daemon=True).start()
        return True, "restarted"

    out = io.StringIO()
    try:
        ws = WeightSync(s.url, "vllm", tmp_path / "weights", tries=3, retry_s=0.01, out=out,
                        restart_server=restart, restart_timeout=30)
        assert ws.publish(1, good).loaded
        r = ws.publish(2, bad)
        assert not r.loaded and r.broken
        calls = [c for c, _ in s.calls]
        assert calls.count("POST /resume") == 1, "a broken engine was resumed"
        assert sum(c.startswith("POST /collective_rpc") for c in calls) == 2, "a broken engine was reloaded again"
        assert restarts == ["inference"]
        assert (bad / weights_mod.REJECTED).exists()
        assert weights_mod.published(tmp_path / "weights", good=True) == (1, good)
        assert s.serving == str(good)
        assert json.loads((tmp_path / "weights" / "latest.json").read_text())["step"] == 1
        assert ws.publish(3, _dir(tmp_path, 3)).loaded  # detected again and reloaded after the restart
    finally:
        s.close()


def test_failed_vllm_reload_without_restart_is_flagged_and_left_paused(tmp_path: Path) -> None:
    s = EngineServer("vllm", "0.32.0")
    bad = tmp_path / "missing"
    s.bad_paths.add(str(bad))
    out = io.StringIO()
    try:
        r = WeightSync(s.url, "vllm", tmp_path / "weights", tries=3, out=out).publish(1, bad)
        assert r.broken and s.paused and "POST /resume" not in [c for c, _ in s.calls]
        assert out.getvalue().startswith("rlsup-flag: engine_broken: ")
        assert "rlsup restart" in out.getvalue()
    finally:
        s.close()


def test_sglang_dying_on_a_wrong_shape_checkpoint_is_restarted_without_it(tmp_path: Path) -> None:
    s = EngineServer("sglang", "0.5.23")
    good, bad = _dir(tmp_path, 1), _dir(tmp_path, 2)
    s.wrong_shape.add(str(bad))
    restarted: list[str] = []

    def restart() -> tuple[bool, str]:
        restarted.append("x")

        def back() -> None:
            time.sleep(0.3)
            s.dead = False
            s.config_model = s.serving = str(weights_mod.published(tmp_path / "weights", good=True)[1])
        threading.Thread(target=back, daemon=True).start()
        return True, "restarted"

    try:
        ws = WeightSync(s.url, "sglang", tmp_path / "weights", tries=3, retry_s=0.01, out=io.StringIO(),
                        restart_server=restart, restart_timeout=30)
        assert ws.publish(1, good).loaded
        r = ws.publish(2, bad)
        assert r.broken and restarted == ["x"]
        assert (bad / weights_mod.REJECTED).exists() and s.serving == str(good)
    finally:
        s.close()


def test_reset_prefix_cache_resets_running_requests_and_says_when_unconfirmed(tmp_path: Path, capsys) -> None:
    for version, query, loud in (("0.11.0", False, True), ("0.25.1", True, True), ("0.26.0", True, False)):
        s = EngineServer("vllm", version, pause_fails=True)
        try:
            ws = WeightSync(s.url, "vllm", tmp_path / "weights", tries=1, out=io.StringIO())
            assert ws.publish(1, _dir(tmp_path, 1)).loaded
            assert ws.publish(2, _dir(tmp_path, 2)).loaded
            resets = [c for c, _ in s.calls if c.startswith("POST /reset_prefix_cache")]
            assert len(resets) == 2 and all(("reset_running_requests=true" in c) == query for c in resets)
        finally:
            s.close()
        err = capsys.readouterr()
        said = (err.out + err.err).count("empty 200 whether or not it reset the cache")
        assert said == (1 if loud else 0), (version, err)


def test_neutral_sampling_params_are_explicit() -> None:
    from rlsup.trainer.orchestrator import neutral_sampling

    p = neutral_sampling(0.7)
    assert p == {"temperature": 0.7, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "presence_penalty": 0.0,
                 "frequency_penalty": 0.0, "repetition_penalty": 1.0}


def test_sigterm_during_a_vllm_reload_resumes_the_server(tmp_path: Path) -> None:
    """rlsup stops the trainer with SIGTERM; Python's default action skipped the `finally` that resumes."""
    s = EngineServer("vllm", "0.32.0")
    entered = s.slow("/collective_rpc", 30)
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from rlsup.trainer.stopping import install_sigterm_exit
        from rlsup.trainer.sync import WeightSync
        install_sigterm_exit()
        WeightSync({s.url!r}, "vllm", Path({str(tmp_path / 'weights')!r})).publish(1, Path({str(_dir(tmp_path, 1))!r}))
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        assert entered.wait(60)
        assert s.paused
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(60) == 128 + signal.SIGTERM
        assert not s.paused and "POST /resume" in [c for c, _ in s.calls]
    finally:
        if proc.poll() is None:
            proc.kill()
        s.close()


def _safetensors(d: Path, shapes: dict[str, list[int]]) -> None:
    header = json.dumps({k: {"dtype": "F32", "shape": v, "data_offsets": [0, 0]} for k, v in shapes.items()}).encode()
    (d / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)


def test_wrong_shape_checkpoint_is_refused_before_the_server_sees_it(tmp_path: Path) -> None:
    for kind, version in (("vllm", "0.32.0"), ("sglang", "0.5.23")):
        s = EngineServer(kind, version)
        good, wide = _dir(tmp_path / kind, 1), _dir(tmp_path / kind, 2)
        _safetensors(good, {"mlp.up.weight": [256, 128], "embed.weight": [384, 128]})
        _safetensors(wide, {"mlp.up.weight": [512, 128], "embed.weight": [384, 128]})
        s.wrong_shape.add(str(wide))  # SGLang 0.5.23 would die on it
        out = io.StringIO()
        try:
            ws = WeightSync(s.url, kind, tmp_path / kind / "weights", tries=1, out=out)
            assert ws.publish(1, good).loaded
            n = len(s.calls)
            r = ws.publish(2, wide)
            assert not r.loaded and not r.broken and "mlp.up.weight" in r.detail
            assert len(s.calls) == n, "the server was asked to load it"
            assert (wide / weights_mod.REJECTED).exists() and not s.dead
            assert out.getvalue().startswith("rlsup-flag: weights_rejected: ")
            assert weights_mod.published(tmp_path / kind / "weights", good=True) == (1, good)
        finally:
            s.close()


def test_a_wrong_hint_does_not_make_sglang_a_vllm() -> None:
    s = EngineServer("sglang", "0.5.23")
    try:
        e = detect(s.url, "vllm")  # the real 0.5.23 run hit this: /version 404, and the hint won
        assert (e.kind, e.version) == ("sglang", (0, 5, 23))
    finally:
        s.close()


def test_a_restart_that_rlsup_refuses_is_flagged_not_waited_on(tmp_path: Path) -> None:
    from rlsup.trainer.sync import rlsup_restart

    s = EngineServer("vllm", "0.32.0")
    bad = tmp_path / "missing"
    s.bad_paths.add(str(bad))
    out = io.StringIO()
    try:
        # no supervisor owns this run dir: `rlsup restart` exits 1 at once
        ws = WeightSync(s.url, "vllm", tmp_path / "weights", out=out, restart_timeout=600,
                        restart_server=rlsup_restart("inference", tmp_path / "no-run"))
        r = ws.publish(1, bad)  # had it waited out the 600 s restart_timeout, this test's 120 s would be up
        assert r.broken
        assert "rlsup-flag: engine_broken: " in out.getvalue() and "restart it by hand" in out.getvalue()
    finally:
        s.close()


@pytest.mark.parametrize(("kind", "version"), [("sglang", "0.5.23"), ("vllm", "0.32.0")])
def test_a_push_while_the_server_is_down_waits_for_it_and_rejects_nothing(tmp_path: Path, kind: str,
                                                                          version: str) -> None:
    """Seen under `rlsup up -d` with a real vLLM (tests/engines/test_loop.py): its engine died as the trainer
    pushed step 3, the push was refused (nothing listened), and the trainer took that for a broken reload: it
    marked good weights REJECTED, restarted a server rlsup was already restarting, and the restarted server
    served step 2 to the end. Refused means nothing was loaded: wait for the server, push again."""
    s = EngineServer(kind, version)
    port = int(s.url.rsplit(":", 1)[1])
    one, two = _dir(tmp_path, 1), _dir(tmp_path, 2)
    restarted: list[str] = []
    back: list[EngineServer] = []

    def restart() -> tuple[bool, str]:
        restarted.append("x")
        return True, "restarted"

    def come_back() -> None:  # rlsup restarting the dead server on the same port
        time.sleep(1.5)
        back.append(EngineServer(kind, version, port=port))

    try:
        ws = WeightSync(s.url, kind, tmp_path / "weights", tries=3, retry_s=0.01, out=io.StringIO(),
                        restart_server=restart, restart_timeout=60)
        assert ws.publish(1, one).loaded
        s.close()  # the engine died: nothing listens until rlsup has restarted it
        threading.Thread(target=come_back, daemon=True).start()
        r = ws.publish(2, two)
        assert r.loaded and not r.broken, r.detail
        assert restarted == [] and not (two / weights_mod.REJECTED).exists()
        assert back and back[0].serving == str(two)
        assert weights_mod.latest(tmp_path / "weights") == (2, two)
    finally:
        for x in back:
            x.close()


def _one_tensor(d: Path, width: int) -> Path:
    import torch
    from safetensors.torch import save_file

    save_file({"model.layers.0.mlp.down_proj.weight": torch.zeros(4, width)}, str(d / "model.safetensors"))
    return d


def test_sglang_dying_during_a_push_of_matching_weights_does_not_reject_them(tmp_path: Path) -> None:
    """Seen under `rlsup up -d` with the real SGLang 0.5.23 (tests/engines/test_loop.py): its scheduler was killed
    while the trainer pushed step 2; the dropped connection was taken for SGLang dying on the checkpoint, so a good
    step 2 was marked REJECTED and the restarted server served step 1. A checkpoint whose tensor shapes match what
    the server served is not blamed: wait for the server, push again. One that does not match is refused before
    it is sent (test_wrong_shape_checkpoint_is_refused_before_the_server_sees_it) and one whose shapes cannot be
    read is still blamed (test_sglang_dying_on_a_wrong_shape_checkpoint_is_restarted_without_it)."""
    s = EngineServer("sglang", "0.5.23")
    one, two = _one_tensor(_dir(tmp_path, 1), 8), _one_tensor(_dir(tmp_path, 2), 8)
    s.wrong_shape.add(str(two))  # the contract server drops the connection on it: the engine dies mid-reload
    restarted: list[str] = []

    def come_back() -> None:  # rlsup restarts the dead server
        time.sleep(1.5)
        s.wrong_shape.discard(str(two))
        s.dead = False

    try:
        ws = WeightSync(s.url, "sglang", tmp_path / "weights", tries=3, retry_s=0.01, out=io.StringIO(),
                        restart_server=lambda: (restarted.append("x"), (True, "restarted"))[1], restart_timeout=60)
        assert ws.publish(1, one).loaded
        threading.Thread(target=come_back, daemon=True).start()
        r = ws.publish(2, two)
        assert r.loaded and not r.broken, r.detail
        assert restarted == [] and not (two / weights_mod.REJECTED).exists() and s.serving == str(two)
    finally:
        s.close()
