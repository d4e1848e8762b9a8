"""Agent transcripts off the node: the Claude Agent SDK's ``SessionStore`` protocol on the
store's database (SQLite or PostgreSQL), so that a run whose node died can resume elsewhere.

Entries are opaque JSON objects kept in append order; an entry's ``uuid`` makes appends
idempotent. Summaries are folded inside ``append`` with the SDK's own fold, under the
database's write lock (SQLite) or a per-session advisory lock (PostgreSQL).
"""

from __future__ import annotations

import json
import time
from typing import cast

from claude_agent_sdk import SessionKey, SessionStore

# Pinned with the SDK (see pyproject.toml): the fold keeps summaries the SDK can read.
from claude_agent_sdk._internal.session_summary import fold_session_summary
from claude_agent_sdk.types import (
    SessionListSubkeysKey,
    SessionStoreEntry,
    SessionStoreListEntry,
    SessionSummaryEntry,
)

from ._db import Database, Statements

__all__ = ["TranscriptStore"]


def _subpath(key: SessionKey | SessionListSubkeysKey) -> str:
    return str(key.get("subpath") or "")


class TranscriptStore(SessionStore):
    """``SessionStore`` on the nodeprov store; pass it as ``ClaudeAgentOptions.session_store``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Durable once this returns; committed together with other runs' frames."""
        if entries:
            await self._db.grouped(lambda statements: self.append_in(statements, key, entries))

    def append_in(self, statements: Statements, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """:meth:`append` as part of a group commit's work (in its worker thread, so that
        encoding and folding stay off the event loop)."""
        project, session, subpath = key["project_key"], key["session_id"], _subpath(key)
        if self._db.dialect == "postgres":
            lock = f"{len(project)}:{project}/{session}"  # unambiguous, and text may not hold NUL
            statements.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (lock,))
        written = int(time.time() * 1000)
        statements.executemany(
            "INSERT INTO transcript_entries (project_key, session_id, subpath, uuid, entry, written_ms)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [(project, session, subpath, _uuid(entry), json.dumps(entry), written) for entry in entries],
        )
        if subpath:
            return  # subagent transcripts do not feed the session's summary
        rows = statements.fetchall(
            "SELECT mtime, data FROM transcript_summaries WHERE project_key = ? AND session_id = ?",
            (project, session),
        )
        previous = (
            cast(
                SessionSummaryEntry,
                {"session_id": session, "mtime": rows[0][0], "data": json.loads(rows[0][1])},
            )
            if rows
            else None
        )
        summary = fold_session_summary(previous, key, entries)
        statements.execute(
            "INSERT INTO transcript_summaries (project_key, session_id, mtime, data) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (project_key, session_id)"
            " DO UPDATE SET mtime = excluded.mtime, data = excluded.data",
            (project, session, written, json.dumps(summary["data"])),
        )

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        rows = await self._db.fetchall(
            "SELECT entry FROM transcript_entries WHERE project_key = ? AND session_id = ? AND subpath = ?"
            " ORDER BY seq",
            (key["project_key"], key["session_id"], _subpath(key)),
        )
        return [json.loads(row[0]) for row in rows] if rows else None

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        rows = await self._db.fetchall(
            "SELECT session_id, MAX(written_ms) FROM transcript_entries"
            " WHERE project_key = ? AND subpath = '' GROUP BY session_id",
            (project_key,),
        )
        return [{"session_id": str(row[0]), "mtime": int(row[1])} for row in rows]

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        rows = await self._db.fetchall(
            "SELECT session_id, mtime, data FROM transcript_summaries WHERE project_key = ?", (project_key,)
        )
        return [{"session_id": str(r[0]), "mtime": int(r[1]), "data": json.loads(r[2])} for r in rows]

    async def delete(self, key: SessionKey) -> None:
        project, session, subpath = key["project_key"], key["session_id"], _subpath(key)
        async with self._db.transaction() as tx:
            if subpath:
                await tx.execute(
                    "DELETE FROM transcript_entries WHERE project_key = ? AND session_id = ? AND subpath = ?",
                    (project, session, subpath),
                )
                return
            # The main transcript takes its subagents' transcripts and its summary with it.
            for table in ("transcript_entries", "transcript_summaries"):
                await tx.execute(
                    f"DELETE FROM {table} WHERE project_key = ? AND session_id = ?", (project, session)
                )

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        rows = await self._db.fetchall(
            "SELECT DISTINCT subpath FROM transcript_entries WHERE project_key = ? AND session_id = ?"
            " AND subpath != ''",
            (key["project_key"], key["session_id"]),
        )
        return sorted(str(row[0]) for row in rows)


def _uuid(entry: SessionStoreEntry) -> str | None:
    uuid = entry.get("uuid")
    return uuid if isinstance(uuid, str) else None
