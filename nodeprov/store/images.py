"""Prompts' images in the store: once each, by content hash (SHA-256, hex), so that a run's
record and events name an image by :meth:`~nodeprov.prompts.ImageBlock.ref` and a resume on a
fresh node reads it back."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import UTC, datetime

from ..prompts import ImageBlock
from ._db import Database, Transaction

__all__ = ["ImageStore"]


class ImageStore:
    """Images on the store's database. Every method raises
    :class:`~nodeprov.errors.StoreError` when the database fails."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def put(self, images: Sequence[ImageBlock], *, run_id: str) -> None:
        """Keep ``images``, named by run ``run_id`` (an image stored already is kept once)."""
        if images:
            await self._db.transact(lambda tx: self.put_in(tx, images, run_id=run_id))

    @staticmethod
    async def put_in(tx: Transaction, images: Sequence[ImageBlock], *, run_id: str) -> None:
        """:meth:`put`, as part of the transaction ``tx``. An image stored already has its time
        set anew: retention, deleting what no run names and is old, must wait for the run
        this transaction records (and takes the row's lock, on PostgreSQL, until it has)."""
        stamp = datetime.now(UTC).isoformat(timespec="microseconds")
        for image in images:
            await tx.execute(
                "INSERT INTO images (sha256, media_type, size, data, created_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (sha256) DO UPDATE SET created_at = excluded.created_at",
                (image.sha256, image.media_type, image.size, image.data, stamp),
            )
            await tx.execute(
                "INSERT INTO image_refs (sha256, run_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                (image.sha256, run_id),
            )

    async def get(self, hashes: Collection[str]) -> dict[str, ImageBlock]:
        """The stored images of ``hashes``, by hash; one that is not stored is absent."""
        wanted = tuple(sorted(set(hashes)))
        if not wanted:
            return {}
        marks = ", ".join("?" for _ in wanted)
        rows = await self._db.fetchall(
            f"SELECT media_type, data FROM images WHERE sha256 IN ({marks})",
            wanted,
        )
        found = (ImageBlock(bytes(data), str(media_type)) for media_type, data in rows)
        return {image.sha256: image for image in found}
