from __future__ import annotations

import threading
from pathlib import Path

from rlsup.trainer import rollouts


def _samples(step: int, count: int) -> list[rollouts.Sample]:
    return [rollouts.Sample(prompt=f"{step % 10}+0=", completion=str(step % 10), tokens=[str(step % 10)],
                            logprobs=[-0.5], reward=float(i % 2), advantage=0.0, group=i // 8)
            for i in range(count)]


def test_round_trip_and_listing(tmp_path: Path) -> None:
    assert rollouts.read_step(tmp_path, 1) is None
    rollouts.write_step(tmp_path, 1, _samples(1, 16), {"weights_step": 0})
    rollouts.write_step(tmp_path, 3, _samples(3, 16), {"weights_step": 2})
    samples, meta = rollouts.read_step(tmp_path, 1)
    assert samples == _samples(1, 16)
    assert meta["weights_step"] == 0 and meta["num_samples"] == 16
    assert rollouts.published_steps(tmp_path) == [1, 3]
    # no temp or trash dirs are left behind
    assert sorted(p.name for p in (tmp_path / "rollouts").iterdir()) == ["step_1", "step_3"]


def test_reader_never_sees_a_half_written_step(tmp_path: Path) -> None:
    """A writer keeps publishing (and replacing) large steps while a reader polls them."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for rnd in range(8):
                for step in (1, 2):
                    rollouts.write_step(tmp_path, step, _samples(step + rnd, 1000), {"round": rnd})
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)
        finally:
            stop.set()

    t = threading.Thread(target=writer)
    t.start()
    seen = 0
    while not stop.is_set():
        for step in (1, 2):
            found = rollouts.read_step(tmp_path, step)  # raises if a count mismatches
            if found is not None:
                samples, meta = found
                assert len(samples) == 1000 == meta["num_samples"]
                assert samples == _samples(step + meta["round"], 1000)
                seen += 1
    t.join()
    assert not errors
    assert seen > 0
