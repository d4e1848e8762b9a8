"""Tar archives as async streams: read a workspace's archive as it comes from a node, and
write one to a node, in bounded memory.

Reading checks every member before the caller sees it (:class:`Confinement`): the node
is not trusted, and its ``tar`` may be anything. Formats read: ustar, GNU (long names and
link names, base-256 sizes) and pax (``path``, ``linkpath``, ``size``, ``mtime``), which
cover GNU tar's and BusyBox's output. Writing emits pax, which every ``tar -x`` reads.
"""

from __future__ import annotations

import posixpath
import tarfile
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Literal

from ..errors import ArchiveRefusedError

__all__ = ["BLOCK", "Confinement", "Kind", "Member", "end_of_archive", "header", "members", "padding"]

BLOCK = 512
_ENCODING = "utf-8"
_ERRORS = "surrogateescape"  # a name not in UTF-8 keeps its bytes, and is written back as they were

Kind = Literal["file", "dir", "symlink", "hardlink", "other"]
_KINDS: dict[bytes, Kind] = {
    tarfile.REGTYPE: "file",
    tarfile.AREGTYPE: "file",
    tarfile.CONTTYPE: "file",
    tarfile.DIRTYPE: "dir",
    tarfile.SYMTYPE: "symlink",
    tarfile.LNKTYPE: "hardlink",
    tarfile.CHRTYPE: "other",
    tarfile.BLKTYPE: "other",
    tarfile.FIFOTYPE: "other",
}


@dataclass(frozen=True)
class Member:
    """One member of an archive: ``path`` relative to the archive's root (``""`` for the root
    itself), normalised; ``target`` a link's target (a hard link's, a path in the archive)."""

    path: str
    kind: Kind
    mode: int
    mtime: int
    size: int = 0
    target: str = ""


class Confinement:
    """What keeps an archive's members inside its root, member by member: no absolute path,
    no ``..``, no path twice, nothing under a symbolic link (extracting through one writes
    where it points), and hard links only to a file the archive held before. A symbolic link
    itself may point anywhere (a virtual environment's ``python`` points at ``/usr/bin``): it
    is kept as a link, and nothing is ever written through it.

    Raises (from :meth:`check`): ArchiveRefusedError, saying which member and why."""

    def __init__(self) -> None:
        self._seen: dict[str, Kind] = {}

    def check(self, name: str, kind: Kind, target: str = "") -> str:
        """``name`` as a path relative to the root (``""``: the root), once checked."""
        if name.startswith("/"):
            raise ArchiveRefusedError(f"archive member {name!r} is an absolute path")
        parts = [part for part in name.split("/") if part not in ("", ".")]
        if ".." in parts:
            raise ArchiveRefusedError(f"archive member {name!r} climbs out with '..'")
        path = "/".join(parts)
        if path in self._seen:
            raise ArchiveRefusedError(f"archive member {name!r} comes twice")
        for depth in range(1, len(parts)):
            if self._seen.get("/".join(parts[:depth])) == "symlink":
                raise ArchiveRefusedError(f"archive member {name!r} lies under a symbolic link")
        if kind == "hardlink":
            linked = self.check_link(target)
            if self._seen.get(linked) != "file":
                raise ArchiveRefusedError(
                    f"archive member {name!r} links to {target!r}, not a file before it"
                )
        if not path and kind != "dir":
            raise ArchiveRefusedError(f"the archive's root is a {kind}, not a directory")
        self._seen[path] = kind
        return path

    @staticmethod
    def check_link(target: str) -> str:
        """A hard link's ``target`` as a path relative to the root.

        Raises:
            ArchiveRefusedError: it is absolute, or climbs out with ``..``.
        """
        normal = posixpath.normpath(target) if target else ""
        if not normal or normal.startswith(("/", "../")) or normal == "..":
            raise ArchiveRefusedError(f"archive hard link to {target!r} leaves the archive")
        return "" if normal == "." else normal


class _Source:
    """Bytes from an async iterable of chunks, taken exactly; a chunk that lies whole within
    what is taken is passed on as it is, uncopied."""

    def __init__(self, chunks: AsyncIterable[bytes]) -> None:
        self._chunks = aiter(chunks)
        self._held: deque[bytes] = deque()
        self._at = 0  # where the first held chunk's unread bytes begin
        self._ended = False

    async def _more(self) -> bool:
        while not self._held:
            if self._ended:
                return False
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                self._ended = True
                return False
            if chunk:
                self._held.append(chunk)
        return True

    async def take(self, count: int) -> bytes:
        if self._held and len(self._held[0]) - self._at > count:  # within one chunk: no generator
            at = self._at
            self._at += count
            return self._held[0][at : at + count]
        return b"".join([piece async for piece in self.pieces(count)])

    async def pieces(self, count: int) -> AsyncIterator[bytes]:
        """``count`` bytes, in the pieces they came in."""
        while count:
            if not await self._more():
                raise ArchiveRefusedError("the archive ends in the middle of a member")
            first, at = self._held[0], self._at
            size = min(len(first) - at, count)
            if at == 0 and size == len(first):
                piece = first
            else:
                with memoryview(first) as view:
                    piece = bytes(view[at : at + size])
            if at + size == len(first):
                self._held.popleft()
                self._at = 0
            else:
                self._at = at + size
            count -= size
            yield piece


