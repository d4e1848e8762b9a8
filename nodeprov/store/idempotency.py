"""Idempotency keys of the HTTP API: a client's ``Idempotency-Key`` names one request, so
that the request sent again (a retry after a lost answer, another replica reached) makes
nothing twice. A key is reserved once, with the run or node it makes and the control plane
doing the work, and completed with the answer that is replayed from then on.

Keys are per caller (``scope``: a token id, or ``anonymous``), so one caller's key never
meets another's. The service keeps them a day (:meth:`IdempotencyStore.purge`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta

from ..errors import ConfigError
from ._db import Database, Transaction

__all__ = ["IdempotencyRecord", "IdempotencyStore"]

_KINDS = ("run", "node")
_MAX_KEY_LENGTH = 255


@dataclass(frozen=True)
class IdempotencyRecord:
    """One key: who sent it (``scope``), the ``key`` itself, what it makes (``kind``, run
    or node, and ``resource_id``, chosen when it was reserved), the digest of the request
    it came with (``fingerprint``: the same key with another request is refused), the
    control plane doing the work (``holder``, a lease owner ``lease:ID``), and ``state``:
    ``pending``, or ``done`` with the ``response`` (JSON) the first request answered."""

    scope: str
    key: str
    kind: str
    fingerprint: str
    resource_id: str
    holder: str
    state: str
    response: str | None
    created_at: str


_COLUMNS = ", ".join(field.name for field in fields(IdempotencyRecord))


class IdempotencyStore:
    """Idempotency keys on the store's database. Every method raises
    :class:`~nodeprov.errors.StoreError` when the database fails."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def reserve(
        self, scope: str, key: str, *, kind: str, fingerprint: str, resource_id: str, holder: str
    ) -> tuple[IdempotencyRecord, bool]:
        """The key's record, and whether this call made it (``True``, pending, with this
        call's ``kind``, ``fingerprint``, ``resource_id`` and ``holder``) or found it
        (``False``: another request's, as stored, whatever this call gave). Of callers
        racing with one key, on any number of stores, exactly one makes it.

        Raises:
            ConfigError: ``key`` is empty, longer than 255 characters or not printable
                ASCII, or ``kind`` is neither ``run`` nor ``node``.
        """
        if not key or len(key) > _MAX_KEY_LENGTH or not all(" " <= char <= "~" for char in key):
            raise ConfigError(f"an idempotency key is 1 to {_MAX_KEY_LENGTH} printable ASCII characters")
        if kind not in _KINDS:
            raise ConfigError(f"unknown idempotency key kind {kind!r} (known: {', '.join(_KINDS)})")
        stamp = _timestamp(datetime.now(UTC))

        async def reserve(tx: Transaction) -> tuple[IdempotencyRecord, bool]:
            made = await tx.execute(
                f"INSERT INTO idempotency_keys ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, 'pending', NULL, ?)"
                " ON CONFLICT (scope, key) DO NOTHING",
                (scope, key, kind, fingerprint, resource_id, holder, stamp),
            )
            rows = await tx.fetchall(
                f"SELECT {_COLUMNS} FROM idempotency_keys WHERE scope = ? AND key = ?", (scope, key)
            )
            return IdempotencyRecord(*rows[0]), made == 1

        return await self._db.transact(reserve)

    async def complete(self, scope: str, key: str, response: str) -> None:
        """Mark a pending key done with ``response``, the JSON its request answered (replayed
        to the same request sent again). A key that is not pending (done already, forgotten,
        purged) is left as it is: the first answer stands."""
        await self._db.execute(
            "UPDATE idempotency_keys SET state = 'done', response = ?"
            " WHERE scope = ? AND key = ? AND state = 'pending'",
            (response, scope, key),
        )

    async def take_over(self, scope: str, key: str, *, holder_was: str, holder: str) -> bool:
        """Make ``holder`` the holder of a pending key still held by ``holder_was`` (whose
        control plane died with the work unfinished): a compare-and-set, so of several
        control planes taking one key over exactly one does. Returns whether this one did."""
        taken = await self._db.execute(
            "UPDATE idempotency_keys SET holder = ?"
            " WHERE scope = ? AND key = ? AND holder = ? AND state = 'pending'",
            (holder, scope, key, holder_was),
        )
        return taken == 1

    async def forget(self, scope: str, key: str) -> None:
        """Drop a pending key whose work failed and was undone, so the request sent again
        starts afresh. A done key is kept (its answer stands)."""
        await self._db.execute(
            "DELETE FROM idempotency_keys WHERE scope = ? AND key = ? AND state = 'pending'", (scope, key)
        )

    async def purge(self, older_than: float) -> int:
        """Delete every key made more than ``older_than`` seconds ago (by this machine's
        clock); returns how many.

        Raises:
            ConfigError: ``older_than`` is negative or not finite.
        """
        if not (math.isfinite(older_than) and older_than >= 0):
            raise ConfigError(f"keys are purged by an age in seconds, zero or more, not {older_than}")
        cutoff = _timestamp(datetime.now(UTC) - timedelta(seconds=older_than))
        return await self._db.execute("DELETE FROM idempotency_keys WHERE created_at < ?", (cutoff,))


def _timestamp(moment: datetime) -> str:
    """ISO UTC, always to the microsecond, so timestamps compare as strings."""
    return moment.isoformat(timespec="microseconds")
