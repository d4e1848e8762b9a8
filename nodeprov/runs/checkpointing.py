"""A run's checkpoints: its workspace captured with the agent's session at one moment (at
every pause, on request), recorded in the store once its objects are stored, and restored
onto the fresh node a resume gets (:mod:`nodeprov.checkpoints` does the capture and the
restore; this decides when, records, and tells the run's events).

A checkpoint that fails is absent (nothing of it is recorded) and the run goes on: its event
``checkpoint.failed`` says why.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import secrets
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from .. import _json
from ..checkpoints import (
    Capture,
    Changes,
    Entry,
    Manifest,
    ObjectStore,
    capture,
    changes,
    open_objects,
    restore,
)
from ..checkpoints.objects import location
from ..errors import CheckpointError, DeadlineError, NodeprovError, RunStateError, first_line
from ..node import NodeHandle
from ..store import CheckpointRecord, RunRecord, Store, now
from .events import CheckpointFailed, CheckpointSaved
from .journal import RunEvents
from .state import RunState

if TYPE_CHECKING:
    from .driver import Drive
    from .plane import ControlPlane

__all__ = [
    "COLLECT_AFTER",
    "CheckpointRequests",
    "Checkpointing",
    "RunCheckpoints",
    "WorkspaceDiff",
    "default_checkpoints_url",
    "diff",
    "new_checkpoint_id",
]

logger = logging.getLogger("nodeprov.runs")

_LISTED = 50  # paths of each kind of change a checkpoint's record lists
COLLECT_AFTER = 86400.0
"""Seconds an object no checkpoint names is left before retention deletes it."""


def new_checkpoint_id() -> str:
    return f"ck-{secrets.token_hex(8)}"


def default_checkpoints_url(store: Store) -> str:
    """Where a control plane on ``store`` keeps checkpoints unless told: a directory beside
    a SQLite store's file, the store itself for PostgreSQL (replicas share nothing else)."""
    path: Path | None = getattr(store.db, "path", None)
    if path is None:
        return "store:"
    return path.with_name(path.name + ".checkpoints").as_uri()


