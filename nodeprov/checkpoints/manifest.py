"""A checkpoint's manifest: every file, directory and symbolic link of a workspace, each file
as pieces of content (named by digest) in packs of an object store; and what changed from
one manifest to another."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Literal

from .. import _json
from ..errors import ArchiveRefusedError, CheckpointError
from .tar import Confinement

__all__ = ["Changes", "Entry", "Manifest", "Piece", "changes"]

_VERSION = 1


@dataclass(frozen=True)
class Piece:
    """``length`` bytes of a file whose SHA-256 is ``digest``, at ``offset`` in the pack
    object ``pack``."""

    digest: str
    pack: str
    offset: int
    length: int


@dataclass(frozen=True)
class Entry:
    """One path of a workspace, relative to its root (``""``: the root itself)."""

    path: str
    kind: Literal["file", "dir", "symlink"]
    mode: int
    mtime: int
    size: int = 0
    target: str = ""
    """A symbolic link's target, as the link holds it."""
    pieces: tuple[Piece, ...] = ()

    def content(self) -> tuple[Any, ...]:
        """What a change compares: the kind, the mode, the target and the content's digests."""
        return (self.kind, self.mode, self.target, tuple(piece.digest for piece in self.pieces))


@dataclass(frozen=True)
class Manifest:
    """A workspace at one moment: its ``entries`` in archive order (a directory before what
    it holds), and what was left out of it, each as ``"PATH: why"``."""

    entries: tuple[Entry, ...]
    skipped: tuple[str, ...] = ()
    by_path: dict[str, Entry] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_path", {entry.path: entry for entry in self.entries})

    @property
    def files(self) -> int:
        return sum(entry.kind == "file" for entry in self.entries)

    @property
    def size(self) -> int:
        """The bytes of every file together."""
        return sum(entry.size for entry in self.entries)

    def packs(self) -> set[str]:
        """The pack objects its files' pieces lie in."""
        return {piece.pack for entry in self.entries for piece in entry.pieces}

    def pieces(self) -> dict[str, Piece]:
        """Its pieces by digest: what a later capture need not store again."""
        return {piece.digest: piece for entry in self.entries for piece in entry.pieces}

    def to_bytes(self) -> bytes:
        entries = [
            {
                "path": entry.path,
                "kind": entry.kind,
                "mode": entry.mode,
                "mtime": entry.mtime,
                **(
                    {"size": entry.size, "pieces": [list(vars(piece).values()) for piece in entry.pieces]}
                    if entry.kind == "file"
                    else {}
                ),
                **({"target": entry.target} if entry.kind == "symlink" else {}),
            }
            for entry in self.entries
        ]
        document = {"version": _VERSION, "entries": entries, "skipped": list(self.skipped)}
        try:
            text = _json.dumps(document).encode()
        except UnicodeEncodeError:  # a name not in UTF-8 (its bytes as surrogates): escaped
            text = json.dumps(document, separators=(",", ":")).encode()
        return zlib.compress(text, 6)  # a tenth of it: paths repeat, digests are hex

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        """The manifest ``data`` holds, checked as an archive's members are (it is written
        back to nodes).

        Raises:
            CheckpointError: it is not a manifest of this version.
            ArchiveRefusedError: an entry reaches outside the root.
        """
        try:
            document = _json.loads(zlib.decompress(data))
            if document["version"] != _VERSION:
                raise CheckpointError(
                    f"a checkpoint manifest of version {document['version']}, not {_VERSION}"
                )
            entries = tuple(
                Entry(
                    str(item["path"]),
                    item["kind"],
                    int(item["mode"]),
                    int(item["mtime"]),
                    int(item.get("size", 0)),
                    str(item.get("target", "")),
                    tuple(Piece(str(d), str(p), int(o), int(n)) for d, p, o, n in item.get("pieces", ())),
                )
                for item in document["entries"]
            )
            skipped = tuple(str(line) for line in document["skipped"])
        except (ValueError, KeyError, TypeError, zlib.error) as error:
            raise CheckpointError(f"not a checkpoint manifest: {error!r}") from None
        confinement = Confinement()
        for entry in entries:
            if entry.kind not in ("file", "dir", "symlink"):
                raise ArchiveRefusedError(f"manifest entry {entry.path!r} is a {entry.kind!r}")
            if confinement.check(entry.path, entry.kind) != entry.path:
                raise ArchiveRefusedError(f"manifest entry {entry.path!r} is not a normal path")
            if sum(piece.length for piece in entry.pieces) != entry.size:
                raise CheckpointError(f"manifest entry {entry.path!r}: its pieces do not make its size")
        return cls(entries, skipped)


@dataclass(frozen=True)
class Changes:
    """Paths added, modified (content, mode, kind or target) and removed, each sorted."""

    added: tuple[str, ...]
    modified: tuple[str, ...]
    removed: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.added) + len(self.modified) + len(self.removed)


def changes(before: Manifest | None, after: Manifest) -> Changes:
    """What changed from ``before`` (none: an empty workspace) to ``after``; a time alone
    changing is no change."""
    old = {path: entry for path, entry in (before.by_path if before is not None else {}).items() if path}
    new = {path: entry for path, entry in after.by_path.items() if path}  # the root is no change
    return Changes(
        tuple(sorted(path for path in new if path not in old)),
        tuple(
            sorted(
                path for path, entry in new.items() if path in old and old[path].content() != entry.content()
            )
        ),
        tuple(sorted(path for path in old if path not in new)),
    )
