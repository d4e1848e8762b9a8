"""A run's checkpoints: its workspace captured with the agent's session at one moment (at
every pause, on request), recorded in the store once its objects are stored, and restored
onto the fresh node a resume gets (:mod:`nodeprov.checkpoints` does the capture and the
restore; this decides when, records, and tells the run's events).

A checkpoint that fails is absent (nothing of it is recorded) and the run goes on: its event
``checkpoint.failed`` says why.
"""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

from .. import _json
from ..checkpoints import Capture, Changes, Manifest, ObjectStore, capture, changes, open_objects, restore
from ..errors import CheckpointError, NodeprovError, first_line
from ..node import NodeHandle
from ..store import CheckpointRecord, Store, now
from .events import CheckpointFailed, CheckpointSaved
from .journal import RunEvents

__all__ = ["COLLECT_AFTER", "Checkpointing", "default_checkpoints_url"]

logger = logging.getLogger("nodeprov.runs")

_LISTED = 50  # paths of each kind of change a checkpoint's record lists
COLLECT_AFTER = 86400.0
"""Seconds an object no checkpoint names is left before retention deletes it."""


def default_checkpoints_url(store: Store) -> str:
    """Where a control plane on ``store`` keeps checkpoints unless told: a directory beside
    a SQLite store's file, the store itself for PostgreSQL (replicas share nothing else)."""
    path: Path | None = getattr(store.db, "path", None)
    if path is None:
        return "store:"
    return path.with_name(path.name + ".checkpoints").as_uri()


class Checkpointing:
    """Takes and restores the checkpoints of the runs of one control plane, in the object
    store at ``url`` (:func:`~nodeprov.checkpoints.open_objects`)."""

    def __init__(self, store: Store, url: str) -> None:
        self._store = store
        self.url = url
        self._objects: dict[str, ObjectStore] = {}
        open_objects(url, store)  # a URL that is not one fails here, at the start

    def objects(self, url: str) -> ObjectStore:
        """The object store at ``url`` (a checkpoint's own: another control plane's may differ)."""
        if url not in self._objects:
            self._objects[url] = open_objects(url, self._store)
        return self._objects[url]

    async def aclose(self) -> None:
        for objects in self._objects.values():
            await objects.aclose()

    async def take(
        self, run_id: str, node: NodeHandle, events: RunEvents | None, *, reason: str, session: str | None
    ) -> CheckpointRecord | None:
        """Checkpoint run ``run_id``'s workspace on ``node`` (its workdir) with the agent's
        session ``session``, tell ``events`` (``checkpoint.saved``, or ``checkpoint.failed``
        with why), and return the record; None when it failed (nothing was recorded)."""
        try:
            record = await self._take(run_id, node, reason=reason, session=session)
        except NodeprovError as error:
            logger.warning("run %s: checkpoint at %s failed: %s", run_id, reason, error)
            if events is not None:
                events.emit(CheckpointFailed, reason=reason, error=first_line(error))
            return None
        if events is not None:
            changed = _json.loads(record.changed)
            events.emit(
                CheckpointSaved,
                checkpoint_id=record.id,
                reason=reason,
                files=record.files,
                size=record.size,
                stored=record.stored,
                added=changed["added"],
                modified=changed["modified"],
                removed=changed["removed"],
            )
        return record

    async def _take(
        self, run_id: str, node: NodeHandle, *, reason: str, session: str | None
    ) -> CheckpointRecord:
        store = self._store
        previous = await store.checkpoints.latest(run_id)
        before = (
            await self.manifest(previous) if previous is not None and previous.objects == self.url else None
        )
        objects = self.objects(self.url)
        taken: Capture = await capture(node, objects, previous=before)
        run = await store.run(run_id)
        found: Changes = changes(before, taken.manifest)
        for seq in range((previous.seq if previous else 0) + 1, (previous.seq if previous else 0) + 100):
            record = CheckpointRecord(
                id=f"ck-{secrets.token_hex(8)}",
                run_id=run_id,
                seq=seq,
                turn=await store.checkpoints.turns(run_id),
                reason=reason,
                created_at=now(),
                objects=self.url,
                manifest=taken.name,
                packs=_json.dumps(sorted(taken.manifest.packs())),
                files=taken.manifest.files,
                size=taken.manifest.size,
                stored=taken.stored,
                changed=_json.dumps(
                    {
                        "added": len(found.added),
                        "modified": len(found.modified),
                        "removed": len(found.removed),
                        "paths": {
                            "added": found.added[:_LISTED],
                            "modified": found.modified[:_LISTED],
                            "removed": found.removed[:_LISTED],
                        },
                    }
                ),
                parent=previous.id if previous is not None else None,
                agent_session_id=session,
                project_key=run.project_key if run is not None else None,
            )
            if await store.checkpoints.add(record):
                return record
        raise CheckpointError(f"run {run_id}: could not number a checkpoint (too many writers at once)")

    async def collect(self, *, older_than: float = COLLECT_AFTER) -> int:
        """Delete the objects of this control plane's object store that no checkpoint names,
        of those older than ``older_than`` seconds (a capture under way stores its packs
        before its record, and one of a huge workspace takes a while); how many went.

        Raises:
            CheckpointError: the object store failed.
            StoreError: the store did.
        """
        objects = self.objects(self.url)
        unnamed = await objects.names(older_than=older_than) - await self._store.checkpoints.named(self.url)
        await objects.delete(unnamed)
        return len(unnamed)

    async def manifest(self, record: CheckpointRecord) -> Manifest:
        """The workspace checkpoint ``record`` holds.

        Raises:
            CheckpointError: its object store lacks it, or it is not a manifest.
            ConfigError: its object store's URL is not one this control plane can open.
        """
        return Manifest.from_bytes(await self.objects(record.objects).get(record.manifest))

    async def restore(self, record: CheckpointRecord, node: NodeHandle) -> None:
        """Make ``node``'s workdir hold what checkpoint ``record`` holds.

        Raises:
            CheckpointError, ConfigError: as :meth:`manifest` and
                :func:`~nodeprov.checkpoints.restore`.
            NodeGoneError, SpawnError, ProviderError: as :meth:`NodeHandle.spawn`.
        """
        await restore(node, await self.manifest(record), self.objects(record.objects))
