"""Pilot tests of the fleet screen over the real Fleet with fake pod sessions: one row per pod,
the fleet flag strip, selection, confirmation-gated fleet actions sent to the selected pods only,
enter opening a pod, an unreachable pod shown with its reason."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import fake
import pytest
from fake import run_async

from rlsup.supervisor.client.fleet import Fleet, PodSpec
from rlsup.tui.fleet import ComponentPicker, FleetApp, FleetFlagsScreen, pod_cells
from rlsup.tui.screens import ConfirmScreen

SIZE = (160, 30)
REFUSED = "cannot connect to root@10.0.0.9:22: [Errno 111] Connection refused; retrying in 1.0s"


class FakePodSession:
    """What :class:`rlsup.supervisor.client.session.Session` does for one pod, from a fixed snapshot
    (or a refused connection when there is none); records the commands it is asked to send."""

    def __init__(self, listener: Any, snapshot: dict[str, Any] | None):
        self.listener = listener
        self.snapshot = snapshot
        self.commands: list[tuple[str, str | None, dict[str, Any]]] = []
        self._stop = asyncio.Event()

    async def run(self) -> None:
        self.listener.on_connection("connecting", "")
        if self.snapshot is None:
            self.listener.on_connection("reconnecting", REFUSED)
        else:
            for e in self.snapshot.get("events", []):
                self.listener.on_event(e)
            self.listener.on_snapshot(self.snapshot, False)
            self.listener.on_connection("attached", "pod")
        await self._stop.wait()

    async def command(self, command: str, component: str | None = None, **args: Any) -> dict[str, Any]:
        if self.snapshot is None:
            return {"ok": False, "error": "not connected to the supervisor (reconnecting)"}
        self.commands.append((command, component, args))
        return {"ok": True, "message": f"{command} {component or 'all'}: requested"}

    def close(self) -> None:
        self._stop.set()


def utc_hm(ts: float) -> str:
    return time.strftime("%H:%M", time.gmtime(ts))


def make_fleet() -> Fleet:
    pods = {"qwen-0.5b": fake.crash_loop_run(), "qwen-1.5b": fake.crash_loop_run(),
            "llama-1b": fake.normal_run(), "gemma-4b": None}
    specs = [PodSpec(host=f"pod-{i}", label=label, run_dir=f"/workspace/runs/{label}")
             for i, label in enumerate(pods)]
    return Fleet(specs, lambda spec: None,
                 session_factory=lambda connect, listener: FakePodSession(listener, pods[listener.label]),
                 clock=lambda: fake.NOW, timefmt=utc_hm)


def make_app() -> FleetApp:
    return FleetApp(make_fleet(), timefmt=fake.utc_hms)


async def started(pilot) -> FleetApp:
    await pilot.pause()
    await pilot.pause(0.3)
    return pilot.app


def sent(app: FleetApp) -> dict[str, list]:
    return {p.label: p.session.commands for p in app.fleet.pods if p.session.commands}


def row(app: FleetApp, label: str) -> list[str]:
    from textual.widgets import DataTable

    return [str(c) for c in app.query_one(DataTable).get_row(label)]


@run_async
async def test_rows_flags_and_unreachable_pod():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        assert [p["label"] for p in app.fleet.snapshot()["pods"]] == ["qwen-0.5b", "qwen-1.5b", "llama-1b",
                                                                         "gemma-4b"]
        llama = row(app, "llama-1b")
        assert llama[1:4] == ["llama-1b", "connected", "demo"]
        assert "inference:running" in llama[9] and "trainer:running" in llama[9]
        assert llama[4:8] == ["120/200", "30.3s/it", "40m24s", "2 GPU 82%"] and llama[8] == ""
        qwen = row(app, "qwen-0.5b")
        assert "trainer:backoff" in qwen[9] and qwen[8].startswith("trainer step_crash · trainer: CUDA out of memory")
        gemma = row(app, "gemma-4b")
        assert gemma[2].startswith("reconnecting: cannot connect to root@10.0.0")
        assert "retrying" not in gemma[2]
        strip = str(app.query_one("#fleet-flags").render())
        assert "fleet_repeated_error" in strip
        assert "torch.OutOfMemoryError at train.py:88 on 2/4 pods" in strip and "qwen-0.5b, qwen-1.5b" in strip
        header = str(app.query_one("#fleet-header").render())
        assert "4 pods" in header and "3 connected" in header


@run_async
async def test_restart_on_selected_pods_asks_then_sends_to_those_only():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("space", "space")  # select qwen-0.5b and qwen-1.5b (the cursor moves down)
        assert app.selected == {"qwen-0.5b", "qwen-1.5b"}
        await pilot.press("r")
        assert isinstance(app.screen, ComponentPicker)
        assert "2 pods (qwen-0.5b, qwen-1.5b)" in app.screen.question
        await pilot.press("enter")  # the default is the component that failed last: trainer
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question == "Restart trainer on 2 pods (qwen-0.5b, qwen-1.5b)?"
        assert sent(app) == {}  # nothing before the answer
        await pilot.press("y")
        await pilot.pause(0.1)
        assert sent(app) == {"qwen-0.5b": [("restart", "trainer", {})], "qwen-1.5b": [("restart", "trainer", {})]}
        assert app.selected == set()  # done: the selection is cleared


@run_async
async def test_no_and_escape_send_nothing():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("d")
        assert isinstance(app.screen, ConfirmScreen)
        assert "rlsup down" in app.screen.question and "1 pod (qwen-0.5b)" in app.screen.question
        await pilot.press("n")
        await pilot.press("u")
        assert isinstance(app.screen, ComponentPicker)
        await pilot.press("escape")
        await pilot.press("r", "down", "enter", "n")
        await pilot.pause(0.1)
        assert sent(app) == {}
        assert not isinstance(app.screen, ConfirmScreen | ComponentPicker)


@run_async
async def test_down_on_all_pods_reports_the_unreachable_one():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("a", "d")
        assert "4 pods" in app.screen.question
        await pilot.press("y")
        await pilot.pause(0.2)
        assert sent(app) == {label: [("stop_all", None, {})] for label in ("qwen-0.5b", "qwen-1.5b", "llama-1b")}
        msgs = [n.message for n in app._notifications]
        assert "done on qwen-0.5b, qwen-1.5b, llama-1b" in msgs
        assert any(m.startswith("gemma-4b: not connected") for m in msgs)


@run_async
async def test_enter_opens_the_pod_and_v_shows_evidence_per_pod():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("v")
        assert isinstance(app.screen, FleetFlagsScreen)
        [flag] = app.screen.flags
        assert [e["pod"] for e in flag["evidence"]] == ["qwen-0.5b", "qwen-1.5b"]
        await pilot.press("escape", "down", "down", "enter")
        await pilot.pause()
    assert app.return_value == "llama-1b"
    assert all(s._stop.is_set() for s in (p.session for p in app.fleet.pods))  # every session closed


def test_pod_cells_of_a_pod_never_connected():
    cells = pod_cells({"label": "x", "connected": False, "connection": "connecting", "error": None,
                       "components": {}, "run": None, "gpus": []}, selected=True)
    assert str(cells["conn"]) == "connecting" and str(cells["sel"]) == "●" and cells["step"] == "-"


@pytest.mark.parametrize("press", [[], ["space", "v"]])
def test_fleet_snapshot(snap_compare, press):
    async def settle(pilot) -> None:
        await pilot.pause()
        await pilot.pause(0.3)

    assert snap_compare(make_app(), press=press, terminal_size=SIZE, run_before=settle)
