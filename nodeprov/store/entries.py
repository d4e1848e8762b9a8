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
from ._db import Database, Params, Statements, Transaction, check_params

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


def _where(key: EntryKey) -> tuple[str, str, str]:
    return key["project_key"], key["session_id"], _subpath(key)


class EntryStore:
    """Entries on the store's database (see the module). Every method raises
    :class:`~nodeprov.errors.StoreError` when the database fails."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def append(self, key: EntryKey, entries: list[Any], *, fold: Fold | None = None) -> None:
        """Append ``entries`` under ``key`` (an entry without a ``uuid`` gets a key of its own
        here), durable once this returns; committed together with other runs' frames."""
        if entries:
            batch = EntryBatch(key, keyed(entries), fold)
            await self._db.grouped(lambda statements: self.append_in(statements, [batch]))

    def append_in(self, statements: Statements, batches: Sequence[EntryBatch]) -> None:
        """Append the ``batches``' entries as part of a group commit's work, in its thread
        (encoding and folding stay off the event loop): a few statements whatever the number
        of entries and sessions (see :attr:`~nodeprov.store._db.Database.json_rows`). An
        entry whose key is stored already is skipped, and only what is added is folded."""
        wanted = [(*_where(batch.key), key) for batch in batches for key, _ in batch.entries]
        if not wanted:
            return
        for project, session in sorted(
            {(batch.key["project_key"], batch.key["session_id"]) for batch in batches}
        ):
            self._lock(statements, project, session)  # in one order: two writers never deadlock
        rows = self._db.json_rows
        seen = {
            tuple(row)
            for row in statements.fetchall(
                f"SELECT t.project_key, t.session_id, t.subpath, t.uuid FROM {rows} JOIN transcript_entries t"
                " ON t.project_key = j.value->>0 AND t.session_id = j.value->>1"
                " AND t.subpath = j.value->>2 AND t.uuid = j.value->>3",
                (_json.dumps(wanted),),
            )
        }
        added_rows: list[Params] = []
        folded: dict[tuple[str, str], list[tuple[Fold, EntryKey, list[Any]]]] = {}
        for batch in batches:
            where, added = _where(batch.key), []
            for key, entry in batch.entries:
                if (*where, key) not in seen:
                    seen.add((*where, key))
                    added.append(entry)
                    added_rows.append(check_params((*where, key, _json.dumps(entry))))
            if added and batch.fold is not None and not where[2]:  # subagents' do not feed the summary
                folded.setdefault(where[:2], []).append((batch.fold, batch.key, added))
        if not added_rows:
            return
        written = int(time.time() * 1000)
        statements.execute(
            "INSERT INTO transcript_entries (project_key, session_id, subpath, uuid, entry, written_ms)"
            f" SELECT j.value->>0, j.value->>1, j.value->>2, j.value->>3, j.value->>4, ? FROM {rows}"
            " ORDER BY j.key",
            (written, _json.dumps(added_rows)),
        )
        if folded:
            self._fold(statements, folded, written)

    def _fold(
        self,
        statements: Statements,
        folded: dict[tuple[str, str], list[tuple[Fold, EntryKey, list[Any]]]],
        written: int,
    ) -> None:
        """Fold what was added to each session's summary, and store the summaries."""
        rows = self._db.json_rows
        previous: dict[tuple[str, str], Summary] = {
            (str(project), str(session)): {
                "session_id": str(session),
                "mtime": int(mtime),
                "data": _json.loads(data),
            }
            for project, session, mtime, data in statements.fetchall(
                f"SELECT s.project_key, s.session_id, s.mtime, s.data FROM {rows} JOIN transcript_summaries s"
                " ON s.project_key = j.value->>0 AND s.session_id = j.value->>1",
                (_json.dumps(list(folded)),),
            )
        }
        summaries = []
        for session, folds in folded.items():
            summary = previous.get(session)
            for fold, key, added in folds:
                summary = fold(summary, key, added)
            assert summary is not None  # noqa: S101 - narrows a type: each session folded at least once
            summaries.append((*session, _json.dumps(summary["data"])))
        statements.execute(
            "INSERT INTO transcript_summaries (project_key, session_id, mtime, data)"
            f" SELECT j.value->>0, j.value->>1, ?, j.value->>2 FROM {rows} WHERE TRUE"
            " ON CONFLICT (project_key, session_id)"
            " DO UPDATE SET mtime = excluded.mtime, data = excluded.data",
            (written, _json.dumps(summaries)),
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
        self.append_in(statements, [EntryBatch(key, keyed(entries), fold)])

    def _lock(self, statements: Statements, project: str, session: str) -> None:
        """Serialize writers of one session (SQLite: the database's write lock does)."""
        if self._db.dialect == "postgres":
            lock = f"{len(project)}:{project}/{session}"  # unambiguous, and text may not hold NUL
            statements.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (lock,))

    async def load(self, key: EntryKey, *, first: int | None = None) -> list[Any] | None:
        """The entries under ``key`` in append order (with ``first``, that many at most);
        ``None`` if there are none."""
        where: Params = (key["project_key"], key["session_id"], _subpath(key))
        rows = await self._db.fetchall(
            "SELECT entry FROM transcript_entries WHERE project_key = ? AND session_id = ? AND subpath = ?"
            " ORDER BY seq" + ("" if first is None else " LIMIT ?"),
            where if first is None else (*where, first),
        )
        return [_json.loads(row[0]) for row in rows] if rows else None

    async def counts(self, key: EntryKey) -> dict[str, int]:
        """How many entries each file of ``key``'s session holds, by ``subpath`` ("": the main)."""
        rows = await self._db.fetchall(
            "SELECT subpath, COUNT(*) FROM transcript_entries WHERE project_key = ? AND session_id = ?"
            " GROUP BY subpath",
            (key["project_key"], key["session_id"]),
        )
        return {str(subpath): int(count) for subpath, count in rows}

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
