"""A workspace captured from a node and restored onto one, over the node's exec channel
(``tar`` on the node, nothing listening), for every provider.

**Capture** streams ``tar -c`` of the workspace's root from the node, checks each member
(:class:`~nodeprov.checkpoints.tar.Confinement`), cuts each file into pieces of at most
4 MiB named by their SHA-256, and stores only the pieces no earlier manifest it is given
holds, gathered into pack objects of about 8 MiB. What is left out, and why, is in the
manifest's ``skipped``:

- *secrets*: any path one of whose names matches a pattern of :data:`SECRET_PATTERNS` or of
  the caller's ``exclude`` (shell patterns against each name, so ``.env`` leaves out every
  ``.env`` and an excluded directory all it holds). They cross the channel and are dropped
  here, never stored;
- devices and FIFOs (a workspace's files are what it keeps); sockets, which ``tar`` skips.

A hard link becomes a copy of the file it links to (the pieces are shared, the link is not).
Owners are not kept: what is restored belongs to the user the node's spawns run as.

**Restore** writes the manifest as a tar archive to ``tar -x`` on the node, into a directory
of its own inside the root, and only once that has all been written does it replace the
root's contents with it: a restore cut short leaves the root as it was. Nothing is written
through a symbolic link (the manifest holds none under one), and none outside the root.
"""

from __future__ import annotations

import fnmatch
import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Literal

import anyio
import anyio.to_thread

from ..errors import CheckpointError, ConfigError, leaf
from ..node import NodeHandle
from ..node.files import kill_now
from ..spawn import SpawnedProcess, SpawnOptions
from .manifest import Entry, Manifest, Piece
from .objects import ObjectStore, digest_of
from .tar import Member, end_of_archive, header, members, padding

__all__ = ["SECRET_PATTERNS", "Capture", "capture", "restore"]

SECRET_PATTERNS = (
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
)
"""Names left out of every checkpoint: files that commonly hold credentials."""

PIECE = 4 << 20
PACK = 8 << 20
_HASH_IN_THREAD = 1 << 20  # a digest of more than this leaves the event loop free meanwhile
_STAGE = ".nodeprov-restore-"
_NOTES = 1000  # what a manifest lists of what it left out
_TAR_CHANGED = ("file changed as we read it", "File removed before we read it", "socket ignored")

_CAPTURE = 'cd "$1" || exit 1\nexec tar -c -f - .\n'
_EXTRACT = 'mkdir "$1/$2" || exit 1\ntar -x -p -o -f - -C "$1/$2" || { rm -rf "$1/$2"; exit 1; }\n'
_SWAP = """cd "$1" || exit 1
for f in * .[!.]* ..?*; do
  { [ -e "$f" ] || [ -h "$f" ]; } || continue
  [ "$f" = "$2" ] || rm -rf -- "$f" || exit 1
done
cd "$2" || exit 1
for f in * .[!.]* ..?*; do
  { [ -e "$f" ] || [ -h "$f" ]; } || continue
  mv -- "$f" "$1/" || exit 1
done
cd "$1" && rmdir -- "$2" && { [ -z "$3" ] || chmod "$3" "$1"; }
"""
_DISCARD = 'rm -rf -- "$1/$2"\n'


@dataclass(frozen=True)
class Capture:
    """A captured workspace: its ``manifest``, stored under ``name`` in the object store;
    ``stored`` the bytes of the packs this capture added (what it cost the store)."""

    manifest: Manifest
    name: str
    stored: int


class _Packer:
    """Gathers new pieces into packs and stores each pack once full."""

    def __init__(self, objects: ObjectStore, known: dict[str, Piece]) -> None:
        self._objects, self._known = objects, known
        self._buffer = bytearray()
        self._waiting: list[tuple[str, int, int]] = []  # pieces of the open pack
        self._placed: dict[str, Piece] = {}
        self.stored = 0

    async def add(self, data: bytes) -> str:
        """Keep ``data``; its digest (its :class:`Piece` once :meth:`flush` stored its pack)."""
        digest = await _digest(data)
        if digest in self._known or digest in self._placed or any(d == digest for d, _, _ in self._waiting):
            return digest
        if self._buffer and len(self._buffer) + len(data) > PACK:
            await self.flush()
        self._waiting.append((digest, len(self._buffer), len(data)))
        self._buffer += data
        return digest

    async def flush(self) -> None:
        if not self._buffer:
            return
        pack = bytes(self._buffer)
        name = await anyio.to_thread.run_sync(digest_of, pack)
        await self._objects.put(name, pack)
        self.stored += len(pack)
        for digest, offset, length in self._waiting:
            self._placed[digest] = Piece(digest, name, offset, length)
        self._buffer, self._waiting = bytearray(), []

    def piece(self, digest: str) -> Piece:
        return self._known.get(digest) or self._placed[digest]


