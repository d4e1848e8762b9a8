"""Control planes' leases (:class:`LeaseStore`): taken, renewed by heartbeats, released, judged
alive or dead by the database's clock, and compacted once dead and named by nothing.

**Compaction and "cannot tell".** A lease this store does not know is another store's, and
whether its holder lives cannot be told here (a node labelled with it is kept until its own
lifetime ends). So a dead lease is deleted only once nothing in this store still asks about
it: no live run is owned by it, no pool is held by it, no pool node it was making is
unsettled, no idempotency key it holds is pending. From then on a node a platform still
labels with it (one the store's records say is gone) is judged by its lifetime alone, as a
node of another store: never reaped before its time on a guess.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection

from ._db import Database, Row, Transaction
from ._rows import as_record, columns, marks, new_id, now
from .records import LeaseRecord

__all__ = ["COMPACT_AFTER", "LeaseStore"]

COMPACT_AFTER = 600.0
"""Seconds a lease stays after it died (``nodeprov status`` still names its holder)."""

_PREFIX = "lease:"
_HELD_POOL_NODES = ("intent", "ready", "destroying")
_BATCH = 500  # leases deleted, and looked up, per statement


class LeaseStore:
    """Leases on the store's database. Every method raises :class:`~nodeprov.errors.StoreError`
    when the database fails."""

    def __init__(self, db: Database, heartbeats: Callable[[], Awaitable[Database]]) -> None:
        self._db = db
        self._heartbeats = heartbeats

    async def acquire(self, holder: str, ttl: float) -> LeaseRecord:
        """A new lease for ``holder`` (a description: host, pid, command), alive for ``ttl``
        seconds unless renewed."""
        lease_id, now_ms, stamp = new_id("lease"), self._db.now_ms, now()

        async def acquire(tx: Transaction) -> list[Row]:
            await tx.execute(
                "INSERT INTO leases (id, holder, created_at, heartbeat_ms, expires_ms, released)"
                f" VALUES (?, ?, ?, {now_ms}, {now_ms} + ?, 0)",
                (lease_id, holder, stamp, int(ttl * 1000)),
            )
            return await tx.fetchall(f"SELECT {columns(LeaseRecord)} FROM leases WHERE id = ?", (lease_id,))

        lease: LeaseRecord = as_record(LeaseRecord, (await self._db.transact(acquire))[0])
        return lease

    async def renew(self, lease_id: str, ttl: float) -> bool:
        """Extend a live lease by ``ttl`` seconds from now. ``False``: it had expired or was
        released (or compacted), and whatever it owned may already be another control
        plane's to clean. Runs on a connection of its own, never queued behind the store's
        other statements."""
        db = await self._heartbeats()
        now_ms = db.now_ms
        renewed = await db.execute(
            f"UPDATE leases SET heartbeat_ms = {now_ms}, expires_ms = {now_ms} + ?"
            f" WHERE id = ? AND released = 0 AND expires_ms > {now_ms}",
            (int(ttl * 1000), lease_id),
        )
        return renewed == 1

    async def release(self, lease_id: str) -> None:
        """End a lease now: what it still owns is left to reconcile."""
        await self._db.execute(
            f"UPDATE leases SET released = 1, expires_ms = {self._db.now_ms} WHERE id = ?", (lease_id,)
        )

    async def get(self, lease_id: str) -> LeaseRecord | None:
        row = await self._db.fetchone(f"SELECT {columns(LeaseRecord)} FROM leases WHERE id = ?", (lease_id,))
        lease: LeaseRecord | None = as_record(LeaseRecord, row)
        return lease

    async def states(self, lease_ids: Collection[str]) -> dict[str, bool]:
        """Of ``lease_ids``, those this store knows, each with whether it lives (neither
        expired nor released, by the database's clock); looked up by key. One missing is
        another store's, or compacted: whether its holder lives cannot be told here."""
        wanted = sorted(set(lease_ids))
        known: dict[str, bool] = {}
        for start in range(0, len(wanted), _BATCH):
            part = tuple(wanted[start : start + _BATCH])
            rows = await self._db.fetchall(
                f"SELECT id, CASE WHEN released = 0 AND expires_ms > {self._db.now_ms} THEN 1 ELSE 0 END"
                f" FROM leases WHERE id IN ({marks(part)})",
                part,
            )
            known.update((str(row[0]), bool(row[1])) for row in rows)
        return known

    async def liveness(self) -> dict[str, bool]:
        """Every lease this store knows, by id, with whether it lives (as :meth:`states`):
        for judging owners not known in advance (a platform's labels). Compaction bounds it
        by the leases alive, dead in the last :data:`COMPACT_AFTER` seconds, or still named."""
        rows = await self._db.fetchall(
            f"SELECT id, CASE WHEN released = 0 AND expires_ms > {self._db.now_ms} THEN 1 ELSE 0 END"
            " FROM leases"
        )
        return {str(row[0]): bool(row[1]) for row in rows}

    async def live(self) -> set[str]:
        """Ids of the leases that are neither expired nor released, by the database's clock."""
        rows = await self._db.fetchall(
            f"SELECT id FROM leases WHERE expires_ms > {self._db.now_ms} AND released = 0"
        )
        return {str(row[0]) for row in rows}

    async def compact(self, live_run_states: Collection[str], *, after: float = COMPACT_AFTER) -> int:
        """Delete the leases dead for more than ``after`` seconds that nothing in the store
        names any more (see the module): no run in ``live_run_states`` is owned by it, no
        pool held, no pool node it makes unsettled, no idempotency key it holds pending.
        Returns how many; at most a batch per call (it is called again and again)."""
        states, held = tuple(live_run_states), _HELD_POOL_NODES
        owner = "'lease:' || leases.id"
        sql = (
            "DELETE FROM leases WHERE id IN (SELECT id FROM leases"
            f" WHERE expires_ms < {self._db.now_ms} - ?"
            " AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.owner ="
            f" {owner} AND runs.state IN ({marks(states)}))"
            f" AND NOT EXISTS (SELECT 1 FROM pools WHERE pools.holder = {owner})"
            " AND NOT EXISTS (SELECT 1 FROM pool_nodes WHERE pool_nodes.owner ="
            f" {owner} AND pool_nodes.state IN ({marks(held)}))"
            " AND NOT EXISTS (SELECT 1 FROM idempotency_keys WHERE idempotency_keys.holder ="
            f" {owner} AND idempotency_keys.state = 'pending')"
            " LIMIT ?)"
        )
        return await self._db.execute(sql, (int(after * 1000), *states, *held, _BATCH))


def lease_id_of(owner: str) -> str | None:
    """The lease id an owner ``lease:ID`` names; ``None`` for an owner of another form."""
    return owner.removeprefix(_PREFIX) if owner.startswith(_PREFIX) else None
