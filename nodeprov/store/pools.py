"""Warm pools in the store: each pool's template and holder, and its nodes, each node in one
state at a time, moved by compare-and-sets so two control planes never both win a move.

A pool node goes ``intent`` (recorded before anything exists on the platform) to ``ready``
(provisioned, waiting) to ``claimed`` (handed to a run: from then on it is that run's node,
in the runs' ``nodes`` table, never the pool's again), or to ``destroying`` and ``destroyed``
(past its age, gone behind the pool's back, the pool removed), or ``failed`` (its provision
failed; the provider left nothing). The pool's size bounds its ``intent`` and ``ready``
nodes together, whoever adds them: :meth:`PoolStore.add_intent` checks the count and the
holder in the transaction that adds.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from ..errors import ConfigError, RunStateError
from ._db import Database, Row, Transaction

__all__ = ["PoolNodeRecord", "PoolNodeState", "PoolRecord", "PoolStore"]


class PoolNodeState(StrEnum):
    """A pool node, as the store holds it (see the module's documentation)."""

    INTENT = "intent"
    READY = "ready"
    CLAIMED = "claimed"
    DESTROYING = "destroying"
    DESTROYED = "destroyed"
    FAILED = "failed"


_P = PoolNodeState
HELD = (_P.INTENT, _P.READY, _P.DESTROYING)
"""The states of the pool nodes a pool holds: what exists, or may, on the platform."""


@dataclass(frozen=True)
class PoolRecord:
    """A pool: its template (``provider``, ``provider_settings`` less secrets as JSON, the
    names of the secret ones it was given in ``secret_fields``, ``node_config`` as JSON),
    ``size``, ``max_age`` (seconds a ready node waits at most), ``refill_concurrency``;
    ``state`` ``active`` or ``removing``; ``holder`` the control plane that keeps it
    (``lease:ID``, ``None`` before anyone took it); ``error`` the last refill's failure and
    ``retry_at_ms`` (the database's clock) when the holder tries again; ``failures`` in a
    row."""

    name: str
    provider: str
    provider_settings: str
    secret_fields: str
    node_config: str
    size: int
    max_age: float
    refill_concurrency: int
    state: str
    holder: str | None
    error: str | None
    retry_at_ms: int | None
    failures: int
    created_at: str


@dataclass(frozen=True)
class PoolNodeRecord:
    """A node of a pool; ``ready_ms`` is when it became ready (the database's clock);
    ``owner`` the control plane that provisions it (``intent``) or made it; ``run_id`` the
    run that claimed it."""

    id: str
    pool: str
    state: PoolNodeState
    owner: str
    ready_ms: int | None
    run_id: str | None
    updated_at: str


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _columns(cls: type[Any]) -> str:
    return ", ".join(f.name for f in fields(cls))


def _marks(values: Collection[Any]) -> str:
    return ", ".join("?" for _ in values)


def _pool(row: Row) -> PoolRecord:
    return PoolRecord(*row)


def _node(row: Row) -> PoolNodeRecord:
    values = list(row)
    values[2] = PoolNodeState(values[2])
    return PoolNodeRecord(*values)


class PoolStore:
    """Pools on the store's database. Every method raises :class:`~nodeprov.errors.StoreError`
    when the database fails."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._lock = " FOR UPDATE" if db.dialect == "postgres" else ""  # SQLite: one writer at a time

    # -- pools -----------------------------------------------------------------------

    async def create(self, record: PoolRecord) -> None:
        """Add a pool.

        Raises:
            ConfigError: a pool of that name exists (being removed too).
        """
        values = tuple(getattr(record, f.name) for f in fields(PoolRecord))

        async def create(tx: Transaction) -> None:
            if await tx.fetchall("SELECT 1 FROM pools WHERE name = ?" + self._lock, (record.name,)):
                raise ConfigError(f"pool {record.name!r} exists already")
            await tx.execute(f"INSERT INTO pools ({_columns(PoolRecord)}) VALUES ({_marks(values)})", values)

        await self._db.transact(create)

    async def get(self, name: str) -> PoolRecord | None:
        row = await self._db.fetchone(f"SELECT {_columns(PoolRecord)} FROM pools WHERE name = ?", (name,))
        return None if row is None else _pool(row)

    async def all(self) -> list[PoolRecord]:
        """Every pool, by name."""
        return [
            _pool(row)
            for row in await self._db.fetchall(f"SELECT {_columns(PoolRecord)} FROM pools ORDER BY name")
        ]

    async def counts(self, pool: str | None = None) -> dict[str, dict[str, int]]:
        """Per pool (every one, or ``pool`` only), how many of its nodes are in each held
        state (``intent``, ``ready``, ``destroying``)."""
        only, args = ("", HELD) if pool is None else (" AND pool = ?", (*HELD, pool))
        rows = await self._db.fetchall(
            f"SELECT pool, state, COUNT(*) FROM pool_nodes WHERE state IN ({_marks(HELD)}){only}"
            " GROUP BY pool, state",
            args,
        )
        counts: dict[str, dict[str, int]] = {}
        for name, state, count in rows:
            counts.setdefault(str(name), {})[str(state)] = int(count)
        return counts

    async def take(self, name: str, holder: str, *, expect: str | None) -> bool:
        """Make ``holder`` the pool's holder if it is held by ``expect`` still (``None``:
        nobody): of two control planes taking it over, one wins. Returns whether it did."""
        if expect is None:
            moved = await self._db.execute(
                "UPDATE pools SET holder = ? WHERE name = ? AND holder IS NULL", (holder, name)
            )
        else:
            moved = await self._db.execute(
                "UPDATE pools SET holder = ? WHERE name = ? AND holder = ?", (holder, name, expect)
            )
        return moved == 1

    async def mark_removing(self, name: str) -> bool:
        """Stop the pool's claims and refills, so it can be emptied and deleted. Returns
        whether the pool exists."""
        return await self._db.execute("UPDATE pools SET state = 'removing' WHERE name = ?", (name,)) == 1

    async def delete_if_empty(self, name: str) -> bool:
        """Delete a pool being removed that holds no node any more. Returns whether it did."""

        async def delete(tx: Transaction) -> bool:
            if await tx.fetchall(
                f"SELECT 1 FROM pool_nodes WHERE pool = ? AND state IN ({_marks(HELD)})", (name, *HELD)
            ):
                return False
            await tx.execute("DELETE FROM pool_nodes WHERE pool = ?", (name,))
            deleted = await tx.execute("DELETE FROM pools WHERE name = ? AND state = 'removing'", (name,))
            return deleted == 1

        return await self._db.transact(delete)

    async def note_failure(self, name: str, error: str, backoff: float) -> None:
        """A refill failed: say why, and that the holder tries again in ``backoff`` seconds."""
        await self._db.execute(
            f"UPDATE pools SET error = ?, failures = failures + 1, retry_at_ms = {self._db.now_ms} + ?"
            " WHERE name = ?",
            (error, int(backoff * 1000), name),
        )

    async def note_success(self, name: str) -> None:
        await self._db.execute(
            "UPDATE pools SET error = NULL, failures = 0, retry_at_ms = NULL WHERE name = ? AND failures > 0",
            (name,),
        )

    # -- nodes -----------------------------------------------------------------------

    async def nodes(self, name: str, states: Collection[PoolNodeState] = HELD) -> list[PoolNodeRecord]:
        """The pool's nodes in ``states``, oldest first."""
        states = tuple(states)
        rows = await self._db.fetchall(
            f"SELECT {_columns(PoolNodeRecord)} FROM pool_nodes"
            f" WHERE pool = ? AND state IN ({_marks(states)}) ORDER BY ready_ms, updated_at",
            (name, *states),
        )
        return [_node(row) for row in rows]

    async def held_ids(self, *, unless_dead: Callable[[str], bool | None]) -> set[str]:
        """The ids of every pool's held nodes, less those still being provisioned by an owner
        ``unless_dead`` says is dead: what a reaper judges by their lifetime only (a dead
        provisioner's node is nobody's, judged by its owner as any other)."""
        rows = await self._db.fetchall(
            f"SELECT id, state, owner FROM pool_nodes WHERE state IN ({_marks(HELD)})", HELD
        )
        return {
            str(node) for node, state, owner in rows if state != _P.INTENT or unless_dead(owner) is not False
        }

    async def add_intent(self, name: str, node_id: str, holder: str) -> bool:
        """Record a node about to be provisioned for the pool, if ``holder`` holds the pool,
        it is active, and its held nodes are fewer than its size. Returns whether it did."""
        stamp = _now()

        async def add(tx: Transaction) -> bool:
            rows = await tx.fetchall(
                "SELECT holder, state, size FROM pools WHERE name = ?" + self._lock, (name,)
            )
            if not rows or rows[0][0] != holder or rows[0][1] != "active":
                return False
            count = await tx.fetchall(
                "SELECT COUNT(*) FROM pool_nodes WHERE pool = ? AND state IN ('intent', 'ready')", (name,)
            )
            if int(count[0][0]) >= int(rows[0][2]):
                return False
            await tx.execute(
                f"INSERT INTO pool_nodes ({_columns(PoolNodeRecord)})"
                " VALUES (?, ?, 'intent', ?, NULL, NULL, ?)",
                (node_id, name, holder, stamp),
            )
            return True

        return await self._db.transact(add)

    async def made_ready(self, node_id: str) -> bool:
        """A provisioned node is ready, if its pool is still active. Returns whether it is:
        otherwise (the pool is being removed) it is the provisioner's to destroy."""
        moved = await self._db.execute(
            f"UPDATE pool_nodes SET state = 'ready', ready_ms = {self._db.now_ms}, updated_at = ?"
            " WHERE id = ? AND state = 'intent' AND pool IN (SELECT name FROM pools WHERE state = 'active')",
            (_now(), node_id),
        )
        return moved == 1

    async def move(self, node_id: str, expect: Collection[PoolNodeState], state: PoolNodeState) -> bool:
        """Move a pool node to ``state`` if it is in one of ``expect``: a compare-and-set.
        Returns whether it moved."""
        expect = tuple(expect)
        moved = await self._db.execute(
            f"UPDATE pool_nodes SET state = ?, updated_at = ? WHERE id = ? AND state IN ({_marks(expect)})",
            (state, _now(), node_id, *expect),
        )
        return moved == 1

    async def claim(self, name: str, run_id: str, provider: str) -> str | None:
        """Hand the pool's oldest ready node younger than the pool's ``max_age`` to run
        ``run_id``, in one transaction: the pool node is ``claimed`` and the run's node
        recorded ``live`` (in the runs' ``nodes``), so no moment exists at which a reaper
        sees it held by neither. Two claimants never get one node. Returns the node's id,
        ``None`` when the pool has no ready node.

        Raises:
            RunStateError: there is no such pool, or it is being removed.
        """
        skip = " FOR UPDATE SKIP LOCKED" if self._db.dialect == "postgres" else ""
        stamp = _now()

        async def claim(tx: Transaction) -> str | None:
            pools = await tx.fetchall("SELECT state, max_age FROM pools WHERE name = ?", (name,))
            if not pools or pools[0][0] != "active":
                raise RunStateError(f"pool {name!r} {'is being removed' if pools else 'does not exist'}")
            found = await tx.fetchall(
                "SELECT id FROM pool_nodes WHERE pool = ? AND state = 'ready'"
                f" AND ready_ms > {self._db.now_ms} - ? ORDER BY ready_ms LIMIT 1{skip}",
                (name, int(float(pools[0][1]) * 1000)),
            )
            if not found:
                return None
            node_id = str(found[0][0])
            if not await tx.execute(
                "UPDATE pool_nodes SET state = 'claimed', run_id = ?, updated_at = ?"
                " WHERE id = ? AND state = 'ready'",
                (run_id, stamp, node_id),
            ):
                return None  # a guard: SQLite serializes writers, PostgreSQL skipped locked rows
            await tx.execute(
                "INSERT INTO nodes (id, provider, run_id, state, created_at, updated_at)"
                " VALUES (?, ?, ?, 'live', ?, ?)",
                (node_id, provider, run_id, stamp, stamp),
            )
            return node_id

        return await self._db.transact(claim)

    async def stale(self, name: str, max_age: float) -> list[PoolNodeRecord]:
        """The pool's nodes that no claim takes and that are the pool's to destroy: ready
        ones older than ``max_age`` seconds (the database's clock), and those whose destroy
        began, of any age."""
        rows = await self._db.fetchall(
            f"SELECT {_columns(PoolNodeRecord)} FROM pool_nodes WHERE pool = ? AND (state = 'destroying'"
            f" OR (state = 'ready' AND ready_ms <= {self._db.now_ms} - ?))",
            (name, int(max_age * 1000)),
        )
        return [_node(row) for row in rows]

    async def expired(self, name: str, max_age: float) -> list[PoolNodeRecord]:
        """The pool's ready nodes older than ``max_age`` seconds (the database's clock)."""
        rows = await self._db.fetchall(
            f"SELECT {_columns(PoolNodeRecord)} FROM pool_nodes WHERE pool = ? AND state = 'ready'"
            f" AND ready_ms <= {self._db.now_ms} - ?",
            (name, int(max_age * 1000)),
        )
        return [_node(row) for row in rows]
