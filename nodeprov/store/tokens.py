"""Bearer tokens of the HTTP API (``nodeprov serve``): each with a name and scopes, made
with a secret that is shown once and never stored; only the secret's SHA-256 is.

The secret is ``npt_`` and 32 random bytes (URL-safe base64): with that much entropy a
plain SHA-256 cannot be reversed or guessed, so it is the right hash (as GitHub does for
its tokens); a slow password hash would only slow every request down. A token is looked
up by its hash alone, through a unique index.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..errors import ConfigError
from ._db import Database, Row

__all__ = ["SCOPES", "TokenRecord", "TokenStore"]

SCOPES: tuple[str, ...] = ("read", "runs", "nodes", "admin")
"""What a token may be given leave to do (the HTTP API decides what each scope allows)."""

_SECRET_PREFIX = "npt_"  # noqa: S105 - public: marks a nodeprov token (to a reader, a secret scanner)
_COLUMNS = "id, name, scopes, created_at, revoked_at"


@dataclass(frozen=True)
class TokenRecord:
    """A token, without its secret: ``id`` is public (``tok-`` and 12 hex digits),
    ``scopes`` sorted, each one of :data:`SCOPES`; ``revoked_at`` is ``None`` while the
    token is active."""

    id: str
    name: str
    scopes: tuple[str, ...]
    created_at: str
    revoked_at: str | None


class TokenStore:
    """API tokens on the store's database. Every method raises
    :class:`~nodeprov.errors.StoreError` when the database fails."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(self, name: str, scopes: Collection[str]) -> tuple[TokenRecord, str]:
        """A new token named ``name`` with ``scopes``: its record and its secret. The secret
        is returned this once and kept nowhere; only its SHA-256 is stored.

        Raises:
            ConfigError: ``name`` is empty or blank, ``scopes`` is empty, one string rather
                than a collection of them, or names a scope not in :data:`SCOPES`.
        """
        if not name.strip():
            raise ConfigError("a token needs a name")
        if isinstance(scopes, str):
            raise ConfigError(f"scopes are a collection of scope names, not the string {scopes!r}")
        if not scopes:
            raise ConfigError(f"a token needs at least one scope: {', '.join(SCOPES)}")
        if unknown := sorted(set(scopes) - set(SCOPES)):
            raise ConfigError(f"unknown scopes {', '.join(unknown)} (known: {', '.join(SCOPES)})")
        secret = _SECRET_PREFIX + secrets.token_urlsafe(32)
        record = TokenRecord(
            id=f"tok-{secrets.token_hex(6)}",
            name=name,
            scopes=tuple(sorted(set(scopes))),
            created_at=datetime.now(UTC).isoformat(timespec="microseconds"),
            revoked_at=None,
        )
        await self._db.execute(
            "INSERT INTO api_tokens (id, name, scopes, secret_sha256, created_at, revoked_at)"
            " VALUES (?, ?, ?, ?, ?, NULL)",
            (record.id, record.name, json.dumps(record.scopes), _digest(secret), record.created_at),
        )
        return record, secret

    async def authenticate(self, secret: str) -> TokenRecord | None:
        """The active token whose secret is ``secret``; ``None`` for an unknown or revoked one.

        Only the SHA-256 of ``secret`` is compared, by the database: what the comparison's
        time could tell is about the hash of what the caller sent, which leads to no stored
        secret, so no constant-time comparison is needed.
        """
        row = await self._db.fetchone(
            f"SELECT {_COLUMNS} FROM api_tokens WHERE secret_sha256 = ? AND revoked_at IS NULL",
            (_digest(secret),),
        )
        return None if row is None else _token(row)

    async def tokens(self) -> list[TokenRecord]:
        """Every token, revoked ones too, oldest first."""
        rows = await self._db.fetchall(f"SELECT {_COLUMNS} FROM api_tokens ORDER BY created_at, id")
        return [_token(row) for row in rows]

    async def revoke(self, token_id: str) -> bool:
        """Revoke the token ``token_id`` for good. Returns whether it was active (``False``:
        revoked already, or unknown); revoking again changes nothing."""
        revoked = await self._db.execute(
            "UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
            (datetime.now(UTC).isoformat(timespec="microseconds"), token_id),
        )
        return revoked == 1

    async def any_active(self) -> bool:
        """Whether any token is active (not revoked)."""
        found = await self._db.fetchone("SELECT 1 FROM api_tokens WHERE revoked_at IS NULL LIMIT 1")
        return found is not None


def _digest(secret: str) -> str:
    # surrogatepass: whatever string a caller sends hashes (to no token's hash), never raises
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def _token(row: Row) -> TokenRecord:
    token_id, name, scopes, created_at, revoked_at = row
    listed: list[Any] = json.loads(scopes)
    return TokenRecord(str(token_id), str(name), tuple(map(str, listed)), str(created_at), revoked_at)
