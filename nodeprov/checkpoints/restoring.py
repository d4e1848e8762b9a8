"""A workspace restored onto a node from a checkpoint's manifest, over the node's exec
channel (``tar -x`` on the node, nothing listening), for every provider.

The manifest is written as a tar archive to ``tar -x`` on the node, into a directory of its
own inside the root, and only once all of it was read (its last member, a marker, came) does
the same process replace the root's contents with it: a restore cut short leaves the root as
it was. Nothing is written through a symbolic link (the manifest holds none under one), and
none outside the root. Its packs are fetched, and every piece read from them checked against
its digest, in worker tasks ahead of what is being sent.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import AsyncGenerator
from contextlib import aclosing, suppress

import anyio
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..errors import CheckpointError, leaf
from ..node import NodeHandle
from ..node.files import kill_now
from ..spawn import SpawnedProcess, SpawnOptions
from ._node import STAGE, check, root_of, stderr_of
from .manifest import Manifest, Piece
from .objects import ObjectStore
from .tar import Member, end_of_archive, header, padding

__all__ = ["restore"]

_BLOCK = 1 << 20  # what a restore sends to the node at a time
_MARKER = f"{STAGE}whole"  # the archive's last member: tar read all of it
_KEPT = 2  # packs held for the pieces being sent (a file's pieces may span two)

# Into a new directory of the root, then in place of what the root held: only if ``tar``
# read the whole archive, whose last member is the marker (an archive cut between two
# members, a lost connection, ends as the real one does to ``tar``).
_RESTORE = """root=$1 stage=$2 mode=$3 marker=$4
mkdir "$root/$stage" || exit 1
tar -x -p -o -f - -C "$root/$stage" || { rm -rf "$root/$stage"; exit 1; }
if ! rm -- "$root/$stage/$marker" 2>/dev/null; then
  rm -rf "$root/$stage"; echo "the archive was cut short" >&2; exit 1
fi
cd "$root" || exit 1
set --
for f in * .[!.]* ..?*; do
  { [ -e "$f" ] || [ -h "$f" ]; } && [ "$f" != "$stage" ] && set -- "$@" "$f"
