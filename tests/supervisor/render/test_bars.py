from __future__ import annotations

import math

import pytest

from rlsup.supervisor.render.bars import EIGHTHS, bar, bar_line, fmt_mem, level, pct_line


@pytest.mark.parametrize(
    ("pct", "expected"),
    [
        (None, "na"),
        (math.nan, "na"),
        (0, "ok"),
        (69.9, "ok"),
        (70, "warn"),
        (89.99, "warn"),
        (90, "crit"),
        (100, "crit"),
        (250, "crit"),
        (-5, "ok"),
    ],
)
def test_level_default_thresholds(pct: float | None, expected: str) -> None:
    assert level(pct) == expected


@pytest.mark.parametrize("width", [1, 2, 7, 10, 33, 80])
@pytest.mark.parametrize("pct", [None, math.nan, -10, 0, 0.01, 12.5, 33.3, 50, 99.99, 100, 100.01, 150, 1e9])
def test_bar_exact_width(pct: float | None, width: int) -> None:
    assert len(bar(pct, width)) == width


@pytest.mark.parametrize(
    ("pct", "expected"),
    [
        (None, " " * 10),
        (0, " " * 10),
        (-3, " " * 10),
        (50, "█" * 5 + " " * 5),
        (100, "█" * 10),
        (140, "█" * 10),  # over 100 is clamped, never wider
        (5, "▌" + " " * 9),  # 4/8 of one cell (half block)
        (51.25, "█" * 5 + "▏" + " " * 4),
        (99.99, "█" * 9 + "▉"),  # rounds down: only 100% is full
    ],
)
def test_bar_values(pct: float | None, expected: str) -> None:
    assert bar(pct, 10) == expected


def test_bar_every_eighth_step() -> None:
    # One cell, 8 steps: 0/8 empty, 1/8..7/8 the partial glyphs, 8/8 full.
    assert [bar(100 * k / 8, 1) for k in range(9)] == [" ", *EIGHTHS, "█"]


def test_bar_empty_glyph_and_zero_width() -> None:
    assert bar(50, 8, empty=".") == "████...."
    assert bar(None, 4, empty=".") == "...."
    assert bar(50, 0) == ""
    assert bar(50, -3) == ""


@pytest.mark.parametrize(
    ("mb", "expected"),
    [
        (None, "N/A"),
        (math.nan, "N/A"),
        (0, "0M"),
        (512, "512M"),
        (1023.4, "1023M"),
        (1023.6, "1.0G"),
        (1228.8, "1.2G"),
        (81559, "79.6G"),
        (1024 * 1024 * 1.5, "1.5T"),
    ],
)
def test_fmt_mem(mb: float | None, expected: str) -> None:
    assert fmt_mem(mb) == expected


def test_bar_line_memory() -> None:
    line = bar_line("MEM", 40779.5, 81559, 40)
    assert len(line) == 40
    assert line.startswith("MEM ") and line.endswith(" 39.8G/79.6G")
    body = line[4:-12]
    assert body == bar(50, len(body))


@pytest.mark.parametrize("width", [1, 3, 8, 12, 20, 60])
@pytest.mark.parametrize(
    ("used", "total"), [(None, 100), (50, None), (50, 0), (0, 100), (100, 100), (250, 100), (math.nan, 100)]
)
def test_bar_line_exact_width_in_all_cases(used: float | None, total: float | None, width: int) -> None:
    assert len(bar_line("MEM", used, total, width)) == width


def test_bar_line_unknowns_and_narrow() -> None:
    assert bar_line("MEM", None, 100, 20).endswith(" N/A")
    assert bar_line("MEM", None, 100, 20)[4:16] == " " * 12
    assert bar_line("MEM", 512, None, 20).endswith(" 512M")
    # Too narrow for any bar: the numbers win, truncated with a marker.
    assert bar_line("MEM", 40000, 81559, 12) == "MEM 39.1G/7…"
    assert bar_line("MEM", 1, 2, 1) == "M"


def test_pct_line() -> None:
    line = pct_line("UTL", 74.0, 20)
    assert len(line) == 20 and line.endswith("  74%")
    assert line[4:15] == bar(74.0, 11)
    assert pct_line("UTL", None, 20).endswith(" N/A") and len(pct_line("UTL", None, 20)) == 20
    assert pct_line("CPU", 100.0, 10) == "CPU █ 100%"
