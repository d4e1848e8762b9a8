"""Agent transcripts off the node: the Claude Agent SDK's ``SessionStore`` protocol on the
store's database (SQLite or PostgreSQL), so that a run whose node died can resume elsewhere.

Entries are opaque JSON objects kept in append order. Appends are idempotent by each
entry's key: its ``uuid`` where it has one, else one its writer gave it
(:func:`entry_key`), so a batch whose fate was unknown (a timeout, a connection lost as it
committed) can be written again without storing anything twice. Summaries are folded with
the SDK's own fold, over the entries an append really added, under the database's write lock
(SQLite) or a per-session advisory lock (PostgreSQL).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
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

from . import KeyedEntry, keyed
from ._db import Database, Statements

__all__ = ["TranscriptStore"]

_CHUNK = 500  # keys per lookup: well under every backend's limit on parameters


def _subpath(key: SessionKey | SessionListSubkeysKey) -> str:
    return str(key.get("subpath") or "")


class TranscriptStore(SessionStore):
    """``SessionStore`` on the nodeprov store; pass it as ``ClaudeAgentOptions.session_store``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Durable once this returns; committed together with other runs' frames. (The SDK's
        mirror calls this once per batch, never again with the same entries: an entry
        without a ``uuid`` gets a key of its own here.)"""
        if entries:
            pairs = keyed(entries)
            await self._db.grouped(lambda statements: self.append_in(statements, key, pairs))

    def append_in(self, statements: Statements, key: SessionKey, entries: Sequence[KeyedEntry]) -> None:
        """Append ``entries`` (each with its idempotency key) as part of a group commit's
        work, in its worker thread (encoding and folding stay off the event loop). An entry
        whose key is stored already is skipped, and only what is added is folded."""
        project, session, subpath = key["project_key"], key["session_id"], _subpath(key)
        self._lock(statements, project, session)
        added, seen = [], self._stored_keys(statements, project, session, subpath, [k for k, _ in entries])
        for entry_key_, entry in entries:
            if entry_key_ not in seen:
                seen.add(entry_key_)
                added.append((entry_key_, entry))
        if not added:
            return
        written = int(time.time() * 1000)
        statements.executemany(
            "INSERT INTO transcript_entries (project_key, session_id, subpath, uuid, entry, written_ms)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            [(project, session, subpath, k, json.dumps(entry), written) for k, entry in added],
        )
        entries_added = [entry for _, entry in added]
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
        summary = fold_session_summary(previous, key, entries_added)
        statements.execute(
            "INSERT INTO transcript_summaries (project_key, session_id, mtime, data) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (project_key, session_id)"
            " DO UPDATE SET mtime = excluded.mtime, data = excluded.data",
            (project, session, written, json.dumps(summary["data"])),
        )

    async def replace(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Make ``entries`` all that ``key`` holds, in one transaction (a reader sees the old
        entries or the new ones, never neither). Replacing a main transcript keeps its
        subagents' transcripts and folds its summary anew."""
        await self._db.grouped(lambda statements: self.replace_in(statements, key, entries))

    def replace_in(self, statements: Statements, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """:meth:`replace` as part of a group commit's work."""
        project, session, subpath = key["project_key"], key["session_id"], _subpath(key)
        self._lock(statements, project, session)
        statements.execute(
            "DELETE FROM transcript_entries WHERE project_key = ? AND session_id = ? AND subpath = ?",
            (project, session, subpath),
        )
        if not subpath:
            statements.execute(
                "DELETE FROM transcript_summaries WHERE project_key = ? AND session_id = ?",
                (project, session),
            )
        self.append_in(statements, key, keyed(entries))

    @staticmethod
    def _stored_keys(
        statements: Statements, project: str, session: str, subpath: str, keys: list[str]
    ) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(keys), _CHUNK):
            chunk = keys[start : start + _CHUNK]
            marks = ", ".join("?" for _ in chunk)
            rows = statements.fetchall(
                "SELECT uuid FROM transcript_entries WHERE project_key = ? AND session_id = ?"
                f" AND subpath = ? AND uuid IN ({marks})",
                (project, session, subpath, *chunk),
            )
            found.update(str(row[0]) for row in rows)
        return found

    def _lock(self, statements: Statements, project: str, session: str) -> None:
        """Serialize writers of one session (SQLite: the database's write lock does)."""
        if self._db.dialect == "postgres":
            lock = f"{len(project)}:{project}/{session}"  # unambiguous, and text may not hold NUL
            statements.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (lock,))

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
