"""memory_growth detector: steady growth flags once; noise, plateaus and one-off jumps do not."""

from __future__ import annotations

import random

from rlsup.supervisor.diagnosis.memory import MemoryGrowthDetector, fit_growth


def feed(det: MemoryGrowthDetector, values: list[float], *, gpu: bool = False, start_step: int = 1,
         dt: float = 10.0) -> list:
    flags = []
    for i, mb in enumerate(values):
        step = start_step + i
        f = det.observe(i * dt, step, None if gpu else mb, mb if gpu else None)
        if f is not None:
            flags.append((step, f))
    return flags


def test_fit() -> None:
    fit = fit_growth([(float(x), 100.0 + 5 * x) for x in range(10)])
    assert fit is not None and abs(fit.slope - 5) < 1e-9 and fit.r2 > 0.999 and abs(fit.growth_mb - 45) < 1e-9
    assert fit_growth([(1.0, 5.0), (1.0, 6.0)]) is None


def test_linear_leak_flags_once() -> None:
    det = MemoryGrowthDetector()
    flags = feed(det, [4000 + 150 * i for i in range(40)])
    assert len(flags) == 1
    step, f = flags[0]
    assert f.type == "memory_growth" and not f.fatal
    # 512 MB and 20 % of the starting ~4 GB both needed: reached at step 7 (+900 MB), 8 samples -> step 8
    assert step == 8
    assert "host RSS grew steadily" in f.message and "+150.0 MB/step" in f.message
    assert f.evidence[0].startswith("step 1: host RSS") and len(f.evidence) == 6


def test_noisy_leak_still_flags_and_gpu_is_named() -> None:
    rng = random.Random(1)
    det = MemoryGrowthDetector(gpu_limit_mb=80_000)
    flags = feed(det, [20_000 + 300 * i + rng.uniform(-100, 100) for i in range(30)], gpu=True)
    assert len(flags) == 1
    msg = flags[0][1].message
    assert "GPU memory" in msg and "78.1 GiB limit in ~" in msg


def test_noise_plateau_and_one_off_jump_do_not_flag() -> None:
    rng = random.Random(2)
    assert feed(MemoryGrowthDetector(), [8000 + rng.uniform(-300, 300) for _ in range(200)]) == []
    # warm-up: grows then flat (a cache that fills once)
    warm = [2000 + 200 * i for i in range(6)] + [3000] * 60
    assert feed(MemoryGrowthDetector(), warm) == []
    # one step change
    assert feed(MemoryGrowthDetector(), [4000] * 20 + [6000] * 20) == []


def test_small_growth_below_thresholds() -> None:
    # +10 MB/step for 40 steps = 390 MB < 512 MB
    assert feed(MemoryGrowthDetector(), [4000 + 10 * i for i in range(40)]) == []
    # large absolute growth but only 10 % of a 40 GB process
    assert feed(MemoryGrowthDetector(), [40_000 + 100 * i for i in range(41)]) == []


def test_new_episode_after_reset_or_resume() -> None:
    det = MemoryGrowthDetector()
    assert len(feed(det, [4000 + 150 * i for i in range(20)])) == 1
    # resumed from an earlier step: a new process, a new baseline, a new episode
    assert len(feed(det, [4000 + 150 * i for i in range(20)], start_step=5)) == 1
    det = MemoryGrowthDetector()  # a new attempt: a new detector (as run/resources.py makes one per attempt)
    assert len(feed(det, [4000 + 150 * i for i in range(20)], start_step=30)) == 1


def test_episode_ends_when_memory_falls_back() -> None:
    det = MemoryGrowthDetector()
    values = [4000 + 150 * i for i in range(12)] + [4000] * 3 + [4000 + 150 * i for i in range(12)]
    assert [s for s, _ in feed(det, values)] == [8, 22]  # a second episode once it climbs steadily again


def test_window_drops_old_samples_and_missing_step_is_ignored() -> None:
    det = MemoryGrowthDetector(window_s=50)  # at dt=10 s only 6 samples fit: never min_samples
    assert feed(det, [4000 + 150 * i for i in range(40)]) == []
    assert MemoryGrowthDetector().observe(0.0, None, 1000.0) is None
