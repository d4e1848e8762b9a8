"""Benchmarks of the foundation, each against the raw tool doing the same work in the same run.

1. pipe: bytes through ``cat`` via a local node's SpawnedProcess, against ``cat`` started
   with a plain ``anyio.open_process``.
2. bridge: NDJSON messages read through NodeTransport, against the SDK's own
   SubprocessCLITransport reading the same stream from the same producer.

Run through ``bench/run.py``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import stat
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from subprocess import PIPE

import anyio
from claude_agent_sdk import ClaudeAgentOptions
from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport

from nodeprov import NodeHandle, SpawnOptions, get_provider
from nodeprov.agents.claude import NodeTransport

from .common import CHUNK, Row, compare, pump


async def pipe_ours(node: NodeHandle, total: int) -> float:
    start = time.perf_counter()
    async with await node.spawn(SpawnOptions("cat")) as process:
        got = await pump(process.stdin.send, process.stdin.aclose, process.stdout.receive, total)
        await process.wait()
    assert got == total
    return time.perf_counter() - start


async def pipe_raw(argv: list[str], total: int) -> float:
    """``total`` bytes through the raw tool's ``cat`` (``argv``), run as a plain child process."""
    start = time.perf_counter()
    async with await anyio.open_process(argv, stdin=PIPE, stdout=PIPE, stderr=PIPE) as process:
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


async def run(args: argparse.Namespace) -> list[Row]:
    os.environ["CLAUDE_AGENT_SDK_SKIP_VERSION_CHECK"] = "1"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        async with await get_provider("local", root=Path(tmp) / "nodes").provision() as node:
            total = args.pipe_mb * 1024 * 1024 // CHUNK * CHUNK
            timing = await compare(
                args.repeat,
                functools.partial(pipe_ours, node, total),
                functools.partial(pipe_raw, ["cat"], total),
            )
            mb = total / 1e6
            rows.append(
                Row(
                    f"local pipe: {args.pipe_mb} MiB through cat vs anyio.open_process",
                    f"{mb / timing.ours:,.0f} MB/s",
                    f"{mb / timing.raw:,.0f} MB/s",
                    timing,
                    0.95,
                )
            )
            for count, size in ((args.messages, 200), (args.messages // 50, 50_000)):
                cli = make_stream(Path(tmp), count, size)
                timing = await compare(
                    args.repeat,
                    functools.partial(bridge_ours, node, cli, count),
                    functools.partial(bridge_sdk, cli, count),
                )
                rows.append(
                    Row(
                        f"bridge: {count} messages of {size} B vs the SDK's transport",
                        f"{count / timing.ours:,.0f} msg/s",
                        f"{count / timing.raw:,.0f} msg/s",
                        timing,
                        1.0,
                    )
                )
    return rows
