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
import hashlib
import itertools
import re
import secrets
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Literal

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup

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
_HASH_IN_THREAD = 1 << 16  # a digest of more than this leaves the event loop free meanwhile
_STAGE = ".nodeprov-restore-"
_BLOCK = 1 << 20  # what a restore sends to the node at a time
_NOTES = 1000  # what a manifest lists of what it left out
_TAR_CHANGED = ("file changed as we read it", "File removed before we read it", "socket ignored")

_CAPTURE = 'cd "$1" || exit 1\nexec tar -c -f - .\n'
_EXTRACT = 'mkdir "$1/$2" || exit 1\ntar -x -p -o -f - -C "$1/$2" || { rm -rf "$1/$2"; exit 1; }\n'
_SWAP = """root=$1 stage=$2 mode=$3
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
        self._buffer = bytearray()
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
                    if len(self._buffer) > PACK - PIECE:
                        await self.flush()
                    start = len(self._buffer)
                size = min(len(chunk) - at, PIECE - (len(self._buffer) - start))
                with memoryview(chunk) as view:
                    self._buffer += view[at : at + size]
                at += size
                if len(self._buffer) - start == PIECE:
                    refs.append(self._cut(start))
                    start = None
        if start is not None:
            refs.append(self._cut(start))
        return refs

    def _cut(self, start: int) -> _Ref:
        self._cuts.append((start, len(self._buffer) - start))
        return self._packs, start

    async def flush(self) -> None:
        """Hand the open pack to the group (it is stored once the group ended)."""
        if not self._buffer:
            return
        read, cuts, number = self._buffer, self._cuts, self._packs  # handed over, not copied
        self._buffer, self._cuts, self._packs = bytearray(), [], self._packs + 1
        await self._under_way.acquire()
        self._group.start_soon(self._store, number, read, cuts)

    async def _store(self, number: int, read: bytearray, cuts: list[tuple[int, int]]) -> None:
        try:
            # All of a pack's pieces in one worker thread: a pack of small files is as many
            # bytes to hash as any, which the event loop (the agent's relay) must not wait for.
            digests = await anyio.to_thread.run_sync(_digests, read, cuts)
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


def _digests(data: bytearray, cuts: list[tuple[int, int]]) -> list[str]:
    with memoryview(data) as view:
        return [hashlib.sha256(view[offset : offset + size]).hexdigest() for offset, size in cuts]


def _packed(data: bytearray, cuts: list[tuple[int, int]]) -> bytes:
    with memoryview(data) as view:
        return b"".join(view[offset : offset + size] for offset, size in cuts)


async def _digest(data: bytes) -> str:
    if len(data) > _HASH_IN_THREAD:
        return await anyio.to_thread.run_sync(digest_of, data)
    return digest_of(data)


def _note(skipped: list[str], line: str) -> None:
    if len(skipped) < _NOTES:
        skipped.append(line)
    elif len(skipped) == _NOTES:
        skipped.append("...: and more, not listed")


def _secrets(patterns: Sequence[str]) -> Callable[[str], bool]:
    """Whether a path has a name that matches one of ``patterns``."""
    match = re.compile("|".join(f"(?:{fnmatch.translate(pattern)})" for pattern in patterns)).match
    return lambda path: any(match(name) for name in path.split("/"))


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
        async with _stderr_of(process) as stderr:
            try:
                async for member, data in members(process.stdout):
                    if member.path and (secret(member.path) or member.path.startswith(_STAGE)):
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
    """``manifest`` as a tar archive, its files read from their packs (the last two kept),
    in blocks of about :data:`_BLOCK` bytes (small files' headers and data together)."""
    packs: dict[str, bytes] = {}
    out = bytearray()
    for entry in manifest.entries:
        if not entry.path:
            continue  # the root: its mode is set once it is swapped in
        out += header(Member(entry.path, entry.kind, entry.mode, entry.mtime, entry.size, entry.target))
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
            out += data
            if len(out) >= _BLOCK:
                yield bytes(out)
                out.clear()
        out += padding(entry.size)
    yield bytes(out + end_of_archive())


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
