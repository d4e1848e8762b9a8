"""The benchmarks' regression check: a few quick comparisons against the raw tools, their
speed ratios (never times: the machine's speed cancels out) set against those stored in
``bench/baseline.json``, and a warning for each that fell below its stored spread.

CI runs it after the tests (``.ci/run``) and never fails on it: a ratio measured once, on a
machine busy with whatever CI left running, says "look", not "broken". Record a new
baseline on a quiet machine with ``python -m bench.regression --record``.

The comparisons are those of ``bench.run``'s foundation and codex suites, made small: a
local node's pipe against ``cat`` via ``anyio.open_process``, the SDK bridge against the
SDK's own transport, and the Codex agent's relay against a child process and ``json.loads``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TypedDict

import anyio

from . import codex_bench, foundation
from .common import Row, print_rows

BASELINE = Path(__file__).with_name("baseline.json")
SETTINGS = argparse.Namespace(pipe_mb=64, messages=20_000, repeat=7)
TOLERANCE = 0.9
"""A ratio warns below this share of its baseline's lowest pair: within the spread one
sitting saw is noise."""


class Stored(TypedDict):
    """A row's baseline: its median ratio, its lowest pair's, the day they were measured."""

    speed: float
    low: float
    recorded: str


async def measure() -> list[Row]:
    return [*await foundation.run(SETTINGS), *await codex_bench.run(SETTINGS)]


def regressions(rows: list[Row], baseline: dict[str, Stored]) -> list[str]:
    """A line for each row whose median ratio fell below its baseline's floor, and for each
    row the baseline lacks (a new benchmark, or one renamed: record the baseline again)."""
    found = []
    for row in rows:
        stored = baseline.get(row.name)
        if stored is None:
            found.append(f"{row.name}: no baseline (python -m bench.regression --record)")
        elif row.timing.speed < stored["low"] * TOLERANCE:
            found.append(
                f"{row.name}: {row.timing.speed:.2f}x, below its baseline {stored['speed']:.2f}x"
                f" (lowest pair {stored['low']:.2f}x, recorded {stored['recorded']})"
            )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", metavar="DATE", help="store this sitting's ratios as the baseline")
    given = parser.parse_args()
    rows = anyio.run(measure)
    print_rows(rows, SETTINGS.repeat)
    if given.record:
        stored = {
            row.name: {
                "speed": round(row.timing.speed, 3),
                "low": round(min(row.timing.ratios), 3),
                "recorded": given.record,
            }
            for row in rows
        }
        BASELINE.write_text(json.dumps(stored, indent=2) + "\n")
        print(f"baseline written: {BASELINE}")
        return
    for line in regressions(rows, json.loads(BASELINE.read_text())):
        print(f"warning: bench regression: {line}", file=sys.stderr)


if __name__ == "__main__":
    main()
