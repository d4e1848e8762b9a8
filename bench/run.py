"""Benchmarks of the foundation, each against the raw tool doing the same work in the same run.

1. pipe: bytes through ``cat`` via a local node's SpawnedProcess, against ``cat`` started
   with a plain ``anyio.open_process``.
2. bridge: NDJSON messages read through NodeTransport, against the SDK's own
   SubprocessCLITransport reading the same stream from the same producer.

Run: ``make bench`` (or ``.venv/bin/python bench/run.py``). Prints MB/s or messages/s (the
best of ``--repeat`` runs each) and the median speed ratio of adjacent pairs of runs.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import stat
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from subprocess import PIPE

import anyio
from claude_agent_sdk import ClaudeAgentOptions
from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport

from nodeprov import NodeHandle, SpawnOptions, get_provider
from nodeprov.claude import NodeTransport

CHUNK = 64 * 1024


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


async def pipe_ours(node: NodeHandle, total: int) -> float:
    start = time.perf_counter()
    async with await node.spawn(SpawnOptions("cat")) as process:
        got = await pump(process.stdin.send, process.stdin.aclose, process.stdout.receive, total)
        await process.wait()
    assert got == total
    return time.perf_counter() - start


async def pipe_raw(total: int) -> float:
    start = time.perf_counter()
    async with await anyio.open_process(["cat"], stdin=PIPE, stdout=PIPE, stderr=PIPE) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        got = await pump(process.stdin.send, process.stdin.aclose, process.stdout.receive, total)
        await process.wait()
    assert got == total
    return time.perf_counter() - start


def make_stream(directory: Path, count: int, size: int) -> str:
    """A fake CLI that writes ``count`` assistant messages of about ``size`` bytes."""
    data = directory / f"messages-{count}-{size}.ndjson"
    with data.open("w") as f:
        for i in range(count):
            text = ("lorem ipsum é ✓ " * (size // 16 + 1))[:size]
            f.write(
                json.dumps(
                    {
                        "type": "assistant",
                        "message": {"id": f"m{i}", "content": [{"type": "text", "text": text}]},
                        "session_id": "s",
                    }
                )
                + "\n"
            )
    cli = directory / f"cli-{count}-{size}"
    cli.write_text(f"#!/bin/sh\nexec cat {data}\n")
    cli.chmod(cli.stat().st_mode | stat.S_IXUSR)
    return str(cli)


async def bridge_ours(node: NodeHandle, cli: str, count: int) -> float:
    start = time.perf_counter()
    transport = NodeTransport(node.spawn, ClaudeAgentOptions(max_buffer_size=8 << 20), cli_path=cli)
    await transport.connect()
    seen = sum([1 async for _ in transport.read_messages()])
    await transport.close()
    assert seen == count
    return time.perf_counter() - start


async def bridge_sdk(cli: str, count: int) -> float:
    start = time.perf_counter()
    transport = SubprocessCLITransport(
        prompt="", options=replace(ClaudeAgentOptions(max_buffer_size=8 << 20), cli_path=cli)
    )
    await transport.connect()
    seen = sum([1 async for _ in transport.read_messages()])
    await transport.close()
    assert seen == count
    return time.perf_counter() - start


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


async def main(args: argparse.Namespace) -> None:
    os.environ["CLAUDE_AGENT_SDK_SKIP_VERSION_CHECK"] = "1"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        async with await get_provider("local", root=Path(tmp) / "nodes").provision() as node:
            total = args.pipe_mb * 1024 * 1024 // CHUNK * CHUNK
            ours, raw, ratio = await compare(
                args.repeat, lambda: pipe_ours(node, total), lambda: pipe_raw(total)
            )
            mb = total / 1e6
            rows.append(
                (
                    "pipe: cat through SpawnedProcess vs anyio.open_process",
                    f"{mb / ours:,.0f} MB/s",
                    f"{mb / raw:,.0f} MB/s",
                    ratio,
                )
            )
            for count, size in ((args.messages, 200), (args.messages // 50, 50_000)):
                cli = make_stream(Path(tmp), count, size)
                ours, raw, ratio = await compare(
                    args.repeat,
                    functools.partial(bridge_ours, node, cli, count),
                    functools.partial(bridge_sdk, cli, count),
                )
                rows.append(
                    (
                        f"bridge: {count} messages of {size} B vs SDK transport",
                        f"{count / ours:,.0f} msg/s",
                        f"{count / raw:,.0f} msg/s",
                        ratio,
                    )
                )
    width = max(len(r[0]) for r in rows)
    print(f"{'benchmark':{width}}  {'nodeprov':>14}  {'raw':>14}  ratio (>1: faster)")
    for name, mine, theirs, ratio in rows:
        print(f"{name:{width}}  {mine:>14}  {theirs:>14}  {ratio:.2f}x")
    print(f"(throughput: best of {args.repeat} runs; ratio: median of {args.repeat} adjacent pairs)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pipe-mb", type=int, default=512, help="MiB pushed through cat per run")
    parser.add_argument("--messages", type=int, default=100_000, help="small messages per bridge run")
    parser.add_argument("--repeat", type=int, default=9, help="runs of each, interleaved")
    anyio.run(main, parser.parse_args())