class Checkpointing:
    """Takes and restores the checkpoints of the runs of one control plane, in the object
    store at ``url`` (:func:`~nodeprov.checkpoints.open_objects`; None:
    :func:`default_checkpoints_url`)."""

    def __init__(
        self, store: Store, url: str | None, *, flush: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self._store = store
        self._url = url
        self._flush = flush  # the journal's: the session's entries in the store before its position is read
        self._objects: dict[str, ObjectStore] = {}
        if url is not None:
            open_objects(url, store)  # a URL that is not one fails here, at the start

    @property
    def url(self) -> str:
        """Where this control plane's checkpoints go."""
        if self._url is None:
            self._url = default_checkpoints_url(self._store)
        return self._url

    def objects(self, url: str) -> ObjectStore:
        """The object store at ``url`` (a checkpoint's own: another control plane's may differ)."""
        if url not in self._objects:
            self._objects[url] = open_objects(url, self._store)
        return self._objects[url]

    async def aclose(self) -> None:
        for objects in self._objects.values():
            await objects.aclose()

    async def take(
        self,
        run_id: str,
        node: NodeHandle,
        events: RunEvents,
        *,
        reason: str,
        session: str | None,
        checkpoint_id: str | None = None,
    ) -> CheckpointRecord:
        """Checkpoint run ``run_id``'s workspace on ``node`` (its workdir) with the agent's
        session ``session`` (as ``checkpoint_id``, if given), tell ``events``
        (``checkpoint.saved``, or ``checkpoint.failed`` with why), and return the record.

        Raises:
            CheckpointError, NodeprovError: it failed, and nothing of it was recorded.
        """
        try:
            record = await self._take(
                run_id, node, reason=reason, session=session, checkpoint_id=checkpoint_id
            )
        except NodeprovError as error:
            logger.warning("run %s: checkpoint (%s) failed: %s", run_id, reason, error)
            events.emit(CheckpointFailed, reason=reason, error=first_line(error))
            raise
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
        self, run_id: str, node: NodeHandle, *, reason: str, session: str | None, checkpoint_id: str | None
    ) -> CheckpointRecord:
        store = self._store
        if checkpoint_id is not None and (done := await store.checkpoints.get(checkpoint_id)) is not None:
            return done  # asked again, taken already
        previous = await store.checkpoints.latest(run_id)
        before = (
            await self.manifest(previous) if previous is not None and previous.objects == self.url else None
        )
        objects = self.objects(self.url)
        taken: Capture = await capture(node, objects, previous=before)
        if self._flush is not None:
            await self._flush()
        run = await store.run(run_id)
        key = run.project_key if run is not None else None
        counts = await self._counts(key, session)
        found: Changes = changes(before, taken.manifest)
        turn = await store.checkpoints.turns(run_id)
        return await self._number(
            run_id,
            previous,
            lambda seq: CheckpointRecord(
                id=checkpoint_id or new_checkpoint_id(),
                run_id=run_id,
                seq=seq,
                turn=turn,
                reason=reason,
                created_at=now(),
                objects=self.url,
                manifest=taken.name,
                packs=_json.dumps(sorted(taken.manifest.packs())),
                files=taken.manifest.files,
                size=taken.manifest.size,
                stored=taken.stored,
                changed=_changed(found),
                parent=previous.id if previous is not None else None,
                agent_session_id=session,
                project_key=key,
                session_counts=counts,
            ),
        )

    async def _counts(self, key: str | None, session: str | None) -> str | None:
        """The entries each file of ``session`` holds in the archive (see ``session_counts``)."""
        if not key or not session:
            return None
        counts = await self._store.transcripts.counts({"project_key": key, "session_id": session})
        return _json.dumps(counts) if counts else None

    async def adopt(
        self, run_id: str, source: CheckpointRecord, *, reason: str, session: str | None
    ) -> CheckpointRecord:
        """Record checkpoint ``source`` (perhaps another run's) as run ``run_id``'s latest,
        with the agent's session ``session`` (a fork's copy of ``source``'s): where a fork or
        a rewind starts, restored onto its fresh node. Its objects are shared, not copied
        (retention keeps what any checkpoint names); its parent is ``source``, from which
        nothing changed.

        Raises:
            CheckpointError, ConfigError: ``source``'s manifest cannot be read.
            StoreError: the store failed.
        """
        await self.manifest(source)  # its objects gone: the fork fails now, not at its restore
        store = self._store
        counts = await self._counts(source.project_key, session)
        turn = await store.checkpoints.turns(run_id)
        return await self._number(
            run_id,
            await store.checkpoints.latest(run_id),
            lambda seq: dataclasses.replace(
                source,
                id=new_checkpoint_id(),
                run_id=run_id,
                seq=seq,
                turn=turn,
                reason=reason,
                created_at=now(),
                stored=0,
                changed=_changed(Changes((), (), ())),
                parent=source.id,
                agent_session_id=session,
                session_counts=counts,
            ),
        )

    async def _number(
        self, run_id: str, previous: CheckpointRecord | None, record: Callable[[int], CheckpointRecord]
    ) -> CheckpointRecord:
        """Add ``record(seq)`` with the run's next ``seq`` (again, should another writer take it)."""
        first = (previous.seq if previous else 0) + 1
        for seq in range(first, first + 100):
            made = record(seq)
            if await self._store.checkpoints.add(made):
                return made
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
        named = await self._store.checkpoints.named(location(self.url))
        unnamed = await objects.names(older_than=older_than) - named
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


def _changed(found: Changes) -> str:
    """A checkpoint's ``changed``: counts, and the first paths of each kind of change."""
    return _json.dumps(
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
    )


@dataclass(frozen=True)
class WorkspaceDiff:
    """What changed from one checkpoint's workspace to another's: the paths (``changes``),
    a unified diff of each text file that changed (``patches``, in path order), and the
    changed files not shown as text (``binary``: not UTF-8, or over 1 MiB)."""

    changes: Changes
    patches: tuple[str, ...]
    binary: tuple[str, ...]


_DIFF_LIMIT = 1 << 20


