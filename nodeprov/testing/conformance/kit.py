"""What the conformance suites and the project's tests share: running a command on a node to
its end, reading a file whole, finding processes on this machine, waiting for outside
state, and strings that break careless quoting."""

from __future__ import annotations

import posixpath
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from nodeprov.node import NodeHandle, NodeProvider
from nodeprov.spawn import SpawnOptions

__all__ = [
    "HOSTILE_STRINGS",
    "AnyProvider",
    "Leftovers",
    "host_processes_matching",
    "outside_of",
    "read_all",
    "run",
    "unique_marker",
    "wait_until",
]

Leftovers = Callable[[str], Awaitable[list[str]]]
AnyProvider = NodeProvider[Any]

HOSTILE_STRINGS = [
    "",
    " ",
    "two words",
    "'single'",
    '"double"',
    "a;touch /tmp/nodeprov-pwned",
    "$(touch /tmp/nodeprov-pwned)",
    "`touch /tmp/nodeprov-pwned`",
    "line\nbreak",
    "-n",
    "--help",
    "back\\slash",
    "tab\there",
    "*",
    "~",
    "$HOME",
    "||&&|",
    "é ✓ 日本",
    "> /tmp/nodeprov-pwned",
]


async def run(node: NodeHandle, *argv: str, stdin: bytes = b"", **kwargs: object) -> tuple[int, bytes, bytes]:
    """Run ``argv`` on ``node`` to completion; return (exit status, stdout, stderr)."""
    options = SpawnOptions(argv[0], argv[1:], **kwargs)  # type: ignore[arg-type]
    out, err = bytearray(), bytearray()
    async with await node.spawn(options) as process:

        async def feed() -> None:
            if stdin:
                await process.stdin.send(stdin)
            await process.stdin.aclose()

        async def collect(stream: str, into: bytearray) -> None:
            async for chunk in getattr(process, stream):
                into += chunk

        async with anyio.create_task_group() as tg:
            tg.start_soon(feed)
            tg.start_soon(collect, "stdout", out)
            tg.start_soon(collect, "stderr", err)
        code = await process.wait()
    return code, bytes(out), bytes(err)


def outside_of(node: NodeHandle) -> str | None:
    """A path next to the node's outermost file root, outside every root; None when a root
    is ``/`` (the node is a whole machine: nothing is outside it)."""
    if "/" in node.file_roots:
        return None
    return posixpath.join(posixpath.dirname(min(node.file_roots, key=len)), "nodeprov-outside")


async def read_all(node: NodeHandle, path: str) -> bytes:
    """The whole content of ``path`` on ``node``."""
    data = bytearray()
    async with node.read_file(path) as chunks:
        async for chunk in chunks:
            data += chunk
    return bytes(data)


def host_processes_matching(marker: str) -> list[str]:
    """``pid: command line`` of every process on this machine whose command line has ``marker``.

    Zombies (exited, not yet reaped) count as gone.
    """
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{proc.name}: {cmdline.strip()}")
    return found


async def wait_until(condition: Callable[[], Awaitable[bool]], within: float) -> bool:
    """Poll ``condition`` (state outside this process: no event to wait on) until it holds."""
    with anyio.move_on_after(within):
        while not await condition():  # noqa: ASYNC110 - polling an outside process table
            await anyio.sleep(0.05)
        return True
    return False


def unique_marker() -> str:
    """A unique ``sleep`` duration, findable in a process list."""
    return f"{900000 + secrets.randbelow(99999)}.{secrets.randbelow(10**6):06d}"
