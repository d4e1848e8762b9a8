"""Workspaces and their agent sessions in the store: one active session per workspace, for
one agent provider at a time; switching provider archives the old one."""

from __future__ import annotations

from ._db import Database, Row, Transaction
from ._rows import as_record, columns, insert, new_id, now
from .records import SessionRecord

__all__ = ["WorkspaceSessions"]

_ACTIVE = f"SELECT {columns(SessionRecord)} FROM sessions WHERE workspace_id = ? AND state = 'active'"


def _active(rows: list[Row]) -> SessionRecord | None:
    """The workspace's active session, from the rows of :data:`_ACTIVE`."""
    found: SessionRecord | None = as_record(SessionRecord, rows[0] if rows else None)
    return found


class WorkspaceSessions:
    """The store's sessions, on its database; every method raises
    :class:`~nodeprov.errors.StoreError` when the database fails."""

    db: Database

    async def active_session(self, workspace_id: str, provider: str) -> SessionRecord:
        """The workspace's active session for agent ``provider``, made if needed. Switching
        the workspace to another agent provider archives the old session (never deletes it)
        and starts a new one."""
        # Read first, outside a transaction: the usual case, and on SQLite a transaction holds
        # the connection from BEGIN to COMMIT, every other caller's statements waiting, across
        # as many returns to a busy event loop as it has statements.
        active = _active(await self.db.fetchall(_ACTIVE, (workspace_id,)))
        if active is not None and active.provider == provider:
            return active
        stamp, fresh = now(), new_id("ses")

        async def find_or_start(tx: Transaction) -> SessionRecord:
            await tx.execute(
                "INSERT INTO workspaces (id, created_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING",
                (workspace_id, stamp),
            )
            current = _active(await tx.fetchall(_ACTIVE, (workspace_id,)))
            if current is not None and current.provider == provider:
                return current
            if current is not None:
                await tx.execute(
                    "UPDATE sessions SET state = 'archived', archived_at = ? WHERE id = ?",
                    (stamp, current.id),
                )
            session = SessionRecord(fresh, workspace_id, provider, None, "active", stamp, None)
            await tx.execute(*insert("sessions", session))
            return session

        return await self.db.transact(find_or_start)

    async def set_provider_session_id(self, session_id: str, provider_session_id: str) -> None:
        await self.db.execute(
            "UPDATE sessions SET provider_session_id = ? WHERE id = ?", (provider_session_id, session_id)
        )

    async def sessions(self, workspace_id: str | None = None) -> list[SessionRecord]:
        where, params = ("WHERE workspace_id = ?", (workspace_id,)) if workspace_id else ("", ())
        rows = await self.db.fetchall(
            f"SELECT {columns(SessionRecord)} FROM sessions {where} ORDER BY created_at", params
        )
        return [as_record(SessionRecord, row) for row in rows]