async def diff(
    checkpointing: Checkpointing, first: CheckpointRecord, second: CheckpointRecord
) -> WorkspaceDiff:
    """What changed from checkpoint ``first`` to ``second`` (see :class:`WorkspaceDiff`).

    Raises:
        CheckpointError, ConfigError: as :meth:`Checkpointing.manifest`, or a pack is missing.
    """
    before, after = await checkpointing.manifest(first), await checkpointing.manifest(second)
    found = changes(before, after)
    patches: list[str] = []
    binary: list[str] = []
    for path in sorted({*found.added, *found.modified, *found.removed}):
        old, new = before.by_path.get(path), after.by_path.get(path)
        if (old is not None and old.kind != "file") and (new is not None and new.kind != "file"):
            continue  # a directory's mode, a link's target: the path list says it
        texts = [await _text(checkpointing, record, entry) for record, entry in ((first, old), (second, new))]
        if texts[0] is None or texts[1] is None:
            binary.append(path)
            continue
        lines = difflib.unified_diff(
            texts[0].splitlines(keepends=True),
            texts[1].splitlines(keepends=True),
            f"a/{path}" if old is not None else "/dev/null",
            f"b/{path}" if new is not None else "/dev/null",
        )
        patches.append("".join(lines))
    return WorkspaceDiff(found, tuple(patch for patch in patches if patch), tuple(binary))


async def _text(checkpointing: Checkpointing, record: CheckpointRecord, entry: Entry | None) -> str | None:
    """``entry``'s content as text ("" for none, or not a file); None when it is not text."""
    if entry is None or entry.kind != "file":
        return ""
    if entry.size > _DIFF_LIMIT:
        return None
    objects = checkpointing.objects(record.objects)
    data = b"".join([(await objects.get(p.pack))[p.offset : p.offset + p.length] for p in entry.pieces])
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return None
    return None if "\0" in text else text


class CheckpointRequests:
    """Checkpoints other processes asked of the runs this control plane drives (see
    :meth:`Orchestrator.checkpoint <nodeprov.runs.Orchestrator.checkpoint>`), each served in a
    task of its own: taken if the run still runs, then the request cleared, its events
    written first (the asker reads why it failed there)."""

    def __init__(self, plane: ControlPlane) -> None:
        self._plane = plane
        self._serving: set[str] = set()

    async def serve(self) -> None:
        """Start serving the pending requests for the runs driven here.

        Raises:
            StoreError: the store failed.
        """
        plane = self._plane
        for run_id, checkpoint_id in await plane.store.checkpoints.requests(plane.lease.owner):
            drive = plane.live(run_id)
            if checkpoint_id in self._serving or (drive is None and plane.driven(run_id)):
                continue  # under way; or its drive is about to begin
            self._serving.add(checkpoint_id)
            plane.spawn(partial(self._serve, run_id, checkpoint_id, drive))

    async def _serve(self, run_id: str, checkpoint_id: str, drive: Drive | None) -> None:
        plane = self._plane
        try:
            node = drive.node if drive is not None and drive.run.state is RunState.RUNNING else None
            if drive is not None and node is not None:
                with suppress(NodeprovError):  # told as checkpoint.failed
                    await plane.checkpoints.take(
                        run_id,
                        node,
                        drive.events,
                        reason="request",
                        session=drive.run.agent_session_id,
                        checkpoint_id=checkpoint_id,
                    )
            with suppress(NodeprovError):
                await plane.journal.flush()
            with suppress(NodeprovError):
                await plane.store.checkpoints.clear_request(run_id, checkpoint_id)
        finally:
            self._serving.discard(checkpoint_id)


