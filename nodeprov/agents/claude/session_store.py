"""The Claude Agent SDK's ``SessionStore`` on nodeprov's store: pass
``ClaudeSessionStore(store.transcripts)`` as ``ClaudeAgentOptions.session_store``, and the SDK
mirrors its transcripts into the store's database (SQLite or PostgreSQL) and lists and
resumes sessions from it.

The store keeps entries for every agent alike (:class:`~nodeprov.store.entries.EntryStore`);
what is Claude's lives here: the SDK's key and entry types, and its session summaries,
folded as the SDK folds them (:func:`~nodeprov.agents.claude.sdk_parity.fold_summary`) over
what each append really added, in the append's transaction (a run's mirror folds the same).
"""

from __future__ import annotations

from typing import cast

from claude_agent_sdk import SessionKey, SessionStore
from claude_agent_sdk.types import (
    SessionListSubkeysKey,
    SessionStoreEntry,
    SessionStoreListEntry,
    SessionSummaryEntry,
)

from ...store.entries import EntryKey, EntryStore
from .sdk_parity import fold_summary

__all__ = ["ClaudeSessionStore", "fold_summary"]


def _key(key: SessionKey | SessionListSubkeysKey) -> EntryKey:
    return cast(EntryKey, key)


class ClaudeSessionStore(SessionStore):
    """``SessionStore`` over ``entries`` (see the module). Raises
    :class:`~nodeprov.errors.StoreError` when the database fails."""

    def __init__(self, entries: EntryStore) -> None:
        self._entries = entries

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Durable once this returns. (The SDK's mirror calls this once per batch, never
        again with the same entries: an entry without a ``uuid`` gets a key of its own.)"""
        await self._entries.append(_key(key), list(entries), fold=fold_summary)

    async def replace(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Make ``entries`` all that ``key`` holds, in one transaction, its summary folded anew."""
        await self._entries.replace(_key(key), list(entries), fold=fold_summary)

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        return cast(list[SessionStoreEntry] | None, await self._entries.load(_key(key)))

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        return [
            {"session_id": listing.session_id, "mtime": listing.mtime}
            for listing in await self._entries.sessions(project_key)
        ]

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        return await self._entries.summaries(project_key)

    async def delete(self, key: SessionKey) -> None:
        await self._entries.delete(_key(key))

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        return await self._entries.subpaths(_key(key))
