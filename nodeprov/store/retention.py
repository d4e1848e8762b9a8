"""Retention (:class:`Retention`): what a store deletes so that nothing in it grows for ever.

:meth:`Retention.prune` deletes the runs in the given states (the runs layer passes those
nobody drives: paused, finished, failed) last changed before a cutoff, and whose nodes the
store no longer holds, each with all it owns: its events, snapshots, node records, its
claims of pool nodes, its references to images, its owner row (the HTTP API's tenant),
and, once no run is left in them, its agent's transcript and summary. Then what no run
names any more: sessions and workspaces left empty, images, the pool nodes long destroyed
or claimed, the idempotency keys, audit entries and API nodes' owner rows past the cutoff.
Dead leases are compacted apart (:meth:`~nodeprov.store.leases.LeaseStore.compact`), all
the time.

Runs go in batches, each its own short transaction that takes its runs again under lock
(a resume that moves one meanwhile wins: the run is left), so a store years old is pruned
without holding up the control planes that share it. ``dry_run`` counts instead, in one
transaction rolled back.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, fields
from typing import Any

from ._db import Database, Row, Transaction
from ._rows import marks

__all__ = ["PruneReport", "Retention"]

_HELD_NODES = ("intent", "live", "kept", "destroying")
_SPENT_POOL_NODES = ("claimed", "destroyed")
_BATCH = 200


@dataclass
class PruneReport:
    """How many rows :meth:`Retention.prune` deleted (or, with ``dry_run``, would delete)."""

    runs: int = 0
    events: int = 0
    snapshots: int = 0
    nodes: int = 0
    transcript_entries: int = 0
    sessions: int = 0
    workspaces: int = 0
    images: int = 0
    pool_nodes: int = 0
    idempotency_keys: int = 0
    audit: int = 0
    checkpoints: int = 0
    dry_run: bool = False

    def add(self, other: PruneReport) -> None:
        for each in fields(self):
            if each.name != "dry_run":
                setattr(self, each.name, getattr(self, each.name) + getattr(other, each.name))

    def as_json(self) -> dict[str, int | bool]:
        return {each.name: getattr(self, each.name) for each in fields(self)}


class _DryRunError(Exception):
    """Rolls a dry run's batch back, carrying its counts."""

    def __init__(self, report: PruneReport) -> None:
        super().__init__("dry run")
        self.report = report


def _page(states: tuple[str, ...], before: str, after: tuple[str, str]) -> tuple[str, tuple[Any, ...]]:
    """The next batch of runs to prune, after ``after`` (updated_at, id), oldest first."""
    return (
        f"SELECT updated_at, id FROM runs WHERE state IN ({marks(states)}) AND updated_at < ?"
        " AND (updated_at > ? OR (updated_at = ? AND id > ?)) ORDER BY updated_at, id LIMIT ?",
        (*states, before, after[0], after[0], after[1], _BATCH),
    )


def _ids(page: list[Row]) -> list[str]:
    return [str(row[1]) for row in page]