async def _digest(data: bytes) -> str:
    if len(data) > _HASH_IN_THREAD:
        return await anyio.to_thread.run_sync(digest_of, data)
    return digest_of(data)


def _note(skipped: list[str], line: str) -> None:
    if len(skipped) < _NOTES:
        skipped.append(line)
    elif len(skipped) == _NOTES:
        skipped.append("...: and more, not listed")


def _secret(path: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for name in path.split("/") for pattern in patterns)


def _root(node: NodeHandle, root: str | None) -> str:
    full = node.node_path(root or node.workdir)
    if full == "/":
        raise ConfigError(
            f"refusing to checkpoint or restore all of node {node.node_id} ('/'): name a workspace"
        )
    return full


async def capture(
    node: NodeHandle,
    objects: ObjectStore,
    *,
    root: str | None = None,
    previous: Manifest | None = None,
    exclude: Sequence[str] = (),
) -> Capture:
    """Capture the workspace at ``root`` on ``node`` (its workdir by default) into
    ``objects``, storing only the pieces ``previous`` (an earlier manifest whose packs are in
    ``objects``) does not hold; ``exclude``: more name patterns to leave out, beside
    :data:`SECRET_PATTERNS`. The manifest is stored last: a capture cut short leaves at most
    packs no manifest names (retention collects them).

    Raises:
        ConfigError: ``root`` is ``/``.
        NodePathError: ``root`` is outside the node.
        ArchiveRefusedError: the node's archive reaches outside the root.
        CheckpointError: ``tar`` failed on the node (no such directory, say), or the object
            store did.
        NodeGoneError, SpawnError, ProviderError: as :meth:`NodeHandle.spawn`.
    """
    where = _root(node, root)
    patterns = (*SECRET_PATTERNS, *exclude)
    packer = _Packer(objects, previous.pieces() if previous is not None else {})
    found: list[tuple[Member, list[str] | None]] = []
    files: dict[str, list[str]] = {}  # a file's piece digests, for a hard link to it
    skipped: list[str] = []
    async with await node.spawn(SpawnOptions("sh", ["-c", _CAPTURE, "nodeprov-capture", where])) as process:
        await process.stdin.aclose()
        async with _stderr_of(process) as stderr:
            try:
                async for member, data in members(process.stdout):
                    if member.path and (_secret(member.path, patterns) or member.path.startswith(_STAGE)):
                        if not _secret(member.path.rpartition("/")[0], patterns):  # not its directory's
                            _note(skipped, f"{member.path}: left out (a secret's name, or excluded)")
                    elif member.kind == "other":
                        _note(skipped, f"{member.path}: not a file, directory or link")
                    elif member.kind == "file":
                        files[member.path] = [await packer.add(piece) async for piece in _cut(data)]
                        found.append((member, files[member.path]))
                    elif member.kind == "hardlink":
                        if (linked := files.get(member.target)) is None:  # its file was left out
                            _note(skipped, f"{member.path}: a link to {member.target}, left out")
                        else:
                            found.append((member, linked))
                    else:
                        found.append((member, None))
            except BaseException:
                await kill_now(process)
                raise
            code = await process.wait()
        if code != 0 and not (code == 1 and stderr.only(_TAR_CHANGED)):
            raise CheckpointError(f"capture of {where} on node {node.node_id} failed: {stderr.text(code)}")
        if code == 1:
            _note(skipped, f": the workspace changed while it was read ({stderr.text(code)})")
    await packer.flush()
    entries = []
    for member, digests in found:
        if digests is None:
            kind: Literal["dir", "symlink"] = "dir" if member.kind == "dir" else "symlink"
            entries.append(Entry(member.path, kind, member.mode, member.mtime, 0, member.target))
        else:
            pieces = tuple(packer.piece(digest) for digest in digests)
            size = sum(piece.length for piece in pieces)
            entries.append(Entry(member.path, "file", member.mode, member.mtime, size, "", pieces))
    manifest = Manifest(tuple(entries), tuple(skipped))
    document = manifest.to_bytes()
    name = digest_of(document)
    await objects.put(name, document)
    return Capture(manifest, name, packer.stored + len(document))


