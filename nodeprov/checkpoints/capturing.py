"""A workspace captured from a node over its exec channel (``tar -c`` on the node, nothing
listening), for every provider; :mod:`nodeprov.checkpoints.restoring` writes it back.

A capture streams ``tar -c`` of the workspace's root from the node, checks each member
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
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup

from ..errors import CheckpointError, leaf
from ..node import NodeHandle
from ..node.files import kill_now
from ..spawn import SpawnOptions
from ._node import STAGE, root_of, stderr_of
from .manifest import Entry, Manifest, Piece
from .objects import ObjectStore, digest_of
from .tar import Member, members

__all__ = ["SECRET_PATTERNS", "Capture", "capture"]

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
_NOTES = 1000  # what a manifest lists of what it left out
_TAR_CHANGED = ("file changed as we read it", "File removed before we read it", "socket ignored")

_CAPTURE = 'cd "$1" || exit 1\nexec tar -c -f - .\n'


@dataclass(frozen=True)
class Capture:
    """A captured workspace: its ``manifest``, stored under ``name`` in the object store;
    ``stored`` the bytes of the packs this capture added (what it cost the store)."""

    manifest: Manifest
    name: str
    stored: int


_Ref = tuple[int, int]  # a piece as read: its pack's number and its offset in the pack read


class _Packer:
    """Gathers files' bytes into packs as they are read; each full pack goes to ``group``,
    where a worker thread names its pieces by digest and keeps only those no earlier pack
    or manifest holds, and the object store stores what is left, while the next pack is
    read (two packs at most under way)."""

    def __init__(self, objects: ObjectStore, known: dict[str, Piece], group: TaskGroup) -> None:
        self._objects, self._group = objects, group
        # The open pack: the chunks read, joined (and hashed) in a worker thread once full,
        # so the event loop copies nothing of a file's bytes on their way to the store.
        self._chunks: list[bytes | memoryview] = []
        self._length = 0
        self._cuts: list[tuple[int, int]] = []  # the open pack's pieces: offset, size
        self._packs = 0
        self._pieces: dict[_Ref, Piece] = {}
        self._kept = dict(known)  # by digest: what no pack need hold again
        self._under_way = anyio.Semaphore(2)
        self.stored = 0

    async def add_file(self, data: AsyncIterator[bytes]) -> list[_Ref]:
        """Read a file's ``data`` into pieces of at most :data:`PIECE` bytes; a reference
        to each (:meth:`piece` once the group ended)."""
        refs: list[_Ref] = []
        start: int | None = None  # where the piece under way begins in the open pack
        async for chunk in data:
            at = 0
            while at < len(chunk):
                if start is None:
                    if self._length > PACK - PIECE:
                        await self.flush()
                    start = self._length
                size = min(len(chunk) - at, PIECE - (self._length - start))
                self._chunks.append(chunk if size == len(chunk) else memoryview(chunk)[at : at + size])
                self._length += size
                at += size
                if self._length - start == PIECE:
                    refs.append(self._cut(start))
                    start = None
        if start is not None:
            refs.append(self._cut(start))
        return refs

    def _cut(self, start: int) -> _Ref:
        self._cuts.append((start, self._length - start))
        return self._packs, start

    async def flush(self) -> None:
        """Hand the open pack to the group (it is stored once the group ended)."""
        if not self._length:
            return
        chunks, cuts, number = self._chunks, self._cuts, self._packs  # handed over, not copied
        self._chunks, self._length, self._cuts, self._packs = [], 0, [], self._packs + 1
        await self._under_way.acquire()
        self._group.start_soon(self._store, number, chunks, cuts)

    async def _store(
        self, number: int, chunks: list[bytes | memoryview], cuts: list[tuple[int, int]]
    ) -> None:
        try:
            # All of a pack's pieces in one worker thread: a pack of small files is as many
            # bytes to hash as any, which the event loop (the agent's relay) must not wait for.
            read, digests = await anyio.to_thread.run_sync(_digests, chunks, cuts)
            new: dict[str, tuple[int, int]] = {}
            for digest, cut in zip(digests, cuts, strict=True):
                if digest not in self._kept and digest not in new:
                    new[digest] = cut
            if new:
                # Every piece new (a first capture's packs): the pack is what was read.
                pack = (
                    read
                    if len(new) == len(cuts)
                    else await anyio.to_thread.run_sync(_packed, read, [*new.values()])
                )
                name = digest_of(b"".join(digest.encode() for digest in new))  # its pieces name it
                offsets = itertools.accumulate((size for _, size in new.values()), initial=0)
                for (digest, (_, size)), offset in zip(new.items(), offsets, strict=False):
                    self._kept[digest] = Piece(digest, name, offset, size)
                await self._objects.put(name, pack)
                self.stored += len(pack)
            for digest, (offset, _) in zip(digests, cuts, strict=True):
                self._pieces[number, offset] = self._kept[digest]
        finally:
            self._under_way.release()

    def piece(self, ref: _Ref) -> Piece:
        return self._pieces[ref]


def _digests(chunks: list[bytes | memoryview], cuts: list[tuple[int, int]]) -> tuple[bytes, list[str]]:
    """The pack read (``chunks`` joined) and the digest of each of its pieces (``cuts``)."""
    data = b"".join(chunks)
    with memoryview(data) as view:
        return data, [hashlib.sha256(view[offset : offset + size]).hexdigest() for offset, size in cuts]


def _packed(data: bytes, cuts: list[tuple[int, int]]) -> bytes:
    with memoryview(data) as view:
        return b"".join(view[offset : offset + size] for offset, size in cuts)


def _note(skipped: list[str], line: str) -> None:
    if len(skipped) < _NOTES:
        skipped.append(line)
    elif len(skipped) == _NOTES:
        skipped.append("...: and more, not listed")


def _secrets(patterns: Sequence[str]) -> Callable[[str], bool]:
    """Whether a path has a name that matches one of ``patterns``."""
    match = re.compile("|".join(f"(?:{fnmatch.translate(pattern)})" for pattern in patterns)).match
    return lambda path: any(match(name) for name in path.split("/"))


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
    where = root_of(node, root)
    try:
        async with anyio.create_task_group() as group:
            packer = _Packer(objects, previous.pieces() if previous is not None else {}, group)
            found, skipped = await _read(node, where, packer, _secrets((*SECRET_PATTERNS, *exclude)))
            await packer.flush()
    except BaseExceptionGroup as raised:  # the reading's error, or a pack's store's
        raise leaf(raised) from None
    # A workspace of many files makes a large manifest: built off the event loop.
    manifest, document, name = await anyio.to_thread.run_sync(_manifest, found, skipped, packer)
    await objects.put(name, document)
    return Capture(manifest, name, packer.stored + len(document))


def _manifest(
    found: list[tuple[Member, list[_Ref] | None]], skipped: list[str], packer: _Packer
) -> tuple[Manifest, bytes, str]:
    """The manifest of what a capture ``found`` and left out, as stored, and its name."""
    entries = []
    for member, refs in found:
        if refs is None:
            kind: Literal["dir", "symlink"] = "dir" if member.kind == "dir" else "symlink"
            entries.append(Entry(member.path, kind, member.mode, member.mtime, 0, member.target))
        else:
            pieces = tuple(packer.piece(ref) for ref in refs)
            size = sum(piece.length for piece in pieces)
            entries.append(Entry(member.path, "file", member.mode, member.mtime, size, "", pieces))
    manifest = Manifest(tuple(entries), tuple(skipped))
    document = manifest.to_bytes()
    return manifest, document, digest_of(document)


async def _read(
    node: NodeHandle, where: str, packer: _Packer, secret: Callable[[str], bool]
) -> tuple[list[tuple[Member, list[_Ref] | None]], list[str]]:
    """The members of ``where``'s archive from ``node`` that a checkpoint keeps, a file's
    with its pieces' digests (kept by ``packer``), and what was left out."""
    found: list[tuple[Member, list[_Ref] | None]] = []
    files: dict[str, list[_Ref]] = {}  # a file's pieces, for a hard link to it
    skipped: list[str] = []
    async with await node.spawn(SpawnOptions("sh", ["-c", _CAPTURE, "nodeprov-capture", where])) as process:
        await process.stdin.aclose()
        async with stderr_of(process) as stderr:
            try:
                async for member, data in members(process.stdout):
                    if member.path and (secret(member.path) or member.path.startswith(STAGE)):
                        if not secret(member.path.rpartition("/")[0]):  # not its directory's
                            _note(skipped, f"{member.path}: left out (a secret's name, or excluded)")
                    elif member.kind == "other":
                        _note(skipped, f"{member.path}: not a file, directory or link")
                    elif member.kind == "file":
                        files[member.path] = await packer.add_file(data)
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
    return found, skipped
