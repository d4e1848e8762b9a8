"""What every benchmark shares: a byte pump, paired timing, and the report table."""

from __future__ import annotations

import os
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

CHUNK = 64 * 1024


@dataclass(frozen=True)
class Timing:
    """Paired runs of nodeprov and the raw tool: each one's best time, and the speed ratios
    (the raw tool's time divided by nodeprov's: above 1, nodeprov is faster)."""

    ours: float
    raw: float
    ratios: list[float]

    @property
    def speed(self) -> float:
        """The median ratio."""
        return statistics.median(self.ratios)


@dataclass(frozen=True)
class Row:
    """One benchmark: what nodeprov did, what the raw tool did, and the timing behind them."""

    name: str
    ours: str
    raw: str
    timing: Timing
    goal: float | None = None


async def pump(
    send: Callable[[bytes], Awaitable[None]],
    close: Callable[[], Awaitable[None]],
    receive: Callable[[], Awaitable[bytes]],
    total: int,
) -> int:
    block = os.urandom(CHUNK)
    received = 0

    async def writer() -> None:
        for _ in range(total // CHUNK):
            await send(block)
        await close()

    async with anyio.create_task_group() as tg:
        tg.start_soon(writer)
        try:
            while True:
                received += len(await receive())
        except anyio.EndOfStream:
            pass
    return received


async def compare(
    repeat: int, ours: Callable[[], Awaitable[float]], raw: Callable[[], Awaitable[float]]
) -> Timing:
    """Run the two in adjacent pairs, alternating which goes first, so that drift in the
    machine's load hits both alike."""
    mine, theirs, ratios = [], [], []
    for i in range(repeat):
        if i % 2:
            theirs.append(await raw())
            mine.append(await ours())
        else:
            mine.append(await ours())
            theirs.append(await raw())
        ratios.append(theirs[-1] / mine[-1])
    return Timing(min(mine), min(theirs), ratios)


def print_rows(rows: list[Row], repeat: int) -> None:
    width = max(len(r.name) for r in rows)
    print(f"{'benchmark':{width}}  {'nodeprov':>16}  {'raw tool':>16}  speed  {'spread':>11}  goal")
    for row in rows:
        speed, ratios = row.timing.speed, row.timing.ratios
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        goal = f">= {row.goal:.2f}x" if row.goal is not None else ""
        verdict = "" if row.goal is None else ("  met" if speed >= row.goal else "  MISSED")
        figures = f"{row.ours:>16}  {row.raw:>16}  {speed:.2f}x {spread:>11}"
        print(f"{row.name:{width}}  {figures}  {goal}{verdict}")
    print(
        f"(speed = raw time / nodeprov time, the median of {repeat} adjacent pairs of runs, "
        f"spread the lowest and highest pair; figures are the best run)"
    )