async def _cut(data: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A file's data in pieces of :data:`PIECE` bytes (the last may be shorter)."""
    buffer = bytearray()
    async for chunk in data:
        buffer += chunk
        while len(buffer) >= PIECE:
            yield bytes(buffer[:PIECE])
            del buffer[:PIECE]
    if buffer:
        yield bytes(buffer)


async def restore(
    node: NodeHandle, manifest: Manifest, objects: ObjectStore, *, root: str | None = None
) -> None:
    """Make the workspace at ``root`` on ``node`` (its workdir by default) hold exactly what
    ``manifest`` holds, from the packs in ``objects``; what the root held before is
    replaced only once everything was written beside it.

    Raises:
        ConfigError: ``root`` is ``/``.
        NodePathError: ``root`` is outside the node.
        CheckpointError: a pack is missing from ``objects``, or ``tar`` failed on the node;
            the root is as it was.
        NodeGoneError, SpawnError, ProviderError: as :meth:`NodeHandle.spawn`.
    """
    where = _root(node, root)
    stage = f"{_STAGE}{secrets.token_hex(8)}"
    root_entry = manifest.by_path.get("")
    try:
        await _extract(node, where, stage, _archive(manifest, objects))
        await _step(node, _SWAP, where, stage, f"{root_entry.mode:o}" if root_entry is not None else "")
    except BaseException:
        with anyio.CancelScope(shield=True), anyio.move_on_after(10), suppress(Exception):
            await _step(node, _DISCARD, where, stage)
        raise


async def _extract(node: NodeHandle, where: str, stage: str, archive: AsyncIterator[bytes]) -> None:
    """Extract ``archive`` into the new directory ``stage`` inside ``where``."""
    options = SpawnOptions("sh", ["-c", _EXTRACT, "nodeprov-restore", where, stage])
    async with await node.spawn(options) as process, _stderr_of(process) as stderr:
        try:
            with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                async for block in archive:
                    await process.stdin.send(block)
                await process.stdin.aclose()
        except BaseException:
            await kill_now(process)
            raise
        code = await process.wait()
    _check(code, stderr, f"restore into {where} on node {node.node_id}")


async def _archive(manifest: Manifest, objects: ObjectStore) -> AsyncIterator[bytes]:
    """``manifest`` as a tar archive, its files read from their packs (the last two kept)."""
    packs: dict[str, bytes] = {}
    for entry in manifest.entries:
        if not entry.path:
            continue  # the root: its mode is set once it is swapped in
        yield header(Member(entry.path, entry.kind, entry.mode, entry.mtime, entry.size, entry.target))
        for piece in entry.pieces:
            if piece.pack not in packs:
                if len(packs) == 2:
                    del packs[next(iter(packs))]
                packs[piece.pack] = await objects.get(piece.pack)
            data = packs[piece.pack][piece.offset : piece.offset + piece.length]
            if len(data) != piece.length or await _digest(data) != piece.digest:
                raise CheckpointError(
                    f"pack {piece.pack} does not hold {entry.path!r}'s piece {piece.digest}"
                )
            yield data
        if entry.size:
            yield padding(entry.size)
    yield end_of_archive()


async def _step(node: NodeHandle, script: str, *args: str) -> None:
    async with await node.spawn(SpawnOptions("sh", ["-c", script, "nodeprov-restore", *args])) as process:
        await process.stdin.aclose()
        async with _stderr_of(process) as stderr:
            code = await process.wait()
    _check(code, stderr, f"restore into {args[0]} on node {node.node_id}")


def _check(code: int, said: _Said, what: str) -> None:
    if code != 0:
        raise CheckpointError(f"{what} failed: {said.text(code)}")


class _Said:
    """The first 4 KiB a process wrote to stderr, for an error's message."""

    def __init__(self) -> None:
        self._said = bytearray()
        self.ended = anyio.Event()

    async def read(self, process: SpawnedProcess) -> None:
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            async for chunk in process.stderr:
                if len(self._said) < 4096:
                    self._said += chunk[: 4096 - len(self._said)]
        self.ended.set()

    def only(self, expected: Sequence[str]) -> bool:
        """Whether every line said holds one of ``expected`` (and something was said)."""
        lines = [line for line in self.text(0).splitlines() if line.strip()]
        return bool(lines) and all(any(text in line for text in expected) for line in lines)

    def text(self, code: int) -> str:
        return bytes(self._said).decode(errors="replace").strip() or f"exit status {code}"


@asynccontextmanager
async def _stderr_of(process: SpawnedProcess) -> AsyncIterator[_Said]:
    """Read ``process``'s stderr while it runs (a full pipe would stall it)."""
    said = _Said()
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(said.read, process)
            try:
                yield said
                with anyio.move_on_after(5):
                    await said.ended.wait()
            finally:
                group.cancel_scope.cancel()
    except BaseExceptionGroup as raised:  # the caller's own error, not a group's
        raise leaf(raised) from None