class Retention:
    """Retention on the store's database. Every method raises
    :class:`~nodeprov.errors.StoreError` when the database fails."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._lock = " FOR UPDATE" if db.dialect == "postgres" else ""  # SQLite: one writer at a time

    async def prune(self, *, before: str, states: Collection[str], dry_run: bool = False) -> PruneReport:
        """Delete what was last changed before ``before`` (a timestamp as the store writes
        them, ISO UTC) and is over: the runs in ``states`` and all they own, then what no
        run names (see the module). Returns how many rows of each kind went. A dry run does
        it all in one transaction and rolls it back: exact counts, for the store's write
        lock while it counts.

        Raises:
            StoreError: the store failed (what earlier batches deleted stays deleted).
        """
        states = tuple(states)
        if dry_run:
            try:
                await self._db.transact(lambda tx: self._everything(tx, before, states))
            except _DryRunError as counted:
                return counted.report
        report = PruneReport()
        after = ("", "")
        while page := await self._db.fetchall(*_page(states, before, after)):
            after = (str(page[-1][0]), str(page[-1][1]))
            ids = _ids(page)

            async def runs(tx: Transaction, ids: list[str] = ids) -> PruneReport:
                counted = PruneReport()
                await self._runs(tx, ids, before, states, counted)
                return counted

            report.add(await self._db.transact(runs))

        async def unnamed(tx: Transaction) -> PruneReport:
            counted = PruneReport()
            await self._unnamed(tx, before, counted)
            return counted

        report.add(await self._db.transact(unnamed))
        return report

    async def _everything(self, tx: Transaction, before: str, states: tuple[str, ...]) -> None:
        report = PruneReport(dry_run=True)
        after = ("", "")
        while page := await tx.fetchall(*_page(states, before, after)):
            after = (str(page[-1][0]), str(page[-1][1]))
            await self._runs(tx, _ids(page), before, states, report)
        await self._unnamed(tx, before, report)
        raise _DryRunError(report)

    async def _runs(
        self, tx: Transaction, ids: list[str], before: str, states: tuple[str, ...], report: PruneReport
    ) -> None:
        held = _HELD_NODES
        rows: list[Row] = await tx.fetchall(
            "SELECT id, session_id, project_key, agent_session_id FROM runs"
            f" WHERE id IN ({marks(tuple(ids))}) AND state IN ({marks(states)}) AND updated_at < ?"
            " AND NOT EXISTS (SELECT 1 FROM nodes WHERE nodes.run_id = runs.id"
            f" AND nodes.state IN ({marks(held)})){self._lock}",
            (*ids, *states, before, *held),
        )
        if not rows:
            return
        gone = tuple(str(row[0]) for row in rows)
        runs = f"run_id IN ({marks(gone)})"
        report.events += await tx.execute(f"DELETE FROM run_events WHERE {runs}", gone)
        report.snapshots += await tx.execute(f"DELETE FROM snapshots WHERE {runs}", gone)
        report.checkpoints += await tx.execute(f"DELETE FROM checkpoints WHERE {runs}", gone)
        report.nodes += await tx.execute(f"DELETE FROM nodes WHERE {runs}", gone)
        report.pool_nodes += await tx.execute(
            f"DELETE FROM pool_nodes WHERE {runs} AND state IN ({marks(_SPENT_POOL_NODES)})",
            (*gone, *_SPENT_POOL_NODES),
        )
        await tx.execute(f"DELETE FROM image_refs WHERE {runs}", gone)
        await tx.execute(f"DELETE FROM api_owners WHERE kind = 'run' AND id IN ({marks(gone)})", gone)
        report.runs += await tx.execute(f"DELETE FROM runs WHERE id IN ({marks(gone)})", gone)
        for project, agent_session in {(row[2], row[3]) for row in rows if row[2] and row[3]}:
            if await tx.fetchall(
                "SELECT 1 FROM runs WHERE project_key = ? AND agent_session_id = ? LIMIT 1",
                (project, agent_session),
            ):
                continue  # another run of the conversation is kept
            key = (project, agent_session)
            report.transcript_entries += await tx.execute(
                "DELETE FROM transcript_entries WHERE project_key = ? AND session_id = ?", key
            )
            await tx.execute("DELETE FROM transcript_summaries WHERE project_key = ? AND session_id = ?", key)

    async def _unnamed(self, tx: Transaction, before: str, report: PruneReport) -> None:
        # A session made before the cutoff with no run left, and a workspace with no session.
        # (A run being started in a workspace idle that long races this; it fails before it
        # provisions anything, and is started again.)
        report.sessions += await tx.execute(
            "DELETE FROM sessions WHERE created_at < ?"
            " AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.session_id = sessions.id)",
            (before,),
        )
        report.workspaces += await tx.execute(
            "DELETE FROM workspaces WHERE created_at < ?"
            " AND NOT EXISTS (SELECT 1 FROM sessions WHERE sessions.workspace_id = workspaces.id)",
            (before,),
        )
        report.images += await tx.execute(
            "DELETE FROM images WHERE created_at < ?"
            " AND NOT EXISTS (SELECT 1 FROM image_refs WHERE image_refs.sha256 = images.sha256)",
            (before,),
        )
        report.pool_nodes += await tx.execute(
            f"DELETE FROM pool_nodes WHERE state IN ({marks(_SPENT_POOL_NODES)}) AND updated_at < ?",
            (*_SPENT_POOL_NODES, before),
        )
        report.idempotency_keys += await tx.execute(
            "DELETE FROM idempotency_keys WHERE created_at < ?", (before,)
        )
        report.audit += await tx.execute("DELETE FROM audit WHERE at < ?", (before,))
        await tx.execute("DELETE FROM api_owners WHERE expires_at < ?", (before,))  # nodes long gone

    async def due(self, every: float) -> bool:
        """Whether this caller should prune now: at most once every ``every`` seconds per
        store, whichever of the control planes sharing it asks first (a compare-and-set)."""
        now_ms = self._db.now_ms
        taken = await self._db.execute(
            f"INSERT INTO store_meta (key, value) VALUES ('pruned_at_ms', CAST({now_ms} AS TEXT))"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
            f" WHERE CAST(store_meta.value AS BIGINT) <= {now_ms} - ?",
            (int(every * 1000),),
        )
        return taken == 1
