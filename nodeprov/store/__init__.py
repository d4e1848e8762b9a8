"""The durable session store: workspaces and their agent sessions, runs and their events
and their prompts' images, node intents, pause snapshots, control-plane leases, agent
transcripts mirrored off the nodes, and the HTTP API's tokens and idempotency keys.

``await Store.open()`` uses an embedded SQLite file under the user's state directory
(``$XDG_STATE_HOME/nodeprov/nodeprov.db``, WAL, safe with several processes);
``await Store.open("postgresql://...")`` uses PostgreSQL, for control planes that share
state. Both behave the same and migrate their schema on open. Every statement is bounded
by the store's ``statement_timeout``; run events and transcript frames are written with
group commit (one transaction for whatever many runs submit at once).

Nothing secret is stored: agent options are kept without their ``env``, and the callers
supply credentials again when they resume; an API token is kept as its secret's SHA-256.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import fields
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio

from .. import _json
from ..errors import ConfigError, StoreError, TokenError
from ..prompts import ImageBlock
from ._db import (
    DEFAULT_RETRY_FOR,
    DEFAULT_STATEMENT_TIMEOUT,
    Database,
    Row,
    Statements,
    Transaction,
    check_params,
    patience,
)
from ._postgres import PostgresDatabase
from ._rows import as_record, columns, insert, marks, new_id, now
from ._schema import migrate
from ._sqlite import SQLiteDatabase
from .api import AuditEntry, AuditStore, Owner, OwnerStore
from .checkpoints import CheckpointRecord, CheckpointStore
from .entries import EntryBatch, EntryKey, EntryStore, KeyedEntry, entry_key, keyed
from .idempotency import IdempotencyRecord, IdempotencyStore
from .images import ImageStore
from .leases import LeaseStore, lease_id_of
from .pools import HELD as POOL_HELD
from .pools import PoolNodeRecord, PoolNodeState, PoolRecord, PoolStore
from .records import (
    EventRecord,
    LeaseRecord,
    NodeRecord,
    NodeRecordState,
    RunRecord,
    SessionRecord,
    SnapshotRecord,
)
from .retention import PruneReport, Retention
from .sessions import WorkspaceSessions
from .tokens import (
    DEFAULT_TENANT,
    SCOPES,
    TokenEntry,
    TokenRecord,
    TokenStore,
    add_to_tokens_file,
    check_tenant,
    read_tokens_file,
)

__all__ = [
    "DEFAULT_TENANT",
    "POOL_HELD",
    "SCOPES",
    "AuditEntry",
    "AuditStore",
    "CheckpointRecord",
    "CheckpointStore",
    "EntryBatch",
    "EntryKey",
    "EntryStore",
    "EventRecord",
    "IdempotencyRecord",
    "IdempotencyStore",
    "ImageStore",
    "KeyedEntry",
    "LeaseRecord",
    "LeaseStore",
    "NodeRecord",
    "NodeRecordState",
    "Owner",
    "OwnerStore",
    "PoolNodeRecord",
    "PoolNodeState",
    "PoolRecord",
    "PoolStore",
    "PruneReport",
    "Retention",
    "RunRecord",
    "SessionRecord",
    "SnapshotRecord",
    "Store",
    "StoreError",
    "TokenEntry",
    "TokenError",
    "TokenRecord",
    "TokenStore",
    "add_to_tokens_file",
    "check_tenant",
    "default_store_path",
    "entry_key",
    "keyed",
    "lease_id_of",
    "new_id",
    "now",
    "patience",
    "read_tokens_file",
]


def default_store_path() -> Path:
    """``$XDG_STATE_HOME/nodeprov/nodeprov.db`` (``~/.local/state/...`` by default)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "nodeprov" / "nodeprov.db"


async def _open_database(url: str, statement_timeout: float, retry_for: float) -> Database:
    if url.startswith("sqlite:///"):
        path = Path("/" + url.removeprefix("sqlite://").lstrip("/"))
        own = path == default_store_path()  # nodeprov's own directory: private whatever it was
        return await SQLiteDatabase.open(path, statement_timeout, retry_for, private_directory=own)
    if url.startswith(("postgresql://", "postgres://")):
        return await PostgresDatabase.open(url, statement_timeout, retry_for)
    raise ConfigError(f"unknown store URL {url!r}: use sqlite:///PATH or postgresql://...")


