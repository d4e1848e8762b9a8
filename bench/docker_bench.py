"""Docker provider benchmarks against the ``docker`` command-line client, in the same run.

- cold provision + first byte: provision a node, spawn ``cat``, send a byte, read it back;
  against ``docker run -d --init`` then ``docker exec -i ... cat`` doing the same.
- N nodes at once: N provisions in parallel against N ``docker run -d`` in parallel.
- pipe: bytes through ``cat`` in one container, via a spawned exec against ``docker exec -i``.
- files: ``write_file`` of a streamed file against ``docker exec -i ... sh -c 'cat > FILE'``,
  and ``read_file`` against ``docker exec ... cat FILE``, in the same container.

Containers are removed after each timed run, outside the timing. Needs a Docker engine and
the test base image (``scripts/engines.sh`` makes both).
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from subprocess import PIPE

import anyio

from nodeprov import NodeHandle, NodeProvider, SpawnOptions, get_provider

from .common import CHUNK, Row, compare
from .foundation import pipe_ours, pipe_raw

BUILD_BASE = Path(__file__).parents[1] / "integration" / "images" / "build-base.sh"


async def _docker(*args: str) -> str:
    done = await anyio.run_process(["docker", *args], stderr=PIPE)
    return done.stdout.decode().strip()


async def _raw_container(image: str) -> str:
    return await _docker("run", "-d", "--init", "--network", "host", image, "sleep", "infinity")


async def first_byte_ours(provider: NodeProvider) -> float:  # type: ignore[type-arg]
    start = time.perf_counter()
    node = await provider.provision()
    process = await node.spawn(SpawnOptions("cat"))
    await process.stdin.send(b"x")
    assert await process.stdout.receive(1) == b"x"
    elapsed = time.perf_counter() - start
    await process.aclose()
    await node.destroy()
    return elapsed


async def first_byte_raw(image: str) -> float:
    start = time.perf_counter()
    container = await _raw_container(image)
    process = await anyio.open_process(["docker", "exec", "-i", container, "cat"])
    assert process.stdin is not None
    assert process.stdout is not None
    await process.stdin.send(b"x")
    assert await process.stdout.receive(1) == b"x"
    elapsed = time.perf_counter() - start
    await process.stdin.aclose()
    await process.wait()
    await process.aclose()
    await _docker("rm", "-f", container)
    return elapsed


async def many_ours(provider: NodeProvider, count: int) -> float:  # type: ignore[type-arg]
    nodes: list[NodeHandle] = []

    async def one() -> None:
        nodes.append(await provider.provision())

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(one)
    elapsed = time.perf_counter() - start
    async with anyio.create_task_group() as tg:
        for node in nodes:
            tg.start_soon(node.destroy)
    return elapsed


async def many_raw(image: str, count: int) -> float:
    containers: list[str] = []

    async def one() -> None:
        containers.append(await _raw_container(image))

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(one)
    elapsed = time.perf_counter() - start
    await _docker("rm", "-f", *containers)
    return elapsed


async def write_ours(node: NodeHandle, total: int) -> float:
    block = bytes(CHUNK)

    async def content() -> AsyncIterator[bytes]:
        for _ in range(total // CHUNK):
            yield block

    start = time.perf_counter()
    await node.write_file("bench.bin", content())
    return time.perf_counter() - start


async def write_raw(container: str, total: int) -> float:
    argv = ["docker", "exec", "-i", container, "sh", "-c", "cat > /tmp/bench.bin"]
    block = bytes(CHUNK)
    start = time.perf_counter()
    async with await anyio.open_process(argv, stdin=PIPE, stderr=PIPE) as process:
        assert process.stdin is not None
        for _ in range(total // CHUNK):
            await process.stdin.send(block)
        await process.stdin.aclose()
        assert await process.wait() == 0
    return time.perf_counter() - start


async def read_ours(node: NodeHandle, total: int) -> float:
    start = time.perf_counter()
    got = 0
    async with node.read_file("bench.bin") as chunks:
        async for chunk in chunks:
            got += len(chunk)
    assert got == total
    return time.perf_counter() - start


async def read_raw(container: str, total: int) -> float:
    start = time.perf_counter()
    async with await anyio.open_process(
        ["docker", "exec", container, "cat", "/tmp/bench.bin"], stdout=PIPE, stderr=PIPE
    ) as process:
        assert process.stdout is not None
        got = 0
        async for chunk in process.stdout:
            got += len(chunk)
        await process.wait()
    assert got == total
    return time.perf_counter() - start


async def run(args: argparse.Namespace) -> list[Row]:
    image = (await anyio.run_process([str(BUILD_BASE)], stderr=PIPE)).stdout.decode().split()[-1]
    provider = get_provider("docker", image=image, network_mode="host", pull="never")
    rows = []
    ours, raw, speed = await compare(
        args.repeat, functools.partial(first_byte_ours, provider), functools.partial(first_byte_raw, image)
    )
    rows.append(
        Row(
            "docker: cold provision + first byte vs docker run -d + exec -i",
            f"{ours * 1000:,.0f} ms",
            f"{raw * 1000:,.0f} ms",
            speed,
            1.0,
        )
    )
    ours, raw, speed = await compare(
        max(3, args.repeat // 3),
        functools.partial(many_ours, provider, args.nodes),
        functools.partial(many_raw, image, args.nodes),
    )
    rows.append(
        Row(
            f"docker: {args.nodes} nodes at once vs {args.nodes} parallel docker run -d",
            f"{ours * 1000:,.0f} ms",
            f"{raw * 1000:,.0f} ms",
            speed,
        )
    )
    total = args.pipe_mb * 1024 * 1024 // CHUNK * CHUNK
    container = await _raw_container(image)
    try:
        async with await provider.provision() as node:
            ours, raw, speed = await compare(
                args.repeat,
                functools.partial(pipe_ours, node, total),
                functools.partial(pipe_raw, ["docker", "exec", "-i", container, "cat"], total),
            )
            written = await compare(
                args.repeat,
                functools.partial(write_ours, node, total),
                functools.partial(write_raw, container, total),
            )
            read = await compare(
                args.repeat,
                functools.partial(read_ours, node, total),
                functools.partial(read_raw, container, total),
            )
    finally:
        await _docker("rm", "-f", container)
    mb = total / 1e6
    rows.append(
        Row(
            f"docker pipe: {args.pipe_mb} MiB through cat vs docker exec -i",
            f"{mb / ours:,.0f} MB/s",
            f"{mb / raw:,.0f} MB/s",
            speed,
            0.95,
        )
    )
    for verb, (ours, raw, speed), tool in (
        ("write_file", written, "docker exec -i sh -c 'cat > FILE'"),
        ("read_file", read, "docker exec cat FILE"),
    ):
        name = f"docker {verb}: {args.pipe_mb} MiB vs {tool}"
        rows.append(Row(name, f"{mb / ours:,.0f} MB/s", f"{mb / raw:,.0f} MB/s", speed))
    return rows
