"""Who may call what: bearer tokens from the store (``nodeprov tokens create``), each with
scopes and acting for a tenant. ``read`` reads its tenant's runs, nodes and pools; ``runs``
also starts, pauses and resumes runs; ``nodes`` also provisions, destroys and works on
nodes and pools; ``admin`` may do all of it, to every tenant's. What another tenant made is
not found (404), never forbidden: its ids are not confirmed.

A service listening on loopback with no active token in its store is open (every caller is
``anonymous``, with every scope): a new user's first ``curl`` works. As soon as one token
exists, every request needs one. A service listening beyond loopback always needs one
(``nodeprov serve`` refuses to start there without any).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from fastapi import Request

from ..store import DEFAULT_TENANT, Store
from .problems import ServiceError

__all__ = ["ANONYMOUS", "Authenticator", "Principal"]

_IMPLIED = {"admin": {"read", "runs", "nodes", "admin"}, "runs": {"read", "runs"}, "nodes": {"read", "nodes"}}
_OPEN_CHECK_INTERVAL = 2.0  # how long "no token exists" is believed before asking the store again


@dataclass(frozen=True)
class Principal:
    """The caller: ``id`` is its token's id (or ``anonymous``), ``scopes`` what it may do,
    ``tenant`` whom it acts for."""

    id: str
    name: str
    scopes: frozenset[str]
    tenant: str = DEFAULT_TENANT

    def allows(self, scope: str) -> bool:
        return scope in self.scopes

    def sees(self, tenant: str) -> bool:
        """Whether what ``tenant`` owns is within this caller's reach (its own, or an admin's)."""
        return tenant == self.tenant or self.allows("admin")

    @property
    def only(self) -> str | None:
        """The tenant this caller's lists are limited to; ``None``: every one (an admin)."""
        return None if self.allows("admin") else self.tenant


ANONYMOUS = Principal("anonymous", "anonymous", frozenset({"read", "runs", "nodes", "admin"}))


def granted(scopes: tuple[str, ...]) -> frozenset[str]:
    """Every scope the given ones grant."""
    return frozenset(implied for scope in scopes for implied in _IMPLIED.get(scope, {scope}))


class Authenticator:
    """Checks a request's bearer token against ``store``; ``open_on_no_tokens`` for a service
    on loopback."""

    def __init__(self, store: Store, *, open_on_no_tokens: bool) -> None:
        self._store = store
        self._open_on_no_tokens = open_on_no_tokens
        self._open_until = 0.0

    async def principal(self, request: Request) -> Principal:
        """The caller of ``request``.

        Raises:
            ServiceError: 401 without a valid token (none given, unknown, revoked).
            StoreError: the store could not be asked.
        """
        header = request.headers.get("authorization", "")
        scheme, _, secret = header.partition(" ")
        if not header:
            if await self._open():
                return ANONYMOUS
            raise _unauthorized("a bearer token is required (Authorization: Bearer TOKEN)")
        if scheme.lower() != "bearer" or not secret.strip():
            raise _unauthorized("the Authorization header must be 'Bearer TOKEN'")
        record = await self._store.tokens.authenticate(secret.strip())
        if record is None:
            raise _unauthorized("the token is unknown or revoked")
        return Principal(record.id, record.name, granted(record.scopes), record.tenant)

    async def _open(self) -> bool:
        if not self._open_on_no_tokens:
            return False
        if time.monotonic() < self._open_until:
            return True
        if await self._store.tokens.any_active():
            return False
        self._open_until = time.monotonic() + _OPEN_CHECK_INTERVAL
        return True


def _unauthorized(message: str) -> ServiceError:
    return ServiceError(401, "unauthorized", message, {"WWW-Authenticate": 'Bearer realm="nodeprov"'})


def forbid(principal: Principal, scope: str) -> None:
    """Raises ServiceError (403) unless ``principal`` has ``scope``."""
    if not principal.allows(scope):
        raise ServiceError(403, "forbidden", f"this needs a token with the {scope!r} scope")
