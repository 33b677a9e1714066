"""What holds a run's processes, decided once a run: how long its monitors rest between small reads."""

from __future__ import annotations

import os

from rlsup.supervisor.monitor import shim
from rlsup.supervisor.run.tracking import Tracking


def test_the_monitors_rest_by_the_runs_component_count_and_the_supervisors_cpus(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert Tracking(tmp_path, 3).monitor_rest_s == shim.REST_S  # an RL stack on 2 cores
    assert Tracking(tmp_path, 200).monitor_rest_s == shim.rest_for(200, 2) > shim.REST_S
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert Tracking(tmp_path, 200).monitor_rest_s == shim.REST_S  # the same run on 16 cores
