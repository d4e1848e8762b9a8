"""Kept processes (``nodeprov.node.keeper``) next to a direct spawn over the same channel: the
throughput of a bulk stdout, the added latency of small timed lines from 10 processes at once
(an agent's relay), and the time a dropped channel takes to come back, on local and Docker
nodes.

    python -m bench.keeper [--providers local docker] [--mib 64] [--lines 300] [--runs 3]

Each figure is paired in one run (direct first, then kept, alternating), and reported with its
spread over ``--runs``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from nodeprov import NodeHandle, get_provider
from nodeprov.node.keeper import Detached, KeepOptions, Reattached, keep
from nodeprov.spawn import SpawnedProcess, SpawnOptions
from nodeprov.testing.conformance.keeper import DROP_ATTACH

_IMAGE = "nodeprov-test-without-ps:latest"
# Prints its start's clock (ns) then one line per 10 ms with the clock: latency = receipt - stamp.
_TICKS = (
    'i=0; while [ "$i" -lt "$1" ]; do printf "%s %01024d\\n" "$(date +%s%N)" 0; i=$((i+1)); sleep 0.01; done'
)

Start = Callable[[NodeHandle, SpawnOptions], Awaitable[SpawnedProcess]]


async def _direct(node: NodeHandle, options: SpawnOptions) -> SpawnedProcess:
    return await node.spawn(options)


async def _kept(node: NodeHandle, options: SpawnOptions) -> SpawnedProcess:
    return await keep(node, options, KeepOptions(grace=30))


async def throughput(node: NodeHandle, start: Start, mib: int) -> float:
    """MiB/s of ``head -c`` through the spawn, from the first byte (a start is another figure)."""
    script = 'read -r go; exec head -c "$1" /dev/zero'
    async with await start(node, SpawnOptions("/bin/sh", ["-c", script, "bulk", str(mib << 20)])) as process:
        await process.stdin.send(b"go\n")
        received = len(await process.stdout.receive())
        began = time.perf_counter()
        async for chunk in process.stdout:
            received += len(chunk)
        took = time.perf_counter() - began
        await process.wait()
    assert received == mib << 20, received
    return mib / took


_SETTLE = 50  # lines of each process not counted: 10 streams starting at once settle first


async def messages(node: NodeHandle, start: Start, count: int, processes: int = 10) -> float:
    """Lines of 1 KB a second, from ``processes`` at once printing ``count`` each flat out."""
    script = 'read -r go; yes "$(printf %01023d 0)" | head -n "$1"'
    started = [
        await start(node, SpawnOptions("/bin/sh", ["-c", script, "lines", str(count)]))
        for _ in range(processes)
    ]
    received = 0

    async def one(process: SpawnedProcess) -> None:
        nonlocal received
        async with process:
            await process.stdin.send(b"go\n")
            async for chunk in process.stdout:
                received += chunk.count(b"\n")
            await process.wait()

    began = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for process in started:
            tg.start_soon(one, process)
    assert received == count * processes, received
    return received / (time.perf_counter() - began)


async def latencies(node: NodeHandle, start: Start, lines: int, processes: int = 10) -> list[float]:
    """Milliseconds from each timed line's print to its receipt, over ``processes`` at once, in
    the steady state: once all have started (starting is :func:`start_time`'s figure), and
    after each one's first lines (10 streams that begin at once are slow to begin, direct ones
    too)."""
    found: list[float] = []
    started = [
        await start(node, SpawnOptions("/bin/sh", ["-c", _TICKS, "ticks", str(lines)]))
        for _ in range(processes)
    ]

    async def one(process: SpawnedProcess) -> None:
        async with process:
            await process.stdin.send(b"go\n")
            pending, seen = b"", 0
            async for chunk in process.stdout:
                now = time.time_ns()
                *complete, pending = (pending + chunk).split(b"\n")
                seen += len(complete)
                found.extend(
                    (now - int(line.split(b" ", 1)[0])) / 1e6 for line in complete[max(0, _SETTLE - seen) :]
                )
            await process.wait()

    async with anyio.create_task_group() as tg:
        for process in started:
            tg.start_soon(one, process)
    return found


async def start_time(node: NodeHandle, start: Start) -> float:
    """Seconds from the start to the first byte of its output."""
    began = time.perf_counter()
    async with await start(node, SpawnOptions("echo", ["hi"])) as process:
        await process.stdout.receive()
        took = time.perf_counter() - began
        await process.stdin.aclose()
        await process.wait()
    return took


async def reattach_time(node: NodeHandle) -> float:
    """Seconds from the kill of an attach on the node to the first byte through the next."""
    heard: list[Detached | Reattached] = []
    script = 'while IFS= read -r line; do echo "$line"; done'
    async with await keep(
        node, SpawnOptions("/bin/sh", ["-c", script]), KeepOptions(watch=heard.append)
    ) as kept:
        await kept.stdin.send(b"before\n")
        await kept.stdout.receive()
        killer = SpawnOptions("/bin/sh", ["-c", DROP_ATTACH, "drop", kept.keeper])
        async with await node.spawn(killer) as drop:
            await drop.stdin.aclose()
            await drop.wait()
        began = time.perf_counter()
        await kept.stdin.send(b"after\n")
        said = await kept.stdout.receive()
        took = time.perf_counter() - began
        assert said == b"after\n", said
        await kept.stdin.aclose()
    assert [type(h) for h in heard] == [Detached, Reattached], heard
    return took


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bench(provider_name: str, mib: int, lines: int, runs: int) -> list[str]:
    settings: dict[str, Any] = (
        {"image": _IMAGE, "network_mode": "host", "pull": "never"} if provider_name == "docker" else {}
    )
    provider = get_provider(provider_name, **settings)
    rows: list[str] = []
    async with await provider.provision() as node:
        speeds: list[float] = []
        relayed: list[float] = []
        p99s: list[tuple[float, float]] = []
        p50s: list[tuple[float, float]] = []
        gaps: list[float] = []
        starts: list[tuple[float, float]] = []
        for _ in range(runs):
            direct, kept = await throughput(node, _direct, mib), await throughput(node, _kept, mib)
            speeds.append(kept / direct)
            relayed.append(await messages(node, _kept, 20000) / await messages(node, _direct, 20000))
            plain, through = await latencies(node, _direct, lines), await latencies(node, _kept, lines)
            p99s.append((_quantile(plain, 0.99), _quantile(through, 0.99)))
            p50s.append((_quantile(plain, 0.5), _quantile(through, 0.5)))
            gaps.append(await reattach_time(node))
            starts.append((await start_time(node, _direct), await start_time(node, _kept)))
        rows.append(
            f"| {provider_name} | throughput, kept / direct ({mib} MiB) | "
            f"{statistics.median(speeds):.2f}x | {min(speeds):.2f}-{max(speeds):.2f} | ≥ 0.9x |"
        )
        rows.append(
            f"| {provider_name} | lines of 1 KB a second, 10 processes, kept / direct | "
            f"{statistics.median(relayed):.2f}x | {min(relayed):.2f}-{max(relayed):.2f} | ≥ 0.9x |"
        )
        added = [kept - plain for plain, kept in p99s]
        rows.append(
            f"| {provider_name} | relay p99 added, 10 processes (direct p99 "
            f"{statistics.median(p for p, _ in p99s):.1f} ms) | {statistics.median(added):+.1f} ms | "
            f"{min(added):+.1f} to {max(added):+.1f} | ≤ 5 ms |"
        )
        added50 = [kept - plain for plain, kept in p50s]
        rows.append(
            f"| {provider_name} | relay p50 added | {statistics.median(added50):+.1f} ms | "
            f"{min(added50):+.1f} to {max(added50):+.1f} | |"
        )
        rows.append(
            f"| {provider_name} | start to first byte, kept (direct) | "
            f"{statistics.median(k for _, k in starts) * 1000:.0f} ms "
            f"({statistics.median(d for d, _ in starts) * 1000:.0f} ms) | "
            f"{min(k for _, k in starts) * 1000:.0f}-{max(k for _, k in starts) * 1000:.0f} | |"
        )
        rows.append(
            f"| {provider_name} | a dropped channel back (kill to next byte) | "
            f"{statistics.median(gaps) * 1000:.0f} ms | {min(gaps) * 1000:.0f}-{max(gaps) * 1000:.0f} | |"
        )
    return rows


async def main(arguments: argparse.Namespace) -> None:
    print("| node | figure | median | spread | goal |\n|---|---|---|---|---|")
    for name in arguments.providers:
        for row in await bench(name, arguments.mib, arguments.lines, arguments.runs):
            print(row, flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--providers", nargs="+", default=["local", "docker"])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--lines", type=int, default=350)
    parser.add_argument("--runs", type=int, default=3)
    anyio.run(main, parser.parse_args())