class _Parts:
    """The parts of the store kept in modules of their own, each on the store's database."""

    db: Database

    @cached_property
    def checkpoints(self) -> CheckpointStore:
        """Runs' checkpoints, and the objects of those kept in the store itself."""
        return CheckpointStore(self.db)

    @cached_property
    def images(self) -> ImageStore:
        """Prompts' images, by hash."""
        return ImageStore(self.db)

    @cached_property
    def pools(self) -> PoolStore:
        """Warm pools and their nodes."""
        return PoolStore(self.db)

    @cached_property
    def tokens(self) -> TokenStore:
        """The HTTP API's bearer tokens."""
        return TokenStore(self.db)

    @cached_property
    def idempotency(self) -> IdempotencyStore:
        """The HTTP API's idempotency keys."""
        return IdempotencyStore(self.db)

    @cached_property
    def owners(self) -> OwnerStore:
        """Which tenant owns what the HTTP API made (runs, nodes)."""
        return OwnerStore(self.db)

    @cached_property
    def audit(self) -> AuditStore:
        """Who did what through the HTTP API."""
        return AuditStore(self.db)

    @cached_property
    def retention(self) -> Retention:
        """What is deleted so that nothing grows for ever (see :mod:`nodeprov.store.retention`)."""
        return Retention(self.db)

    @cached_property
    def transcripts(self) -> EntryStore:
        """The agents' session state, as entries (see :mod:`nodeprov.store.entries`)."""
        return EntryStore(self.db)


