"""The benchmarks' regression check (bench/regression.py) warns on what it should: a ratio
below its baseline's floor, a row the baseline lacks; and its baseline names the rows the
check measures today (measuring is CI's, never a test's: no timing is asserted here)."""

from __future__ import annotations

import json

from bench.common import Row, Timing
from bench.regression import BASELINE, SETTINGS, TOLERANCE, Stored, regressions

_STORED = {"pipe": Stored(speed=1.0, low=0.9, recorded="2026-11-28")}


def _row(name: str, *ratios: float) -> Row:
    return Row(name, "", "", Timing(1.0, 1.0, list(ratios)))


def test_a_ratio_within_its_baseline_spread_is_quiet() -> None:
    assert regressions([_row("pipe", 0.9 * TOLERANCE, 0.85, 0.95)], _STORED) == []


def test_a_ratio_below_its_baseline_floor_warns() -> None:
    [line] = regressions([_row("pipe", 0.5, 0.6, 0.7)], _STORED)
    assert line.startswith("pipe: 0.60x, below its baseline 1.00x")


def test_a_row_without_a_baseline_warns() -> None:
    [line] = regressions([_row("new", 1.0)], _STORED)
    assert "no baseline" in line


def test_the_baseline_holds_every_row_the_check_measures() -> None:
    stored = json.loads(BASELINE.read_text())
    names = {
        f"local pipe: {SETTINGS.pipe_mb} MiB through cat vs anyio.open_process",
        *(f"bridge: {n} messages of {size} B vs the SDK's transport" for n, size in _SIZES),
        *(f"codex relay: {n} items of {size} B vs a child process and json.loads" for n, size in _SIZES),
    }
    assert set(stored) == names
    assert all(0 < row["low"] <= row["speed"] for row in stored.values())


_SIZES = ((SETTINGS.messages, 200), (SETTINGS.messages // 50, 50_000))
