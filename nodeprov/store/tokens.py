"""Bearer tokens of the HTTP API (``nodeprov serve``): each with a name and scopes, made
with a secret that is shown once and never stored; only the secret's SHA-256 is.

The secret is ``npt_`` and 32 random bytes (URL-safe base64): with that much entropy a
plain SHA-256 cannot be reversed or guessed, so it is the right hash (as GitHub does for
its tokens); a slow password hash would only slow every request down. A token is looked
up by its hash alone, through a unique index.

A token acts for a *tenant* (a team, a project: :data:`DEFAULT_TENANT` unless given), which
owns what the token makes through the API; another tenant's is out of its reach.

A *tokens file* holds tokens as their hashes only (a JSON list of ``{"name", "scopes",
"sha256"}``, and ``"tenant"`` where it is not the default): ``nodeprov tokens create
--file`` adds one, and ``nodeprov serve --tokens-file`` adds its tokens to the store
(:meth:`TokenStore.add`), so a deployment can keep them in a secret of its platform (a
Kubernetes Secret) with no secret in it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import tempfile
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..scopes import DEFAULT_TENANT, SCOPES
from ._db import Database, Row

__all__ = [
    "DEFAULT_TENANT",
    "SCOPES",
    "TokenEntry",
    "TokenRecord",
    "TokenStore",
    "add_to_tokens_file",
    "check_tenant",
    "read_tokens_file",
]

_SECRET_PREFIX = "npt_"  # noqa: S105 - public: marks a nodeprov token (to a reader, a secret scanner)

_COLUMNS = "id, name, scopes, created_at, revoked_at, tenant"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TENANT = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")


def check_tenant(tenant: str) -> str:
    """``tenant``, if it is a tenant's name: lowercase letters, digits and '-', at most 40.

    Raises:
        ConfigError: it is not.
    """
    if not _TENANT.fullmatch(tenant):
        raise ConfigError(f"a tenant is lowercase letters, digits and '-', at most 40 characters: {tenant!r}")
    return tenant


@dataclass(frozen=True)
class TokenEntry:
    """A token of a tokens file: its name, its scopes, its secret's SHA-256 (hex) and its tenant."""

    name: str
    scopes: tuple[str, ...]
    sha256: str
    tenant: str = DEFAULT_TENANT


@dataclass(frozen=True)
class TokenRecord:
    """A token, without its secret: ``id`` is public (``tok-`` and 12 hex digits),
    ``scopes`` sorted, each one of :data:`SCOPES`; ``revoked_at`` is ``None`` while the
    token is active; ``tenant`` is whom it acts for."""

    id: str
    name: str
    scopes: tuple[str, ...]
    created_at: str
    revoked_at: str | None
    tenant: str = DEFAULT_TENANT