done
[ $# -eq 0 ] || rm -rf -- "$@" || exit 1
cd "$stage" || exit 1
set --
for f in * .[!.]* ..?*; do
  { [ -e "$f" ] || [ -h "$f" ]; } && set -- "$@" "$f"
done
[ $# -eq 0 ] || mv -- "$@" "$root/" || exit 1
cd "$root" && rmdir -- "$stage" && { [ -z "$mode" ] || chmod "$mode" "$root"; }
"""
_DISCARD = 'rm -rf -- "$1/$2"\n'


async def restore(
    node: NodeHandle, manifest: Manifest, objects: ObjectStore, *, root: str | None = None
) -> None:
    """Make the workspace at ``root`` on ``node`` (its workdir by default) hold exactly what
    ``manifest`` holds, from the packs in ``objects``; what the root held before is
    replaced only once everything was written beside it.

    Raises:
        ConfigError: ``root`` is ``/``.
        NodePathError: ``root`` is outside the node.
        CheckpointError: a pack is missing from ``objects`` or does not hold what the
            manifest says, or ``tar`` failed on the node; the root is as it was.
        NodeGoneError, SpawnError, ProviderError: as :meth:`NodeHandle.spawn`.
    """
    where = root_of(node, root)
    stage = f"{STAGE}{secrets.token_hex(8)}"
    root_entry = manifest.by_path.get("")
    mode = f"{root_entry.mode:o}" if root_entry is not None else ""
    options = SpawnOptions("sh", ["-c", _RESTORE, "nodeprov-restore", where, stage, mode, _MARKER])
    try:
        async with await node.spawn(options) as process, stderr_of(process) as stderr:
            try:
                await _send(process, manifest, objects)
            except BaseException:
                await kill_now(process)
                raise
            code = await process.wait()
        check(code, stderr, f"restore into {where} on node {node.node_id}")
    except BaseException:
        with anyio.CancelScope(shield=True), anyio.move_on_after(10), suppress(Exception):
            await _discard(node, where, stage)
        raise


async def _send(process: SpawnedProcess, manifest: Manifest, objects: ObjectStore) -> None:
    """Write ``manifest`` as a tar archive to ``process``'s stdin, the next pack fetched
    and checked while the one before is sent."""
    send, receive = anyio.create_memory_object_stream[tuple[str, bytes]](1)
    try:
        with send, receive:  # closed once the fetching ended (the reading stops at the last pack)
            async with anyio.create_task_group() as group:
                group.start_soon(_fetch, objects, manifest, send)
                with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    async with aclosing(_archive(manifest, receive)) as archive:
                        async for block in archive:
                            await process.stdin.send(block)
                    await process.stdin.aclose()
                group.cancel_scope.cancel()  # tar stopped reading (it failed): nothing more to fetch
    except BaseExceptionGroup as raised:  # a pack's error, or the sending's
        raise leaf(raised) from None


def _fresh(manifest: Manifest) -> list[bool]:
    """For each piece of ``manifest``, in order: whether its pack is fetched for it (it is
    not among the last :data:`_KEPT` fetched). What :func:`_fetch` sends and :func:`_archive`
    reads, decided here alone."""
    fresh: list[bool] = []
    kept: list[str] = []
    for entry in manifest.entries:
        for piece in entry.pieces:
            fresh.append(piece.pack not in kept)
            if fresh[-1]:
                kept = [*kept[1 - _KEPT :], piece.pack]
    return fresh


async def _fetch(
    objects: ObjectStore, manifest: Manifest, send: MemoryObjectSendStream[tuple[str, bytes]]
) -> None:
    """Send each pack :func:`_archive` reads, in its order, once every piece the manifest
    takes from it was checked."""
    wanted: dict[str, dict[Piece, str]] = {}  # a pack's pieces, each with a path that has it
    for entry in manifest.entries:
        for piece in entry.pieces:
            wanted.setdefault(piece.pack, {}).setdefault(piece, entry.path)
    pieces = [piece for entry in manifest.entries for piece in entry.pieces]
    for name in [piece.pack for piece, fresh in zip(pieces, _fresh(manifest), strict=True) if fresh]:
        data = await objects.get(name)
        await anyio.to_thread.run_sync(_check_pack, name, data, wanted[name])
        await send.send((name, data))


def _check_pack(name: str, data: bytes, pieces: dict[Piece, str]) -> None:
    with memoryview(data) as view:
        for piece, path in pieces.items():
            end = piece.offset + piece.length
            if end > len(data) or hashlib.sha256(view[piece.offset : end]).hexdigest() != piece.digest:
                raise CheckpointError(f"pack {name} does not hold {path!r}'s piece {piece.digest}")


async def _archive(
    manifest: Manifest, packs: MemoryObjectReceiveStream[tuple[str, bytes]]
) -> AsyncGenerator[bytes, None]:
    """``manifest`` as a tar archive ending with the marker, its files' pieces from
    ``packs`` (sent as :func:`_fresh` says), in blocks of about :data:`_BLOCK` bytes (small
    files' headers and data together)."""
    fresh = iter(_fresh(manifest))
    kept: dict[str, memoryview] = {}
    out = bytearray()
    for entry in manifest.entries:
        if not entry.path:
            continue  # the root: its mode is set once it is swapped in
        out += header(Member(entry.path, entry.kind, entry.mode, entry.mtime, entry.size, entry.target))
        for piece in entry.pieces:
            if next(fresh):  # the next pack sent: the oldest of those held makes way
                if len(kept) == _KEPT:
                    del kept[next(iter(kept))]
                name, data = await packs.receive()
                kept[name] = memoryview(data)
            out += kept[piece.pack][piece.offset : piece.offset + piece.length]
            if len(out) >= _BLOCK:
                yield bytes(out)
                out.clear()
        out += padding(entry.size)
    yield bytes(out + header(Member(_MARKER, "file", 0o600, 0, 0, "")) + end_of_archive())


async def _discard(node: NodeHandle, where: str, stage: str) -> None:
    """Remove what a restore cut short left of ``stage`` in ``where``."""
    options = SpawnOptions("sh", ["-c", _DISCARD, "nodeprov-restore", where, stage])
    async with await node.spawn(options) as process:
        await process.stdin.aclose()
        async with stderr_of(process):
            await process.wait()
