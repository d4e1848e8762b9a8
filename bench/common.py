"""What every benchmark shares: a byte pump, paired timing, and the report table."""

from __future__ import annotations

import os
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

CHUNK = 64 * 1024


@dataclass(frozen=True)
class Row:
    """One benchmark: what nodeprov did, what the raw tool did, and nodeprov's speed ratio
    (the raw tool's time divided by nodeprov's: above 1, nodeprov is faster)."""

    name: str
    ours: str
    raw: str
    speed: float
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
) -> tuple[float, float, float]:
    """Run the two in adjacent pairs, alternating which goes first, so that drift in the
    machine's load hits both alike. Returns each one's best time and the median of the
    pairwise speed ratios (raw time / our time: above 1, ours is faster)."""
    mine, theirs, ratios = [], [], []
    for i in range(repeat):
        if i % 2:
            theirs.append(await raw())
            mine.append(await ours())
        else:
            mine.append(await ours())
            theirs.append(await raw())
        ratios.append(theirs[-1] / mine[-1])
    return min(mine), min(theirs), statistics.median(ratios)


def print_rows(rows: list[Row], repeat: int) -> None:
    width = max(len(r.name) for r in rows)
    print(f"{'benchmark':{width}}  {'nodeprov':>16}  {'raw tool':>16}  speed  goal")
    for row in rows:
        goal = f">= {row.goal:.2f}x" if row.goal is not None else ""
        verdict = "" if row.goal is None else ("  met" if row.speed >= row.goal else "  MISSED")
        print(f"{row.name:{width}}  {row.ours:>16}  {row.raw:>16}  {row.speed:.2f}x {goal}{verdict}")
    print(
        f"(speed = raw time / nodeprov time, the median of {repeat} adjacent pairs of runs; "
        f"figures are the best run)"
    )
