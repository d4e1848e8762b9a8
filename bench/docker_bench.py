"""Docker provider benchmarks against docker-py's low-level client in this process: the same
Engine API calls without nodeprov, in the same run (the ``docker`` command-line client would
flatter nodeprov with its own start-up).

- cold provision + first byte: provision a node, spawn ``cat``, send a byte, read it back;
  against ``create_container`` + ``start`` + ``exec_create`` + ``exec_start(socket=True)``,
  and against the same four requests as raw HTTP on the engine's socket (asynchronous, no
  client library at all: the floor).
- N nodes at once: N provisions in parallel against N create + start in parallel threads.
- pipe: bytes through ``cat`` in one container, via a spawned exec against docker-py's exec
  socket (a writer thread and a reader parsing the engine's frames), and against the same
  socket driven by one bare asyncio loop (a writer task and a reader: the ceiling of
  nodeprov's arrangement, one event loop doing both directions).
- files: ``write_file`` against an exec of ``sh -c 'cat > FILE'``, and ``read_file`` against
  an exec of ``cat FILE``, each on docker-py's exec socket in the same container.

docker-py's side runs in worker threads, timed inside them. Containers are removed after
each timed run, outside the timing. Needs a Docker engine and the test base image
(``scripts/engines.sh`` makes both).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import socket
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from subprocess import PIPE
from typing import Any

import anyio
import anyio.to_thread
import docker

from nodeprov import NodeHandle, NodeProvider, SpawnOptions, get_provider

from .common import CHUNK, Row, compare
from .foundation import pipe_ours

BUILD_BASE = Path(__file__).parents[1] / "integration" / "images" / "build-base.sh"
_READ = 256 * 1024


def _create(api: Any, image: str) -> str:
    host_config = api.create_host_config(init=True, network_mode="host")
    container: str = api.create_container(image, ["sleep", "infinity"], host_config=host_config)["Id"]
    api.start(container)
    return container


def exec_socket(api: Any, container: str, argv: list[str], *, stdin: bool) -> socket.socket:
    exec_id = api.exec_create(container, argv, stdin=stdin, stdout=True, stderr=True)["Id"]
    hijacked = api.exec_start(exec_id, socket=True)
    raw: socket.socket = getattr(hijacked, "_sock", hijacked)
    return raw


def _stdout_bytes(raw: socket.socket, until: int | None = None) -> int:
    """Stdout payload bytes read off an exec socket, until EOF (or ``until`` bytes)."""
    buffer, got = bytearray(), 0
    while until is None or got < until:
        chunk = raw.recv(_READ)
        if not chunk:
            break
        buffer += chunk
        while len(buffer) >= 8:
            size = int.from_bytes(buffer[4:8], "big")
            if len(buffer) < 8 + size:
                break
            if buffer[0] == 1:
                got += size
            del buffer[: 8 + size]
    return got


def _send(raw: socket.socket, total: int) -> None:
    block = os.urandom(CHUNK)
    for _ in range(total // CHUNK):
        raw.sendall(block)
    raw.shutdown(socket.SHUT_WR)


def _stream_dockerpy(api: Any, container: str, argv: list[str], send: int, expect: int) -> float:
    """One exec of ``argv``: ``send`` bytes in (from a writer thread), ``expect`` bytes out."""
    start = time.perf_counter()
    raw = exec_socket(api, container, argv, stdin=bool(send))
    writer = threading.Thread(target=_send, args=(raw, send))
    if send:
        writer.start()
    got = _stdout_bytes(raw)
    if send:
        writer.join()
    raw.close()
    assert got == expect, (got, expect)
    return time.perf_counter() - start


async def _stream_asyncio(api: Any, container: str, argv: list[str], send: int, expect: int) -> float:
    """:func:`_stream_dockerpy` on the event loop: the same exec socket, non-blocking."""
    start = time.perf_counter()
    raw = await anyio.to_thread.run_sync(functools.partial(exec_socket, api, container, argv, stdin=True))
    raw.setblocking(False)
    loop = asyncio.get_running_loop()

    async def writer() -> None:
        block = os.urandom(CHUNK)
        for _ in range(send // CHUNK):
            await loop.sock_sendall(raw, block)
        raw.shutdown(socket.SHUT_WR)

    got, buffer = 0, bytearray()
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer)
        while chunk := await loop.sock_recv(raw, _READ):
            buffer += chunk
            while len(buffer) >= 8:
                size = int.from_bytes(buffer[4:8], "big")
                if len(buffer) < 8 + size:
                    break
                got += size if buffer[0] == 1 else 0
                del buffer[: 8 + size]
    raw.close()
    assert got == expect, (got, expect)
    return time.perf_counter() - start


def _first_byte_dockerpy(api: Any, image: str) -> float:
    start = time.perf_counter()
    container = _create(api, image)
    raw = exec_socket(api, container, ["cat"], stdin=True)
    raw.sendall(b"x")
    assert _stdout_bytes(raw, until=1) == 1
    elapsed = time.perf_counter() - start
    raw.close()
    api.remove_container(container, force=True)
    return elapsed


def _many_dockerpy(api: Any, image: str, count: int) -> float:
    with ThreadPoolExecutor(count) as pool:
        start = time.perf_counter()
        containers = list(pool.map(lambda _: _create(api, image), range(count)))
        elapsed = time.perf_counter() - start
        list(pool.map(lambda c: api.remove_container(c, force=True), containers))
    return elapsed


ENGINE_SOCKET = "/var/run/docker.sock"


class _Engine:
    """HTTP/1.1 on the engine's unix socket, by hand: what any client must at least do."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self._buffer = b""

    async def request(self, method: str, path: str, body: object = None, *, upgrade: bool = False) -> bytes:
        payload = json.dumps(body).encode() if body is not None else b""
        head = f"{method} {path} HTTP/1.1\r\nHost: docker\r\nContent-Length: {len(payload)}\r\n"
        head += "Content-Type: application/json\r\n" if body is not None else ""
        head += "Connection: Upgrade\r\nUpgrade: tcp\r\n" if upgrade else ""
        await self.stream.send(head.encode() + b"\r\n" + payload)
        while b"\r\n\r\n" not in self._buffer:
            self._buffer += await self.stream.receive()
        header, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        status = int(header.split(b" ", 2)[1])
        assert status < 300 or (upgrade and status == 101), header
        if upgrade:
            return b""
        fields = dict(line.split(b": ", 1) for line in header.split(b"\r\n")[1:])
        if fields.get(b"Transfer-Encoding") == b"chunked":
            while not self._buffer.endswith(b"0\r\n\r\n"):
                self._buffer += await self.stream.receive()
            body_bytes, self._buffer = _unchunk(self._buffer), b""
            return body_bytes
        size = int(fields.get(b"Content-Length", b"0"))
        while len(self._buffer) < size:
            self._buffer += await self.stream.receive()
        answer, self._buffer = self._buffer[:size], self._buffer[size:]
        return answer

    async def receive(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._buffer += await self.stream.receive()
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data


def _unchunk(data: bytes) -> bytes:
    body = b""
    while True:
        length, data = data.split(b"\r\n", 1)
        if not int(length, 16):
            return body
        body, data = body + data[: int(length, 16)], data[int(length, 16) + 2 :]


async def first_byte_http(image: str) -> float:
    start = time.perf_counter()
    async with (
        await anyio.connect_unix(ENGINE_SOCKET) as control,
        await anyio.connect_unix(ENGINE_SOCKET) as io,
    ):
        engine = _Engine(control)
        config = {
            "Image": image,
            "Cmd": ["sleep", "infinity"],
            "HostConfig": {"Init": True, "NetworkMode": "host"},
        }
        container = json.loads(await engine.request("POST", "/containers/create", config))["Id"]
        await engine.request("POST", f"/containers/{container}/start")
        spec = {"AttachStdin": True, "AttachStdout": True, "AttachStderr": True, "Cmd": ["cat"]}
        exec_id = json.loads(await engine.request("POST", f"/containers/{container}/exec", spec))["Id"]
        attached = _Engine(io)
        await attached.request(
            "POST", f"/exec/{exec_id}/start", {"Detach": False, "Tty": False}, upgrade=True
        )
        await io.send(b"x")
        frame = await attached.receive(9)
        assert (frame[0], frame[8:]) == (1, b"x"), frame
        elapsed = time.perf_counter() - start
        await engine.request("DELETE", f"/containers/{container}?force=1")
    return elapsed


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


async def write_ours(node: NodeHandle, total: int) -> float:
    block = os.urandom(CHUNK)

    async def content() -> AsyncIterator[bytes]:
        for _ in range(total // CHUNK):
            yield block

    start = time.perf_counter()
    await node.write_file("bench.bin", content())
    return time.perf_counter() - start


async def read_ours(node: NodeHandle, total: int) -> float:
    start = time.perf_counter()
    got = 0
    async with node.read_file("bench.bin") as chunks:
        async for chunk in chunks:
            got += len(chunk)
    assert got == total
    return time.perf_counter() - start


def _in_thread(call: Any, *args: Any) -> Any:
    return functools.partial(anyio.to_thread.run_sync, functools.partial(call, *args))


async def run(args: argparse.Namespace) -> list[Row]:
    image = (await anyio.run_process([str(BUILD_BASE)], stderr=PIPE)).stdout.decode().split()[-1]
    provider = get_provider("docker", image=image, network_mode="host", pull="never")
    api = docker.from_env(max_pool_size=max(10, args.nodes)).api
    rows = []
    timing = await compare(
        args.repeat,
        functools.partial(first_byte_ours, provider),
        _in_thread(_first_byte_dockerpy, api, image),
    )
    rows.append(
        Row(
            "docker: cold provision + first byte vs docker-py create + start + exec",
            f"{timing.ours * 1000:,.0f} ms",
            f"{timing.raw * 1000:,.0f} ms",
            timing,
            1.0,
        )
    )
    timing = await compare(
        args.repeat, functools.partial(first_byte_ours, provider), functools.partial(first_byte_http, image)
    )
    rows.append(
        Row(
            "docker: cold provision + first byte vs raw HTTP on the engine socket",
            f"{timing.ours * 1000:,.0f} ms",
            f"{timing.raw * 1000:,.0f} ms",
            timing,
        )
    )
    timing = await compare(
        max(3, args.repeat // 3),
        functools.partial(many_ours, provider, args.nodes),
        _in_thread(_many_dockerpy, api, image, args.nodes),
    )
    rows.append(
        Row(
            f"docker: {args.nodes} nodes at once vs {args.nodes} docker-py create + start in threads",
            f"{timing.ours * 1000:,.0f} ms",
            f"{timing.raw * 1000:,.0f} ms",
            timing,
        )
    )
    total = args.pipe_mb * 1024 * 1024 // CHUNK * CHUNK
    mb = total / 1e6
    async with await provider.provision() as node:
        container = node.container_id  # type: ignore[attr-defined]
        workloads = [
            (
                f"docker pipe: {args.pipe_mb} MiB through cat vs docker-py's exec socket",
                functools.partial(pipe_ours, node, total),
                _in_thread(_stream_dockerpy, api, container, ["cat"], total, total),
                0.95,
            ),
            (
                f"docker pipe: {args.pipe_mb} MiB through cat vs that socket on one bare asyncio loop",
                functools.partial(pipe_ours, node, total),
                functools.partial(_stream_asyncio, api, container, ["cat"], total, total),
                None,
            ),
            (
                f"docker write_file: {args.pipe_mb} MiB vs docker-py exec of sh -c 'cat > FILE'",
                functools.partial(write_ours, node, total),
                _in_thread(_stream_dockerpy, api, container, ["sh", "-c", "cat > /tmp/raw.bin"], total, 0),
                None,
            ),
            (
                f"docker read_file: {args.pipe_mb} MiB vs docker-py exec of cat FILE",
                functools.partial(read_ours, node, total),
                _in_thread(_stream_dockerpy, api, container, ["cat", f"{node.workdir}/bench.bin"], 0, total),
                None,
            ),
        ]
        await write_ours(node, total)  # the file both readers read
        for name, ours, raw, goal in workloads:
            timing = await compare(args.repeat, ours, raw)
            figures = f"{mb / timing.ours:,.0f} MB/s", f"{mb / timing.raw:,.0f} MB/s"
            rows.append(Row(name, *figures, timing, goal))
    return rows
