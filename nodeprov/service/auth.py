"""Who may call what: bearer tokens from the store (``nodeprov tokens create``), each with
scopes and acting for a tenant. ``read`` reads its tenant's runs, nodes and pools; ``runs``
also starts, pauses and resumes runs; ``nodes`` also provisions, destroys and works on
nodes and pools; ``admin`` may do all of it, to every tenant's. What another tenant made is
not found (404), never forbidden: its ids are not confirmed.

A service listening on loopback with no active token in its store is open (every caller is
``anonymous``, with every scope): a new user's first ``curl`` works. It is open to this
machine alone: a request's ``Host`` must be a loopback name, and its ``Origin``, if any, a
loopback origin, so that a web page whose name rebinds to 127.0.0.1 gets nothing (403). As
soon as one token exists, every request needs one: the store is asked at every request, so
a token's creation or revocation holds from the next request on, on every replica. A service
listening beyond loopback always needs one (``nodeprov serve`` refuses to start there
without any).

A token is found by the SHA-256 of the secret given, looked up in the store: what the
lookup's timing could tell is a prefix of a hash, nothing of a secret. A client address
that fails to authenticate ``failures`` times within ``window`` seconds is refused (429,
``Retry-After``) until the window ends, whatever token it then gives: guessing is slowed
to that pace per address and replica.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import Request

from ..store import DEFAULT_TENANT, Store
from .problems import ServiceError

__all__ = ["ANONYMOUS", "Authenticator", "Principal"]

_IMPLIED = {"admin": {"read", "runs", "nodes", "admin"}, "runs": {"read", "runs"}, "nodes": {"read", "nodes"}}
_TRACKED_ADDRESSES = 10_000  # failing addresses remembered at once, the least recent forgotten first


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
    on loopback; ``failures`` failed attempts per client address in ``window`` seconds at
    most."""

    def __init__(self, store: Store, *, open_on_no_tokens: bool, failures: int, window: float) -> None:
        self._store = store
        self._open_on_no_tokens = open_on_no_tokens
        self._failures = _Failures(failures, window)

    async def principal(self, request: Request) -> Principal:
        """The caller of ``request``.

        Raises:
            ServiceError: 401 without a valid token (none given, unknown, revoked); 403 open,
                to a request that is not this machine's; 429 from an address that failed too often.
            StoreError: the store could not be asked.
        """
        address = request.client.host if request.client is not None else ""
        if (wait := self._failures.wait(address)) > 0:
            raise ServiceError(
                429,
                "too_many_failures",
                "too many failed attempts to authenticate from this address: try again later",
                {"Retry-After": str(math.ceil(wait))},
            )
        header = request.headers.get("authorization", "")
        scheme, _, secret = header.partition(" ")
        if not header:
            if self._open_on_no_tokens and not await self._store.tokens.any_active():
                _check_local(request)
                return ANONYMOUS
            raise _unauthorized("a bearer token is required (Authorization: Bearer TOKEN)")
        if scheme.lower() != "bearer" or not secret.strip():
            self._failures.add(address)
            raise _unauthorized("the Authorization header must be 'Bearer TOKEN'")
        record = await self._store.tokens.authenticate(secret.strip())
        if record is None:
            self._failures.add(address)
            raise _unauthorized("the token is unknown or revoked")
        return Principal(record.id, record.name, granted(record.scopes), record.tenant)


class _Failures:
    """Failed attempts by client address, in fixed windows of ``window`` seconds."""

    def __init__(self, limit: int, window: float) -> None:
        self._limit = limit
        self._window = window
        self._seen: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def add(self, address: str) -> None:
        now = time.monotonic()
        start, count = self._seen.pop(address, (now, 0))
        self._seen[address] = (now, 1) if now - start >= self._window else (start, count + 1)
        while len(self._seen) > _TRACKED_ADDRESSES:
            self._seen.popitem(last=False)

    def wait(self, address: str) -> float:
        """Seconds ``address`` must wait before it is heard again (0: none)."""
        start, count = self._seen.get(address, (0.0, 0))
        return start + self._window - time.monotonic() if count >= self._limit else 0.0


def _check_local(request: Request) -> None:
    """Raises ServiceError (403) unless ``request`` is addressed to a loopback name and, if it
    says its origin, comes from a loopback origin (a browser's page on this machine)."""
    host = request.headers.get("host", "")
    origin = request.headers.get("origin")
    if not _is_local(urlsplit(f"//{host}").hostname) or (
        origin is not None and not _is_local(urlsplit(origin).hostname)
    ):
        raise ServiceError(
            403,
            "not_local",
            "this service has no token yet and answers this machine alone: address it as localhost "
            "or 127.0.0.1, or create a token (nodeprov tokens create)",
        )


def _is_local(hostname: str | None) -> bool:
    if hostname in ("localhost", "localhost."):
        return True
    try:
        return hostname is not None and ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


def _unauthorized(message: str) -> ServiceError:
    return ServiceError(401, "unauthorized", message, {"WWW-Authenticate": 'Bearer realm="nodeprov"'})


def forbid(principal: Principal, scope: str) -> None:
    """Raises ServiceError (403) unless ``principal`` has ``scope``."""
    if not principal.allows(scope):
        raise ServiceError(403, "forbidden", f"this needs a token with the {scope!r} scope")
