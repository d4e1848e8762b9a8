"""Kept processes (``nodeprov.node.keeper``) next to a direct spawn over the same channel: the
throughput of a bulk stdout, the added latency of small timed lines from 10 processes at once
(an agent's relay), and the time a dropped channel takes to come back, on local and Docker
nodes.

    python -m bench.keeper [--providers local docker] [--mib 64] [--lines 300] [--runs 3]

Each figure is paired in one run (direct first, then kept, alternating), and reported with its
spread over ``--runs``.

    python -m bench.keeper --footprint [--providers local docker] [--turns 200]

What a kept agent leaves (issue 43): one that writes 1 MiB of stdout for each 1 KB line of
stdin, for ``--turns`` turns (200 MiB), then takes 2,000 lines of 1 KB and three 5 MiB ones
(said back, a word each): the peak size of its keeper's directory on the node (``du``,
sampled every 50 ms), of the stdin the control plane holds
(:attr:`~nodeprov.node.keeper.KeptProcess.unfed`) and of the control plane's memory
(``tracemalloc``, over the turns); next to the same with ``keep_read=None`` (the node keeps
all the output, as before issue 43; ``in.log`` is freed all the same, where it kept it all
before) and, for stdin, what was sent (all of which the control plane held before: a frame
went only once an attach found it in the node's log, at a re-attach).
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from nodeprov import NodeHandle, get_provider
from nodeprov.node.keeper import Detached, KeepOptions, Reattached, keep
from nodeprov.spawn import SpawnedProcess, SpawnOptions
from nodeprov.testing.conformance.keeper import DROP_ATTACH, disk_usage

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


_MIB = 1 << 20
# A line of stdin that starts "turn" is a turn: 1 MiB of stdout; another is said back (its
# first word).
_TURNS = """while IFS= read -r line; do
  case $line in turn*) yes "${line%% *}" | head -c 1048576 ;; *) printf '%s\\n' "${line%% *}" ;; esac
done"""


@dataclass
class Footprint:
    """What a run of :data:`_TURNS` left, at its peaks (bytes)."""

    disk_turns: int = 0  # the keeper's directory while it wrote its stdout
    traced_turns: int = 0  # the control plane's traced memory meanwhile
    disk_input: int = 0  # the keeper's directory while it took its stdin
    held: int = 0  # stdin the control plane held
    held_at_end: int = 0  # ... once every line was said back
    sent: int = 0  # stdin sent


async def footprint(node: NodeHandle, turns: int, keep_read: int | None) -> Footprint:
    """What a run of :data:`_TURNS` leaves: ``turns`` turns, then a burst of stdin."""
    options = KeepOptions(grace=30, keep_read=keep_read)
    kept = await keep(node, SpawnOptions("/bin/sh", ["-c", _TURNS]), options)
    found, disk, received = Footprint(), [0], [0]

    async def sample() -> None:
        while True:
            disk[0] = max(disk[0], await disk_usage(node, kept))
            found.held = max(found.held, kept.unfed)
            await anyio.sleep(0.05)

    async def read() -> None:  # all along: what was fed is heard with stdout
        async for chunk in kept.stdout:
            received[0] += len(chunk)

    async def until(done: Callable[[], bool]) -> None:
        with anyio.fail_after(120):
            while not done():  # noqa: ASYNC110 - the kept process's counters: no event to wait on
                await anyio.sleep(0.005)

    async def send(line: bytes) -> None:
        await kept.stdin.send(line)
        found.sent, found.held = found.sent + len(line), max(found.held, kept.unfed)

    async with kept, anyio.create_task_group() as tg:
        tg.start_soon(sample)
        tracemalloc.start()
        try:
            tg.start_soon(read)
            for turn in range(turns):
                await send(b"turn%d %s\n" % (turn, b"x" * 1000))
                await until(lambda: received[0] >= (turn + 1) * _MIB)  # noqa: B023 - awaited here
            found.traced_turns = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        found.disk_turns, disk[0] = disk[0], 0
        lines = [b"%d %s\n" % (i, b"y" * 1016) for i in range(2000)]
        lines += [b"image%d %s\n" % (i, b"z" * (5 * _MIB)) for i in range(3)]
        for line in lines:
            await send(line)
        said = turns * _MIB + sum(len(line.split(b" ", 1)[0]) + 1 for line in lines)
        await until(lambda: received[0] >= said and not kept.unfed)
        found.held_at_end, found.disk_input = kept.unfed, disk[0]
        await kept.stdin.aclose()
        tg.cancel_scope.cancel()
    return found


async def footprints(provider_name: str, turns: int, keep_read: int | None) -> list[str]:
    settings: dict[str, Any] = (
        {"image": _IMAGE, "network_mode": "host", "pull": "never"} if provider_name == "docker" else {}
    )
    provider = get_provider(provider_name, **settings)
    async with await provider.provision() as node:
        now = await footprint(node, turns, KeepOptions().keep_read if keep_read is None else keep_read)
        before = await footprint(node, turns, None)
    name, mib = provider_name, _MIB
    return [
        f"| {name} | keeper dir on the node, peak over {turns} MiB of stdout in {turns} turns | "
        f"{now.disk_turns / mib:.1f} MiB | {before.disk_turns / mib:.1f} MiB |",
        f"| {name} | control plane's traced memory, peak over those turns | "
        f"{now.traced_turns / mib:.2f} MiB | {before.traced_turns / mib:.2f} MiB |",
        f"| {name} | keeper dir, peak over 2,000 lines of 1 KB and 3 of 5 MiB on stdin | "
        f"{now.disk_input / mib:.1f} MiB | {before.disk_input / mib:.1f} MiB |",
        f"| {name} | stdin the control plane holds, peak | "
        f"{now.held / mib:.2f} MiB | {now.sent / mib:.2f} MiB |",
        f"| {name} | stdin the control plane holds once all was said back | "
        f"{now.held_at_end / mib:.2f} MiB | {now.sent / mib:.2f} MiB |",
    ]


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
    if arguments.footprint:
        print("| node | figure | now | keep_read=None (stdin: all sent) |\n|---|---|---|---|")
        for name in arguments.providers:
            keep_read = None if arguments.keep_read is None else int(arguments.keep_read * _MIB)
            for row in await footprints(name, arguments.turns, keep_read):
                print(row, flush=True)
        return
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
    parser.add_argument("--footprint", action="store_true", help="what a kept agent leaves (issue 43)")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument(
        "--keep-read",
        type=float,
        help="MiB the node keeps behind the reader (default: the keeper's; a run's: 64)",
    )
    anyio.run(main, parser.parse_args())
