"""rlsup's TUIs raise Textual's frame cap (rlsup/tui/__init__.py): a frame that answers a key must
not wait out a 60 fps period after the flush that painted just before it. Checked in a fresh
interpreter each, since Textual reads the cap once, at its first import."""

from __future__ import annotations

import json
import os
import subprocess

from tests.conftest import PY

PROBE = (
    "import json, os, rlsup.tui.app, textual.screen as s; "
    "print(json.dumps({'period': s.UPDATE_PERIOD, 'env': os.environ.get('TEXTUAL_FPS')}))"
)


def probe(**env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k != "TEXTUAL_FPS"}
    r = subprocess.run([PY, "-c", PROBE], env={**base, **env}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_tui_repaints_at_up_to_240_frames_a_second_and_children_do_not_inherit_it():
    from rlsup.tui import FPS

    got = probe()
    assert got["period"] == 1 / FPS
    assert FPS >= 120  # the cap adds at most 1/FPS s to a key's frame
    assert got["env"] is None  # set only while Textual read it: nothing the TUI starts sees it


def test_an_explicit_textual_fps_wins():
    got = probe(TEXTUAL_FPS="30")
    assert got["period"] == 1 / 30
    assert got["env"] == "30"
