"""File transfer over a node's exec channel, for every provider: a file is streamed through
``sh`` and ``cat`` on the node, written beside its target and renamed over it once whole
(see :meth:`~nodeprov.node.NodeHandle.write_file` and
:meth:`~nodeprov.node.NodeHandle.read_file`, which check the path and call these)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager, suppress

import anyio

from ..errors import NodeFileError, NodeFileNotFoundError, NodeprovError
from ..spawn import SpawnedProcess, SpawnFn, SpawnOptions, StopPolicy

__all__ = ["kill_now", "read_file", "write_file"]

_CHUNK = 65536

# POSIX sh. "$1" is the target, "$2" the partial file beside it; both are absolute and
# normalised, so no operand starts with "-". The partial file becomes the target only once
# the control plane has sent every byte (_COMMIT), so a cut stream never replaces a file.
_WRITE_PARTIAL = """
umask 077
[ -d "$1" ] && { echo "$1 is a directory" >&2; exit 1; }
case $1 in */*) dir=${1%/*} ;; esac
mkdir -p "${dir:-/}" || exit 1
set -C
cat > "$2" || { rm -f "$2"; exit 1; }
"""
_COMMIT = """chmod "$3" "$2" && mv -f "$2" "$1" || { rm -f "$2"; exit 1; }"""
_DISCARD = """rm -f "$2" """
_READ_FILE = """
[ -e "$1" ] || { echo "no such file: $1" >&2; exit 66; }
[ -d "$1" ] && { echo "$1 is a directory" >&2; exit 1; }
exec cat "$1"
"""
_NOT_FOUND = 66


async def write_file(
    spawn: SpawnFn, node_id: str, target: str, data: bytes | AsyncIterable[bytes], *, mode: int
) -> None:
    """Write ``data`` to ``target`` (absolute, normalised, checked) on node ``node_id``
    through ``spawn``: whole or not at all, with permissions ``mode``. Raises as
    :meth:`~nodeprov.node.NodeHandle.write_file`."""
    partial = f"{target}.nodeprov-{secrets.token_hex(6)}"
    try:
        writer = SpawnOptions("sh", ["-c", _WRITE_PARTIAL, "nodeprov-write", target, partial])
        async with await spawn(writer) as process:
            try:
                with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    if isinstance(data, bytes):
                        await process.stdin.send(data)
                    else:
                        async for chunk in data:
                            await process.stdin.send(chunk)
                    await process.stdin.aclose()
            except BaseException:
                await kill_now(process)  # before its stdin closes: a cut stream is not a file
                raise
            await _file_outcome(process, node_id, target)
        await _file_step(spawn, node_id, _COMMIT, target, partial, f"{mode:o}")
    except BaseException:
        with anyio.CancelScope(shield=True), anyio.move_on_after(10), suppress(NodeprovError):
            await _file_step(spawn, node_id, _DISCARD, target, partial)
        raise


@asynccontextmanager
async def read_file(spawn: SpawnFn, node_id: str, target: str) -> AsyncIterator[AsyncIterator[bytes]]:
    """Stream ``target`` (absolute, normalised, checked) on node ``node_id`` through
    ``spawn``. Raises as :meth:`~nodeprov.node.NodeHandle.read_file`."""
    options = SpawnOptions("sh", ["-c", _READ_FILE, "nodeprov-read", target])
    async with await spawn(options) as process:
        await process.stdin.aclose()
        try:
            first = await process.stdout.receive(_CHUNK)
        except anyio.EndOfStream:
            await _file_outcome(process, node_id, target)
            first = b""

        async def chunks() -> AsyncIterator[bytes]:
            if not first:
                return
            yield first
            async for chunk in process.stdout:
                yield chunk
            await _file_outcome(process, node_id, target)

        yield chunks()


async def kill_now(process: SpawnedProcess) -> None:
    """Close ``process`` with SIGKILL straight away (see :meth:`StopPolicy.immediate`)."""
    process.stop_policy = StopPolicy.immediate()
    await process.aclose()


async def _file_step(spawn: SpawnFn, node_id: str, script: str, *args: str) -> None:
    async with await spawn(SpawnOptions("sh", ["-c", script, "nodeprov-file", *args])) as step:
        await step.stdin.aclose()
        await _file_outcome(step, node_id, args[0])


async def _file_outcome(process: SpawnedProcess, node_id: str, path: str) -> None:
    """Raise what the file script on ``node_id`` said, if it failed."""
    said = b""
    with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        while len(said) < 4096:
            said += await process.stderr.receive(4096)
    code = await process.wait()
    if code == 0:
        return
    detail = said.decode(errors="replace").strip() or f"exit status {code}"
    error = NodeFileNotFoundError if code == _NOT_FOUND else NodeFileError
    raise error(f"{path} on node {node_id}: {detail}")
