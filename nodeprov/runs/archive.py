"""The store's archive of a run's agent session state, as the agents use it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from ..agents import StateKey
from ..errors import RunStateError, StoreError
from ..store import EntryStore
from ..store.entries import Fold
from .journal import Journal

__all__ = ["Archive", "ArchiveCut"]

logger = logging.getLogger("nodeprov.runs")


class Archive:
    """The store's archive of a run's agent session state (a
    :class:`~nodeprov.agents.SessionArchive`), under the run's own key: the state key of the
    run's first node. An agent names keys by where the state lies on its node, which
    changes with the node (a local or SSH node's directory is in it); filed under the run's
    key, the whole conversation stays in one place whatever the number of nodes it lived
    on. Entries added go out with the journal's batched writes; ``spawn`` starts a task of
    the orchestrator's."""

    def __init__(
        self,
        journal: Journal,
        transcripts: EntryStore,
        run_key: str,
        spawn: Callable[[Callable[[], Coroutine[Any, Any, None]]], None],
    ) -> None:
        self._journal = journal
        self._transcripts = transcripts
        self._run_key = run_key
        self._spawn = spawn

    def _filed(self, key: StateKey) -> StateKey:
        return {**key, "project_key": self._run_key}

    def add(self, key: StateKey, entries: list[dict[str, Any]], *, summarize: Fold | None = None) -> None:
        if entries:
            self._journal.queue_frames(self._filed(key), entries, summarize)

    async def flush(self) -> None:
        # Called in the SDK's reader task, which the SDK cancels natively (piercing anyio's
        # shields): the write runs in a task of the orchestrator's, and only the wait here
        # can be cancelled. A failure is logged and retried by the writer, as the SDK's own
        # mirror reports and drops it.
        done = anyio.Event()

        async def write() -> None:
            try:
                await self._journal.flush()
            except Exception as error:  # noqa: BLE001 - the writer tries again
                logger.warning("could not store agent session state yet: %s", error)
                self._journal.retry_soon()
            finally:
                done.set()

        self._spawn(write)
        await done.wait()

    async def load(self, key: StateKey) -> list[dict[str, Any]] | None:
        return await self._transcripts.load(self._filed(key))

    async def subpaths(self, key: StateKey) -> list[str]:
        return await self._transcripts.subpaths(self._filed(key))

    async def replace(
        self, key: StateKey, entries: list[dict[str, Any]], *, summarize: Fold | None = None
    ) -> None:
        await self._journal.flush()  # what was queued before goes first
        try:
            await self._transcripts.replace(self._filed(key), entries, fold=summarize)
        except StoreError as error:  # perhaps committed (a connection lost as it did): it is idempotent
            logger.warning("agent session state replaced again after: %s", error)
            await self._transcripts.replace(self._filed(key), entries, fold=summarize)


class ArchiveCut:
    """The store's archive of a run's agent session state as it stood at a checkpoint, read
    only: what a fork copies. ``counts`` is the checkpoint's ``session_counts`` (the entries
    each file held then, by subpath): an agent's state files only grow, so their first
    entries are what they held then, whatever replaced the archived copy since."""

    def __init__(self, transcripts: EntryStore, run_key: str, counts: dict[str, int]) -> None:
        self._transcripts = transcripts
        self._run_key = run_key
        self._counts = counts

    def _filed(self, key: StateKey) -> StateKey:
        return {**key, "project_key": self._run_key}

    def add(self, key: StateKey, entries: list[dict[str, Any]], *, summarize: Fold | None = None) -> None:
        raise RunStateError("a checkpoint's session state is read only")

    async def flush(self) -> None:
        pass  # nothing is ever queued

    async def load(self, key: StateKey) -> list[dict[str, Any]] | None:
        count = self._counts.get(key.get("subpath") or "", 0)
        return await self._transcripts.load(self._filed(key), first=count) if count else None

    async def subpaths(self, key: StateKey) -> list[str]:
        return sorted(subpath for subpath, count in self._counts.items() if subpath and count)

    async def replace(
        self, key: StateKey, entries: list[dict[str, Any]], *, summarize: Fold | None = None
    ) -> None:
        raise RunStateError("a checkpoint's session state is read only")