def _pax(data: bytes) -> dict[str, str]:
    """A pax extended header's records (``"LEN key=value\\n"``)."""
    records: dict[str, str] = {}
    at = 0
    while at < len(data):
        space = data.find(b" ", at)
        try:
            length = int(data[at:space])
        except ValueError:
            raise ArchiveRefusedError("a pax header is malformed") from None
        if space < 0 or length <= space - at or at + length > len(data):
            raise ArchiveRefusedError("a pax header is malformed")
        key, _, value = data[space + 1 : at + length - 1].partition(b"=")
        records[key.decode(_ENCODING, _ERRORS)] = value.decode(_ENCODING, _ERRORS)
        at += length
    return records


async def members(chunks: AsyncIterable[bytes]) -> AsyncIterator[tuple[Member, AsyncIterator[bytes]]]:
    """Each member of the archive in ``chunks``, checked (see :class:`Confinement`), with an
    iterator of its data (a file's; empty for the others) to be read before the next member
    (what is left unread is skipped).

    Raises:
        ArchiveRefusedError: a member reaches outside the root, the archive is cut short, or
            it is not a tar archive (a sparse file, an unknown header).
    """
    source, confinement = _Source(chunks), Confinement()
    long_name = long_link = None
    pax: dict[str, str] = {}
    while True:
        block = await source.take(BLOCK)
        if block == bytes(BLOCK):
            return  # the end-of-archive blocks (what follows them is tar's padding)
        try:
            info = tarfile.TarInfo.frombuf(block, _ENCODING, _ERRORS)
        except tarfile.HeaderError as error:
            raise ArchiveRefusedError(f"not a tar archive: {error}") from None
        size = int(pax["size"]) if "size" in pax else info.size
        padded = -size % BLOCK
        if info.type in (
            tarfile.GNUTYPE_LONGNAME,
            tarfile.GNUTYPE_LONGLINK,
            tarfile.XHDTYPE,
            tarfile.XGLTYPE,
        ):
            data = await source.take(size + padded)
            if info.type == tarfile.GNUTYPE_LONGNAME:
                long_name = data[:size].rstrip(b"\0").decode(_ENCODING, _ERRORS)
            elif info.type == tarfile.GNUTYPE_LONGLINK:
                long_link = data[:size].rstrip(b"\0").decode(_ENCODING, _ERRORS)
            elif info.type == tarfile.XHDTYPE:
                pax = _pax(data[:size])
            continue  # a global pax header changes nothing a workspace keeps
        kind = _KINDS.get(info.type)
        if kind is None:
            raise ArchiveRefusedError(f"archive member {info.name!r} is of a kind not kept ({info.type!r})")
        name = pax.get("path", long_name or info.name)
        target = pax.get("linkpath", long_link or info.linkname)
        mtime = int(float(pax.get("mtime", info.mtime)))
        long_name = long_link = None
        pax = {}
        member = Member(
            confinement.check(name, kind, target),
            kind,
            info.mode & 0o7777,
            mtime,
            size if kind == "file" else 0,
            Confinement.check_link(target) if kind == "hardlink" else target if kind == "symlink" else "",
        )
        data_pieces = source.pieces(size)
        yield member, data_pieces
        async for _ in data_pieces:  # what the caller left unread
            pass
        if padded:
            await source.take(padded)


def header(member: Member) -> bytes:
    """The header blocks of ``member`` (a file, a directory or a symbolic link), in pax."""
    info = tarfile.TarInfo(member.path or ".")
    info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE}[member.kind]
    info.mode, info.mtime, info.size, info.linkname = member.mode, member.mtime, member.size, member.target
    info.uname = info.gname = ""
    return info.tobuf(tarfile.PAX_FORMAT, _ENCODING, _ERRORS)


def padding(size: int) -> bytes:
    """What follows ``size`` bytes of a member's data to fill its last block."""
    return bytes(-size % BLOCK)


def end_of_archive() -> bytes:
    """The blocks that end an archive."""
    return bytes(2 * BLOCK)