class Store(WorkspaceSessions, _Parts):
    """The store; use ``async with await Store.open(url) as store`` or call :meth:`aclose`.

    Raises :class:`~nodeprov.errors.StoreError` when the database fails or a statement
    runs out of time, and :class:`~nodeprov.errors.TokenError` for a bad resume token.
    """

    def __init__(
        self,
        db: Database,
        url: str,
        statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT,
        retry_for: float = DEFAULT_RETRY_FOR,
    ) -> None:
        self.db = db
        self.url = url
        self._statement_timeout = statement_timeout
        self._retry_for = retry_for
        # Lease renewals get a connection of their own, opened by the first: queued behind
        # a busy control plane's writes, a renewal could come too late and lose the lease.
        self._heartbeats: Database | None = None
        self._heartbeats_opening = anyio.Lock()
        self._closed = False

    @classmethod
    async def open(
        cls,
        url: str | None = None,
        *,
        statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT,
        retry_for: float = DEFAULT_RETRY_FOR,
    ) -> Store:
        """Open (and migrate) ``sqlite:///PATH``, ``postgresql://...``, or the default file.

        ``statement_timeout`` bounds every transaction, in seconds. ``retry_for`` is how long
        a store that becomes unavailable once opened (a dropped connection, a restarting
        server, a writer holding the lock) is tried again before a call fails, in seconds.

        Raises:
            ConfigError: the URL is not a store's.
            StoreError: the store cannot be opened (reached, made, trusted), or it was
                written by a newer nodeprov.
        """
        if url is None:
            url = f"sqlite:///{default_store_path()}"
        db = await _open_database(url, statement_timeout, retry_for)
        try:
            await migrate(db)
        except BaseException:
            await db.aclose()
            raise
        return cls(db, url, statement_timeout, retry_for)

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            async with self._heartbeats_opening:  # a renewal's connection being opened is closed too
                self._closed = True
                heartbeats, self._heartbeats = self._heartbeats, None
            try:
                if heartbeats is not None:
                    await heartbeats.aclose()
            finally:
                await self.db.aclose()

    @cached_property
    def leases(self) -> LeaseStore:
        """Control planes' leases (a renewal on a connection of its own)."""
        return LeaseStore(self.db, self._heartbeat_db)

    async def _heartbeat_db(self) -> Database:
        async with self._heartbeats_opening:
            if self._closed:
                raise StoreError("the store is closed")
            if self._heartbeats is None:
                self._heartbeats = await _open_database(self.url, self._statement_timeout, self._retry_for)
            return self._heartbeats

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- runs --------------------------------------------------------------------------

    async def create_run(self, run: RunRecord, images: Sequence[ImageBlock] = ()) -> None:
        """Store a new run, and the images its prompt names, in one transaction."""
        if not images:  # one statement: a transaction of its own, holding no connection across calls
            await self.db.execute(*insert("runs", run))
            return

        async def create(tx: Transaction) -> None:
            await tx.execute(*insert("runs", run))
            await ImageStore.put_in(tx, images, run_id=run.id)

        await self.db.transact(create)

    async def update_run(
        self,
        run_id: str,
        *,
        expect_states: Collection[str] = (),
        expect_owner: str | None = None,
        **changes: Any,
    ) -> bool:
        """Change a run's fields; with ``expect_states`` (and ``expect_owner``), only if it is
        in one of those states (held by that owner): a compare-and-set, so exactly one of
        several racing control planes wins. Returns whether the row changed."""
        allowed = {f.name for f in fields(RunRecord)} - {"id", "created_at"}
        unknown = set(changes) - allowed
        if unknown:
            raise ConfigError(f"unknown run fields: {sorted(unknown)}")
        assignments = ", ".join(f"{name} = ?" for name in changes)
        sql = f"UPDATE runs SET {assignments}, updated_at = ? WHERE id = ?"
        params: list[Any] = [*changes.values(), now(), run_id]
        if expect_states:
            sql += f" AND state IN ({marks(tuple(expect_states))})"
            params += list(expect_states)
        if expect_owner is not None:
            sql += " AND owner = ?"
            params.append(expect_owner)
        return await self.db.execute(sql, params) == 1

    async def pause_requests(self, owner: str) -> list[tuple[str, str]]:
        """``(run_id, request)`` of the runs held by ``owner`` that someone asked to pause."""
        rows = await self.db.fetchall(
            "SELECT id, pause_request FROM runs WHERE owner = ? AND pause_request IS NOT NULL", (owner,)
        )
        return [(str(row[0]), str(row[1])) for row in rows]

    async def run(self, run_id: str) -> RunRecord | None:
        row = await self.db.fetchone(f"SELECT {columns(RunRecord)} FROM runs WHERE id = ?", (run_id,))
        record: RunRecord | None = as_record(RunRecord, row)
        return record

    async def runs(self, *, states: tuple[str, ...] = (), tenant: str | None = None) -> list[RunRecord]:
        """The runs in ``states`` (all, without), oldest first; with ``tenant``, those the
        HTTP API made for it alone (see :class:`~nodeprov.store.api.OwnerStore`; the
        library's and the CLI's are :data:`DEFAULT_TENANT`'s)."""
        conditions = [f"state IN ({marks(states)})"] if states else []
        params: list[Any] = list(states)
        if tenant is not None:
            conditions.append(OwnerStore.owned_by("run", "runs.id"))
            params += [tenant, tenant]
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        rows = await self.db.fetchall(
            f"SELECT {columns(RunRecord)} FROM runs {where} ORDER BY created_at", params
        )
        return [as_record(RunRecord, row) for row in rows]

    async def run_counts(self) -> dict[str, int]:
        """How many runs are in each state (states with none are absent)."""
        rows = await self.db.fetchall("SELECT state, COUNT(*) FROM runs GROUP BY state")
        return {str(state): int(count) for state, count in rows}

    async def clear_pause_request(self, run_id: str, request: str) -> bool:
        """Withdraw ``request`` if it is still the run's pending pause request."""
        return (
            await self.db.execute(
                "UPDATE runs SET pause_request = NULL WHERE id = ? AND pause_request = ?", (run_id, request)
            )
            == 1
        )

    async def clear_stale_pause_requests(self, states: Collection[str]) -> int:
        """Withdraw the pause requests of runs in ``states`` (nobody will serve them)."""
        return await self.db.execute(
            f"UPDATE runs SET pause_request = NULL WHERE pause_request IS NOT NULL"
            f" AND state IN ({marks(tuple(states))})",
            tuple(states),
        )

    # -- nodes -----------------------------------------------------------------------

    async def node_intent(self, node_id: str, provider: str, run_id: str) -> None:
        """Record a node about to be provisioned, before anything exists on the platform."""
        await self.db.execute(
            "INSERT INTO nodes (id, provider, run_id, state, created_at, updated_at)"
            " VALUES (?, ?, ?, 'intent', ?, ?)",
            (node_id, provider, run_id, now(), now()),
        )

    async def set_node_state(self, node_id: str, state: NodeRecordState) -> None:
        """Set a node's state whatever it was; a move that may race another is :meth:`move_node`."""
        _check_node_state(state)
        await self.db.execute(
            "UPDATE nodes SET state = ?, keep_until_ms = NULL, updated_at = ? WHERE id = ?",
            (state, now(), node_id),
        )

    async def move_node(
        self,
        node_id: str,
        expect: Collection[NodeRecordState],
        state: NodeRecordState,
        *,
        keep_for: float | None = None,
    ) -> bool:
        """Move a node to ``state`` if it is in one of the ``expect`` states: a compare-and-set,
        so of two racing movers (a pause keeping the node, a reconcile destroying it) exactly
        one wins. Moving to ``kept`` takes ``keep_for``, the seconds it is kept from now (the
        database's clock). Returns whether the node moved."""
        _check_node_state(state, *expect)
        if (state is NodeRecordState.KEPT) != (keep_for is not None):
            raise ConfigError("a node is kept for a time, and only a kept one")
        until = f"{self.db.now_ms} + ?" if keep_for is not None else "NULL"
        params: list[Any] = [state, *([int(keep_for * 1000)] if keep_for is not None else []), now(), node_id]
        moved = await self.db.execute(
            f"UPDATE nodes SET state = ?, keep_until_ms = {until}, updated_at = ?"
            f" WHERE id = ? AND state IN ({marks(tuple(expect))})",
            [*params, *expect],
        )
        return moved == 1

    async def node(self, node_id: str) -> NodeRecord | None:
        row = await self.db.fetchone(f"SELECT {columns(NodeRecord)} FROM nodes WHERE id = ?", (node_id,))
        record: NodeRecord | None = as_record(NodeRecord, row)
        return record

    async def nodes(
        self, *, states: Collection[NodeRecordState], run_id: str | None = None
    ) -> list[NodeRecord]:
        """The nodes in ``states`` (of run ``run_id`` only, when given), oldest first."""
        states = tuple(states)
        _check_node_state(*states)
        sql = f"SELECT {columns(NodeRecord)} FROM nodes WHERE state IN ({marks(states)})"
        params: list[Any] = list(states)
        if run_id is not None:
            sql += " AND run_id = ?"
            params.append(run_id)
        rows = await self.db.fetchall(sql + " ORDER BY created_at", params)
        return [as_record(NodeRecord, row) for row in rows]

    async def node_counts(self) -> dict[str, int]:
        """How many runs' nodes the store holds (being made, live or kept), by provider."""
        rows = await self.db.fetchall(
            "SELECT provider, COUNT(*) FROM nodes WHERE state IN ('intent', 'live', 'kept') GROUP BY provider"
        )
        return {str(provider): int(count) for provider, count in rows}

    async def clock_ms(self) -> int:
        """The database's clock in epoch milliseconds: the one leases and kept nodes go by."""
        row = await self.db.fetchone(f"SELECT {self.db.now_ms}")
        assert row is not None  # noqa: S101 - narrows a type: an invariant, never a check of input
        return int(row[0])

    # -- run events ----------------------------------------------------------------------

    async def append_events(
        self,
        events: Sequence[EventRecord],
        transcripts: Sequence[EntryBatch] = (),
        *,
        writer: str | None = None,
    ) -> None:
        """Store run events and batches of transcript entries (each entry with its idempotency
        key, see :func:`~nodeprov.store.entries.keyed`; in the order given) in one transaction,
        grouped with other writers' (one worker-thread hop for the whole batch). Durable once
        this returns. Exactly once: an event whose ``(run_id, seq)`` is stored already, and
        an entry whose key is, are skipped, so a batch whose fate was unknown (a timeout, a
        cancelled caller, a connection lost as it committed) is written again as it was.

        ``writer``, a control plane's owner name: only the events of runs it owns are stored,
        the others skipped. A control plane judged gone while it still drives (its lease
        expired under load) writes nothing more of the runs another one took over or ended,
        so a run's events never hold two drives' at once. ``None``: whoever owns the run.

        Raises:
            StoreError: the database failed: nothing of the call was written, or (the error
                says so) it may have been, and writing it again is safe.
        """
        if not events and not transcripts:
            return
        fields = "j.value->>0, CAST(j.value->>1 AS BIGINT), j.value->>2, j.value->>3, j.value->>4"
        sql = f"INSERT INTO run_events ({columns(EventRecord)}) SELECT {fields} FROM {self.db.json_rows}"
        if writer is None:
            sql += " WHERE TRUE"  # SQLite's upsert needs a WHERE after INSERT ... SELECT
        else:
            sql += " WHERE EXISTS (SELECT 1 FROM runs WHERE id = j.value->>0 AND owner = ?)"
        sql += " ON CONFLICT (run_id, seq) DO NOTHING"

        def write(statements: Statements) -> None:
            if events:
                rows = [check_params((e.run_id, e.seq, e.kind, e.at, e.body)) for e in events]
                statements.execute(sql, (_json.dumps(rows), *([] if writer is None else [writer])))
            self.transcripts.append_in(statements, transcripts)

        await self.db.grouped(write)

    async def events(self, run_id: str, *, after: int = 0, limit: int = 1000) -> list[EventRecord]:
        """The run's events with ``seq`` above ``after``, in order, at most ``limit``."""
        rows = await self.db.fetchall(
            f"SELECT {columns(EventRecord)} FROM run_events"
            " WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (run_id, after, limit),
        )
        return [as_record(EventRecord, row) for row in rows]

    async def last_event_seq(self, run_id: str) -> int:
        row = await self.db.fetchone("SELECT MAX(seq) FROM run_events WHERE run_id = ?", (run_id,))
        return int(row[0]) if row is not None and row[0] is not None else 0

    # -- snapshots ---------------------------------------------------------------------

    async def save_snapshot(self, snapshot: SnapshotRecord) -> None:
        await self.db.execute(*insert("snapshots", snapshot))

    async def claim_snapshot(self, token: str) -> SnapshotRecord:
        """Take a resume token: exactly once, even with several control planes racing.

        Raises:
            TokenError: the token is unknown or was used already.
        """
        stamp = now()

        async def claim(tx: Transaction) -> tuple[int, list[Row]]:
            taken = await tx.execute(
                "UPDATE snapshots SET used_at = ? WHERE token = ? AND used_at IS NULL", (stamp, token)
            )
            rows = await tx.fetchall(
                f"SELECT {columns(SnapshotRecord)} FROM snapshots WHERE token = ?", (token,)
            )
            return taken, rows

        taken, rows = await self.db.transact(claim)
        if not rows:
            raise TokenError("unknown resume token")
        if taken != 1:
            raise TokenError(f"resume token of run {rows[0][1]} was used already")
        snapshot: SnapshotRecord = as_record(SnapshotRecord, rows[0])
        return snapshot

    async def use_snapshots(self, run_id: str) -> int:
        """Use up every unused snapshot of ``run_id`` (its resume has begun: a token of an
        earlier pause must not fork it, nor keep a node for it). Returns how many."""
        return await self.db.execute(
            "UPDATE snapshots SET used_at = ? WHERE run_id = ? AND used_at IS NULL", (now(), run_id)
        )

    async def peek_snapshot(self, token: str) -> SnapshotRecord | None:
        """A snapshot by token, without taking it."""
        row = await self.db.fetchone(
            f"SELECT {columns(SnapshotRecord)} FROM snapshots WHERE token = ?", (token,)
        )
        snapshot: SnapshotRecord | None = as_record(SnapshotRecord, row)
        return snapshot

    async def snapshots(self, run_id: str) -> list[SnapshotRecord]:
        rows = await self.db.fetchall(
            f"SELECT {columns(SnapshotRecord)} FROM snapshots WHERE run_id = ? ORDER BY created_at",
            (run_id,),
        )
        return [as_record(SnapshotRecord, row) for row in rows]


def _check_node_state(*states: NodeRecordState) -> None:
    unknown = set(states) - set(NodeRecordState)
    if unknown:
        raise ConfigError(f"unknown node states: {sorted(unknown)}")


def dumps(value: Mapping[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, default=str)