class RunCheckpoints:
    """The checkpoints of the store's runs, as :attr:`Orchestrator.checkpoints
    <nodeprov.runs.Orchestrator.checkpoints>`: listed, taken on request, compared."""

    def __init__(self, plane: ControlPlane, *, poll_interval: float) -> None:
        self._plane = plane
        self._poll_interval = poll_interval
        self.requests = CheckpointRequests(plane)
        """What this control plane serves of the checkpoints others ask of its runs."""

    async def of_run(self, run_id: str) -> list[CheckpointRecord]:
        """The run's checkpoints, the first first.

        Raises:
            RunStateError: there is no such run.
            StoreError: the store failed.
        """
        if await self._plane.store.run(run_id) is None:
            raise RunStateError(f"no run {run_id}")
        return await self._plane.store.checkpoints.of_run(run_id)

    async def get(self, run_id: str, checkpoint_id: str) -> CheckpointRecord:
        """Checkpoint ``checkpoint_id`` of run ``run_id``.

        Raises:
            RunStateError: the run has no such checkpoint.
            StoreError: the store failed.
        """
        record = await self._plane.store.checkpoints.get(checkpoint_id)
        if record is None or record.run_id != run_id:
            raise RunStateError(f"run {run_id} has no checkpoint {checkpoint_id}")
        return record

    async def start_point(self, run_id: str, checkpoint_id: str | None) -> tuple[RunRecord, CheckpointRecord]:
        """Run ``run_id`` and its checkpoint ``checkpoint_id`` (its latest when None): where a
        fork begins.

        Raises:
            RunStateError: there is no such run, it has no such checkpoint (or none).
            StoreError: the store failed.
        """
        store = self._plane.store
        if (record := await store.run(run_id)) is None:
            raise RunStateError(f"no run {run_id}")
        if checkpoint_id is not None:
            return record, await self.get(run_id, checkpoint_id)
        if (latest := await store.checkpoints.latest(run_id)) is None:
            raise RunStateError(f"run {run_id} has no checkpoint to fork from")
        return record, latest

    async def take(self, run_id: str, *, within: float = 600.0) -> CheckpointRecord:
        """Checkpoint a running run now: its workspace and its agent's session, while the
        agent goes on. Taken here when the run is driven here, else asked of the control
        plane that drives it (which checks every ``poll_interval``).

        Raises:
            RunStateError: there is no such run, or it is not running (a pause checkpoints it).
            CheckpointError: the checkpoint failed (the run's ``checkpoint.failed`` event
                says why too); nothing was recorded.
            DeadlineError: the control plane that drives it did not answer ``within`` seconds.
            StoreError: the store failed.
        """
        plane = self._plane
        record = await plane.store.run(run_id)
        if record is None:
            raise RunStateError(f"no run {run_id}")
        if record.state != RunState.RUNNING:
            raise RunStateError(
                f"run {run_id} is {record.state}: only a running run is checkpointed on request"
            )
        drive = plane.live(run_id)
        if drive is not None and drive.node is not None and drive.run.state is RunState.RUNNING:
            session = drive.run.agent_session_id
            return await plane.checkpoints.take(
                run_id, drive.node, drive.events, reason="request", session=session
            )
        checkpoint_id = new_checkpoint_id()
        if not await plane.store.checkpoints.request(run_id, checkpoint_id, states=(RunState.RUNNING,)):
            raise RunStateError(f"run {run_id} is no longer running")
        try:
            with anyio.fail_after(within):
                while await plane.store.checkpoints.asked(run_id) == checkpoint_id:  # noqa: ASYNC110
                    await anyio.sleep(self._poll_interval)
        except TimeoutError:
            await plane.store.checkpoints.clear_request(run_id, checkpoint_id)
            raise DeadlineError(
                f"run {run_id}: the control plane that drives it took no checkpoint within {within:g} s"
            ) from None
        done = await plane.store.checkpoints.get(checkpoint_id)
        if done is None:
            raise CheckpointError(f"run {run_id}: the checkpoint failed: {await self._why(run_id)}")
        return done

    async def _why(self, run_id: str) -> str:
        store = self._plane.store
        last = await store.last_event_seq(run_id)
        for event in reversed(await store.events(run_id, after=max(0, last - 50))):
            if event.kind == CheckpointFailed.kind:
                return str(_json.loads(event.body).get("error", "unknown"))
        return "the run stopped running first"

    async def diff(self, run_id: str, first: str, second: str) -> WorkspaceDiff:
        """What changed in run ``run_id``'s workspace from checkpoint ``first`` to ``second``.

        Raises:
            RunStateError: the run has no such checkpoint.
            CheckpointError: a checkpoint's objects are missing from their store.
            StoreError: the store failed.
        """
        return await diff(
            self._plane.checkpoints, await self.get(run_id, first), await self.get(run_id, second)
        )
