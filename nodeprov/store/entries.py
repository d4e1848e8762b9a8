"""Agents' session state off the node: entries (JSON objects, one per line of an agent's
state files) in append order, under a key of the agent's (:class:`EntryKey`), so that a run
whose node died can resume elsewhere. The store knows entries, not agents: what an agent's
SDK wants on top (the Claude Agent SDK's ``SessionStore``, with its summaries) is an adapter
in that agent's package.

Appends are idempotent by each entry's key: its ``uuid`` where it has one, else one its
writer gave it (:func:`entry_key`), so a batch whose fate was unknown (a timeout, a
connection lost as it committed) can be written again without storing anything twice. A
writer may keep a summary per session beside the entries, folded over what each append
really added (:data:`Fold`), under the database's write lock (SQLite) or a per-session
advisory lock (PostgreSQL).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from .. import _json
from ._db import Database, Statements, Transaction

__all__ = [
    "EntryBatch",
    "EntryKey",
    "EntryStore",
    "Fold",
    "KeyedEntry",
    "SessionListing",
    "Summary",
    "entry_key",
    "keyed",
]

_CHUNK = 500  # keys per lookup: well under every backend's limit on parameters

KeyedEntry = tuple[str, Any]
"""An entry with its idempotency key (see :func:`entry_key`)."""


class EntryKey(TypedDict):
    """Where entries are kept: the agent's ``project_key``, its session id, and a ``subpath``
    for each further file of the session (empty or absent: the main one)."""

    project_key: str
    session_id: str
    subpath: NotRequired[str]


class Summary(TypedDict):
    """A session's summary as a writer's :data:`Fold` keeps it: ``data`` is the fold's own,
    ``mtime`` when it was last folded (epoch milliseconds)."""

    session_id: str
    mtime: int
    data: dict[str, Any]


Fold = Callable[[Summary | None, EntryKey, list[Any]], Summary]
"""Fold entries just added to a session's main transcript into its summary (``None``: it
has none yet); pure, called in the append's transaction."""


@dataclass
class EntryBatch:
    """Entries to append under ``key`` (each with its idempotency key), folded into the
    session's summary by ``fold`` when given: one element of a grouped write (see
    :meth:`~nodeprov.store.Store.append_events`)."""

    key: EntryKey
    entries: list[KeyedEntry]
    fold: Fold | None = None


@dataclass(frozen=True)
class SessionListing:
    """A session that has entries, and when its main transcript was last written (epoch ms)."""

    session_id: str
    mtime: int


def entry_key(entry: Any) -> str:
    """The idempotency key of an entry: its ``uuid``, else a fresh random key. An entry must
    keep its key however often it is written: key it once (:func:`keyed`)."""
    uuid = entry.get("uuid") if isinstance(entry, dict) else None
    return uuid if isinstance(uuid, str) else f"nodeprov:{secrets.token_hex(16)}"


def keyed(entries: Sequence[Any]) -> list[KeyedEntry]:
    """``entries``, each with its idempotency key."""
    return [(entry_key(entry), entry) for entry in entries]


def _subpath(key: EntryKey) -> str:
    return str(key.get("subpath") or "")


