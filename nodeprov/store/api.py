"""What the HTTP API keeps of its own: which tenant owns each run and node it made
(:class:`OwnerStore`), and who did what through it (:class:`AuditStore`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._db import Database
from ._rows import as_record, columns, insert, now
from .tokens import DEFAULT_TENANT

__all__ = ["AuditEntry", "AuditStore", "Owner", "OwnerStore"]


@dataclass(frozen=True)
class Owner:
    """What the HTTP API made for ``tenant``: a ``kind`` (``run``, ``node``) of thing and its
    ``id``; a node's ``provider``, and ``expires_at`` (ISO UTC), its lifetime's end, past
    which its row goes whatever became of the node."""

    kind: str
    id: str
    tenant: str
    provider: str | None
    created_at: str
    expires_at: str | None


@dataclass(frozen=True)
class AuditEntry:
    """One thing done through the API: ``seq`` orders them; who (the token's id and name, and
    its tenant), ``action`` (``run.start``, ``node.exec``, ...), on what (``resource``: a
    run's or node's id, a pool's name), and ``detail`` (JSON: never a secret)."""

    seq: int
    at: str
    tenant: str
    token_id: str
    token_name: str
    action: str
    resource: str
    detail: str


class OwnerStore:
    """Which tenant owns what the HTTP API made, on the store's database. A thing with no row
    (the library's, the CLI's) is :data:`~nodeprov.store.DEFAULT_TENANT`'s. Every method
    raises :class:`~nodeprov.errors.StoreError` when the database fails."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @staticmethod
    def owned_by(kind: str, id_column: str) -> str:
        """An SQL condition: the thing of ``kind`` (one of the code's kinds, never a caller's
        text) whose id is ``id_column`` is the tenant's; its parameters: the tenant, twice."""
        owned = f"SELECT 1 FROM api_owners o WHERE o.kind = '{kind}' AND o.id = {id_column}"
        return f"(EXISTS ({owned} AND o.tenant = ?) OR (? = '{DEFAULT_TENANT}' AND NOT EXISTS ({owned})))"

    async def add(
        self,
        kind: str,
        thing_id: str,
        tenant: str,
        *,
        provider: str | None = None,
        expires_at: str | None = None,
    ) -> Owner:
        """Make ``tenant`` the owner of the thing (before it is made, so that no moment sees
        it without an owner). A thing owned already keeps its owner: that one is returned."""
        owner = Owner(kind, thing_id, tenant, provider, now(), expires_at)
        sql, values = insert("api_owners", owner)
        await self._db.execute(sql + " ON CONFLICT (kind, id) DO NOTHING", values)
        found = await self.get(kind, thing_id)
        assert found is not None  # noqa: S101 - narrows a type: an invariant, never a check of input
        return found

    async def get(self, kind: str, thing_id: str) -> Owner | None:
        """The owner row of a thing; ``None``: none (the default tenant's, if it exists)."""
        row = await self._db.fetchone(
            f"SELECT {columns(Owner)} FROM api_owners WHERE kind = ? AND id = ?", (kind, thing_id)
        )
        found: Owner | None = as_record(Owner, row)
        return found

    async def tenant_of(self, kind: str, thing_id: str) -> str:
        """Whose the thing is: its owner row's tenant, else the default tenant."""
        owner = await self.get(kind, thing_id)
        return owner.tenant if owner is not None else DEFAULT_TENANT

    async def of(self, kind: str, tenant: str | None) -> dict[str, Owner]:
        """The things of ``kind`` the API made for ``tenant`` (``None``: for any), by id."""
        where, params = ("AND tenant = ?", (kind, tenant)) if tenant is not None else ("", (kind,))
        rows = await self._db.fetchall(
            f"SELECT {columns(Owner)} FROM api_owners WHERE kind = ? {where}", params
        )
        return {str(row[1]): as_record(Owner, row) for row in rows}

    async def remove(self, kind: str, thing_id: str) -> None:
        await self._db.execute("DELETE FROM api_owners WHERE kind = ? AND id = ?", (kind, thing_id))


class AuditStore:
    """The audit trail on the store's database. Every method raises
    :class:`~nodeprov.errors.StoreError` when the database fails."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def note(
        self,
        *,
        tenant: str,
        token_id: str,
        token_name: str,
        action: str,
        resource: str,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Keep one entry (see :class:`AuditEntry`)."""
        await self._db.execute(
            "INSERT INTO audit (at, tenant, token_id, token_name, action, resource, detail)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                now(),
                tenant,
                token_id,
                token_name,
                action,
                resource,
                json.dumps(dict(detail or {}), sort_keys=True),
            ),
        )

    async def entries(
        self, *, tenant: str | None = None, after: int = 0, limit: int = 1000
    ) -> list[AuditEntry]:
        """The entries after ``after``, oldest first, at most ``limit``; of ``tenant`` alone
        unless it is ``None``."""
        where, params = ("AND tenant = ?", [tenant]) if tenant is not None else ("", [])
        rows = await self._db.fetchall(
            f"SELECT {columns(AuditEntry)} FROM audit WHERE seq > ? {where} ORDER BY seq LIMIT ?",
            (after, *params, limit),
        )
        return [as_record(AuditEntry, row) for row in rows]