class TokenStore:
    """API tokens on the store's database. Every method raises
    :class:`~nodeprov.errors.StoreError` when the database fails."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(
        self, name: str, scopes: Collection[str], tenant: str = DEFAULT_TENANT
    ) -> tuple[TokenRecord, str]:
        """A new token named ``name`` with ``scopes``, acting for ``tenant``: its record and
        its secret. The secret is returned this once and kept nowhere; only its SHA-256 is
        stored.

        Raises:
            ConfigError: ``name`` is empty or blank, ``scopes`` is empty, one string rather
                than a collection of them, or names a scope not in :data:`SCOPES`; ``tenant``
                is not a tenant's name (:func:`check_tenant`).
        """
        secret = _new_secret()
        record = await self.add(name, scopes, _digest(secret), tenant)
        assert record is not None  # noqa: S101 - an invariant, not a check of input: a new secret's hash is no other token's
        return record, secret

    async def add(
        self, name: str, scopes: Collection[str], sha256: str, tenant: str = DEFAULT_TENANT
    ) -> TokenRecord | None:
        """Add a token known by its secret's SHA-256 alone (a tokens file's entry): its new
        record, or ``None`` when a token of that hash is there already, which is left as it
        is (its name and scopes kept, and revoked if it was).

        Raises:
            ConfigError: as :meth:`create`; ``sha256`` is not 64 lowercase hex digits.
        """
        scopes = _checked(name, scopes)
        if not _SHA256.fullmatch(sha256):
            raise ConfigError("a token's sha256 is 64 lowercase hex digits")
        record = TokenRecord(
            id=f"tok-{secrets.token_hex(6)}",
            name=name,
            scopes=scopes,
            created_at=datetime.now(UTC).isoformat(timespec="microseconds"),
            revoked_at=None,
            tenant=check_tenant(tenant),
        )
        added = await self._db.execute(
            "INSERT INTO api_tokens (id, name, scopes, secret_sha256, created_at, revoked_at, tenant)"
            " VALUES (?, ?, ?, ?, ?, NULL, ?) ON CONFLICT (secret_sha256) DO NOTHING",
            (record.id, record.name, json.dumps(record.scopes), sha256, record.created_at, record.tenant),
        )
        return record if added == 1 else None

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


_ENTRY_FIELDS = {"name", "scopes", "sha256", "tenant"}


def _checked(name: str, scopes: Collection[str]) -> tuple[str, ...]:
    """``scopes`` sorted, once each, after checking them and ``name`` (see TokenStore.create)."""
    if not name.strip():
        raise ConfigError("a token needs a name")
    if isinstance(scopes, str):
        raise ConfigError(f"scopes are a collection of scope names, not the string {scopes!r}")
    if not scopes:
        raise ConfigError(f"a token needs at least one scope: {', '.join(SCOPES)}")
    if unknown := sorted(set(scopes) - set(SCOPES)):
        raise ConfigError(f"unknown scopes {', '.join(unknown)} (known: {', '.join(SCOPES)})")
    return tuple(sorted(set(scopes)))


def _new_secret() -> str:
    return _SECRET_PREFIX + secrets.token_urlsafe(32)


def read_tokens_file(path: str | os.PathLike[str]) -> list[TokenEntry]:
    """The tokens of the tokens file at ``path`` (see the module).

    Raises:
        ConfigError: the file cannot be read, is not such a JSON list, or an entry is
            invalid (unknown fields, no name, unknown scopes, a bad hash); the message names
            the entry, never a hash.
    """
    try:
        listed = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"tokens file {path}: {error.strerror or error}") from None
    except ValueError as error:
        raise ConfigError(f"tokens file {path} is not JSON: {error}") from None
    if not isinstance(listed, list):
        raise ConfigError(f'tokens file {path}: not a JSON list of {{"name", "scopes", "sha256"}}')
    entries = []
    for index, item in enumerate(listed):
        where = f"tokens file {path}, entry {index}"
        if not isinstance(item, dict) or not {"name", "scopes", "sha256"} <= set(item) <= _ENTRY_FIELDS:
            raise ConfigError(f'{where}: an entry has the fields "name", "scopes", "sha256" (and "tenant")')
        name, scopes, sha256 = item["name"], item["scopes"], item["sha256"]
        tenant = item.get("tenant", DEFAULT_TENANT)
        if not all(isinstance(text, str) for text in (name, sha256, tenant)) or not isinstance(scopes, list):
            raise ConfigError(f"{where}: name, sha256 and tenant are strings, scopes a list of them")
        if not all(isinstance(scope, str) for scope in scopes):
            raise ConfigError(f"{where}: scopes are strings")
        try:
            checked = _checked(name, scopes)
        except ConfigError as error:
            raise ConfigError(f"{where}: {error}") from None
        if not _SHA256.fullmatch(sha256):
            raise ConfigError(f"{where}: sha256 is 64 lowercase hex digits")
        try:
            check_tenant(tenant)
        except ConfigError as error:
            raise ConfigError(f"{where}: {error}") from None
        entries.append(TokenEntry(name, checked, sha256, tenant))
    return entries


def add_to_tokens_file(
    path: str | os.PathLike[str], name: str, scopes: Collection[str], tenant: str = DEFAULT_TENANT
) -> tuple[TokenEntry, str]:
    """A new token added to the tokens file at ``path`` (made, mode 0600, if missing; else
    rewritten whole, by a rename): its entry and its secret, which is kept nowhere.

    Raises:
        ConfigError: as :meth:`TokenStore.create`; as :func:`read_tokens_file` for the file
            there; the file cannot be written.
    """
    checked = _checked(name, scopes)
    target = Path(path)
    entries = read_tokens_file(target) if target.exists() else []
    secret = _new_secret()
    entry = TokenEntry(name, checked, _digest(secret), check_tenant(tenant))
    listed = [
        {"name": e.name, "scopes": list(e.scopes), "sha256": e.sha256}
        | ({"tenant": e.tenant} if e.tenant != DEFAULT_TENANT else {})
        for e in [*entries, entry]
    ]
    try:
        descriptor, partial = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as file:
                json.dump(listed, file, indent=2)
                file.write("\n")
            os.replace(partial, target)
        except BaseException:
            Path(partial).unlink(missing_ok=True)
            raise
    except OSError as error:
        raise ConfigError(f"tokens file {path}: {error.strerror or error}") from None
    return entry, secret


def _digest(secret: str) -> str:
    # surrogatepass: whatever string a caller sends hashes (to no token's hash), never raises
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def _token(row: Row) -> TokenRecord:
    token_id, name, scopes, created_at, revoked_at, tenant = row
    listed: list[Any] = json.loads(scopes)
    return TokenRecord(
        str(token_id), str(name), tuple(map(str, listed)), str(created_at), revoked_at, str(tenant)
    )
