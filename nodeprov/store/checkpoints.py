"""Checkpoints of runs in the store: a row each, recorded once the workspace's manifest and
its packs are in their object store (:mod:`nodeprov.checkpoints`), with the agent's session
at that moment; and, for a store that keeps the objects itself (``store:``), the objects."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .. import _json
from ._db import Database
from ._rows import as_record, columns, insert

__all__ = ["CheckpointRecord", "CheckpointStore"]


@dataclass(frozen=True)
class CheckpointRecord:
    """One checkpoint of run ``run_id``: its workspace (``manifest``, an object of the store
    at ``objects``, with ``packs`` the objects it names) and the agent's session then
    (``agent_session_id``, archived under ``project_key``, of which ``session_counts``).
    ``seq`` counts the run's checkpoints from 1; ``turn`` the turns the run had begun;
    ``reason`` is ``pause``, ``turn`` or ``request``, or ``fork`` or ``rewind`` for where a
    fork or a rewind began (another checkpoint's workspace, its ``parent``, shared);
    ``changed`` the paths added, modified and removed since the checkpoint before
    (``parent``), as JSON: counts and the first paths of each."""

    id: str
    run_id: str
    seq: int
    turn: int
    reason: str
    created_at: str
    objects: str
    manifest: str
    packs: str  # a JSON list
    files: int
    size: int
    stored: int
    changed: str
    parent: str | None
    agent_session_id: str | None
    project_key: str | None
    session_counts: str | None
    """How many entries each file of the agent's session held then (a JSON object by
    subpath, "" the main; None: none was archived): where a fork cuts the session."""

    @property
    def pack_names(self) -> list[str]:
        return [str(name) for name in _json.loads(self.packs)]


class CheckpointStore:
    """Checkpoints on the store's database. Every method raises
    :class:`~nodeprov.errors.StoreError` when the database fails."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(self, record: CheckpointRecord) -> bool:
        """Record ``record`` (its ``seq`` the run's next); False if the run has one of that
        ``seq`` already (another writer came first: number it again)."""
        sql, values = insert("checkpoints", record)
        return await self._db.execute(sql + " ON CONFLICT DO NOTHING", values) == 1

    async def of_run(self, run_id: str) -> list[CheckpointRecord]:
        """The run's checkpoints, the first first."""
        rows = await self._db.fetchall(
            f"SELECT {columns(CheckpointRecord)} FROM checkpoints WHERE run_id = ? ORDER BY seq", (run_id,)
        )
        return [as_record(CheckpointRecord, row) for row in rows]

    async def get(self, checkpoint_id: str) -> CheckpointRecord | None:
        row = await self._db.fetchone(
            f"SELECT {columns(CheckpointRecord)} FROM checkpoints WHERE id = ?", (checkpoint_id,)
        )
        return as_record(CheckpointRecord, row)  # type: ignore[no-any-return]

    async def latest(self, run_id: str) -> CheckpointRecord | None:
        row = await self._db.fetchone(
            f"SELECT {columns(CheckpointRecord)} FROM checkpoints WHERE run_id = ? ORDER BY seq DESC LIMIT 1",
            (run_id,),
        )
        return as_record(CheckpointRecord, row)  # type: ignore[no-any-return]

    async def turns(self, run_id: str) -> int:
        """The turns run ``run_id`` has begun (its first, and each resume)."""
        row = await self._db.fetchone(
            "SELECT COUNT(*) FROM run_events WHERE run_id = ? AND kind = 'run.started'", (run_id,)
        )
        return int(row[0]) if row is not None else 0

    async def named(self, location: str) -> set[str]:
        """Every object the checkpoints in the object store at ``location`` name (their
        manifests and packs; whatever parameters their URLs give after it, ``?...``): what
        retention must not delete there."""
        rows = await self._db.fetchall(
            "SELECT manifest, packs FROM checkpoints WHERE objects = ? OR substr(objects, 1, length(?)) = ?",
            (location, f"{location}?", f"{location}?"),
        )
        named: set[str] = set()
        for manifest, packs in rows:
            named.add(str(manifest))
            named.update(str(name) for name in _json.loads(packs))
        return named

    # -- checkpoints asked of the control plane that drives a run ------------------------

    async def request(self, run_id: str, checkpoint_id: str, *, states: Iterable[str]) -> bool:
        """Ask for checkpoint ``checkpoint_id`` of run ``run_id``, if it is in ``states``
        (an asking before it that was not served yet is replaced); whether it was asked."""
        wanted = tuple(states)
        marks = ", ".join("?" for _ in wanted)
        sql = f"UPDATE runs SET checkpoint_request = ? WHERE id = ? AND state IN ({marks})"
        return await self._db.execute(sql, (checkpoint_id, run_id, *wanted)) == 1

    async def requests(self, owner: str) -> list[tuple[str, str]]:
        """The checkpoints asked of the runs ``owner`` drives: (run id, checkpoint id)."""
        rows = await self._db.fetchall(
            "SELECT id, checkpoint_request FROM runs WHERE owner = ? AND checkpoint_request IS NOT NULL",
            (owner,),
        )
        return [(str(run_id), str(asked)) for run_id, asked in rows]

    async def clear_request(self, run_id: str, checkpoint_id: str) -> bool:
        """The request for ``checkpoint_id`` served (or given up): whether it was still there."""
        return (
            await self._db.execute(
                "UPDATE runs SET checkpoint_request = NULL WHERE id = ? AND checkpoint_request = ?",
                (run_id, checkpoint_id),
            )
            == 1
        )

    async def asked(self, run_id: str) -> str | None:
        """The checkpoint asked of run ``run_id`` and not served yet."""
        row = await self._db.fetchone("SELECT checkpoint_request FROM runs WHERE id = ?", (run_id,))
        return None if row is None or row[0] is None else str(row[0])

    # -- objects kept in the store itself (nodeprov.checkpoints' ``store:``) ------------

    async def put_object(self, name: str, data: bytes) -> None:
        stamp = datetime.now(UTC).isoformat(timespec="microseconds")
        await self._db.execute(
            "INSERT INTO checkpoint_objects (name, data, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            (name, data, stamp),
        )

    async def object_bytes(self) -> int:
        """The bytes of all objects stored."""
        row = await self._db.fetchone("SELECT COALESCE(SUM(LENGTH(data)), 0) FROM checkpoint_objects")
        return int(row[0]) if row is not None else 0

    async def get_object(self, name: str) -> bytes | None:
        row = await self._db.fetchone("SELECT data FROM checkpoint_objects WHERE name = ?", (name,))
        return None if row is None else bytes(row[0])

    async def object_names(self, *, older_than: float = 0.0) -> set[str]:
        """The objects stored, of those at least ``older_than`` seconds old."""
        before = (datetime.now(UTC) - timedelta(seconds=older_than)).isoformat(timespec="microseconds")
        rows = await self._db.fetchall("SELECT name FROM checkpoint_objects WHERE created_at <= ?", (before,))
        return {str(name) for (name,) in rows}

    async def delete_objects(self, names: Iterable[str]) -> None:
        wanted = sorted(set(names))
        for start in range(0, len(wanted), 500):
            part = wanted[start : start + 500]
            await self._db.execute(
                f"DELETE FROM checkpoint_objects WHERE name IN ({', '.join('?' for _ in part)})", tuple(part)
            )