class EntryStore:
    """Entries on the store's database (see the module). Every method raises
    :class:`~nodeprov.errors.StoreError` when the database fails."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def append(self, key: EntryKey, entries: list[Any], *, fold: Fold | None = None) -> None:
        """Append ``entries`` under ``key`` (an entry without a ``uuid`` gets a key of its own
        here), durable once this returns; committed together with other runs' frames."""
        if entries:
            pairs = keyed(entries)
            await self._db.grouped(lambda statements: self.append_in(statements, key, pairs, fold=fold))

    def append_in(
        self,
        statements: Statements,
        key: EntryKey,
        entries: Sequence[KeyedEntry],
        *,
        fold: Fold | None = None,
    ) -> None:
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
            [(project, session, subpath, k, _json.dumps(entry), written) for k, entry in added],
        )
        if fold is None or subpath:
            return  # subagent transcripts do not feed the session's summary
        rows = statements.fetchall(
            "SELECT mtime, data FROM transcript_summaries WHERE project_key = ? AND session_id = ?",
            (project, session),
        )
        previous: Summary | None = (
            {"session_id": session, "mtime": rows[0][0], "data": _json.loads(rows[0][1])} if rows else None
        )
        summary = fold(previous, key, [entry for _, entry in added])
        statements.execute(
            "INSERT INTO transcript_summaries (project_key, session_id, mtime, data) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (project_key, session_id)"
            " DO UPDATE SET mtime = excluded.mtime, data = excluded.data",
            (project, session, written, _json.dumps(summary["data"])),
        )

    async def replace(self, key: EntryKey, entries: list[Any], *, fold: Fold | None = None) -> None:
        """Make ``entries`` all that ``key`` holds, in one transaction (a reader sees the old
        entries or the new ones, never neither). Replacing a main transcript keeps its
        subagents' transcripts, and drops its summary (folded anew with ``fold``)."""
        await self._db.grouped(lambda statements: self.replace_in(statements, key, entries, fold=fold))

    def replace_in(
        self, statements: Statements, key: EntryKey, entries: list[Any], *, fold: Fold | None = None
    ) -> None:
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
        self.append_in(statements, key, keyed(entries), fold=fold)

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

    async def load(self, key: EntryKey) -> list[Any] | None:
        """The entries under ``key`` in append order; ``None`` if there are none."""
        rows = await self._db.fetchall(
            "SELECT entry FROM transcript_entries WHERE project_key = ? AND session_id = ? AND subpath = ?"
            " ORDER BY seq",
            (key["project_key"], key["session_id"], _subpath(key)),
        )
        return [_json.loads(row[0]) for row in rows] if rows else None

    async def sessions(self, project_key: str) -> list[SessionListing]:
        """The sessions of ``project_key`` with a main transcript."""
        rows = await self._db.fetchall(
            "SELECT session_id, MAX(written_ms) FROM transcript_entries"
            " WHERE project_key = ? AND subpath = '' GROUP BY session_id",
            (project_key,),
        )
        return [SessionListing(str(row[0]), int(row[1])) for row in rows]

    async def summaries(self, project_key: str) -> list[Summary]:
        """The summaries kept for sessions of ``project_key`` (only where a writer folded one)."""
        rows = await self._db.fetchall(
            "SELECT session_id, mtime, data FROM transcript_summaries WHERE project_key = ?", (project_key,)
        )
        return [{"session_id": str(r[0]), "mtime": int(r[1]), "data": _json.loads(r[2])} for r in rows]

    async def delete(self, key: EntryKey) -> None:
        """Delete what ``key`` holds; a main transcript takes its subagents' transcripts and
        its summary with it."""
        project, session, subpath = key["project_key"], key["session_id"], _subpath(key)

        async def delete(tx: Transaction) -> None:
            if subpath:
                await tx.execute(
                    "DELETE FROM transcript_entries WHERE project_key = ? AND session_id = ? AND subpath = ?",
                    (project, session, subpath),
                )
                return
            for table in ("transcript_entries", "transcript_summaries"):
                await tx.execute(
                    f"DELETE FROM {table} WHERE project_key = ? AND session_id = ?", (project, session)
                )

        await self._db.transact(delete)

    async def subpaths(self, key: EntryKey) -> list[str]:
        """The ``subpath`` values stored beside ``key``'s main transcript, sorted."""
        rows = await self._db.fetchall(
            "SELECT DISTINCT subpath FROM transcript_entries WHERE project_key = ? AND session_id = ?"
            " AND subpath != ''",
            (key["project_key"], key["session_id"]),
        )
        return sorted(str(row[0]) for row in rows)
