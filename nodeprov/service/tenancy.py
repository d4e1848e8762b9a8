"""Whose things are, in the HTTP API: each tenant's runs, nodes, pools and workspaces, and
what another tenant's caller finds of them (nothing: 404, never 403).

- **Runs and nodes** are owned by a row each in the store (``store.owners``), written
  before the thing is made. A run with no row (the library's, the CLI's) is the default
  tenant's; a node with no row (a run's, a pool's, the CLI's) is nobody's: only an admin
  reaches it through the API.
- **Pools and workspaces** have names their callers choose: a tenant's are kept under a
  prefix of its own (``TENANT.pool``, ``TENANT:workspace``), so tenants never collide on a
  name, and shown without it. The default tenant's have none (the CLI's names are
  theirs); a name of the default tenant's that looks prefixed is an admin's to see.
- An **admin** (the ``admin`` scope) reaches every tenant's, under their full names.
"""

from __future__ import annotations

from ..store import DEFAULT_TENANT, Store
from .auth import Principal
from .problems import ServiceError

__all__ = [
    "node_tenant",
    "owns_node",
    "pool_name",
    "pool_shown",
    "pool_visible",
    "run_visible",
    "workspace_name",
    "workspace_shown",
    "workspace_visible",
]


def _own(who: Principal) -> bool:
    return who.tenant == DEFAULT_TENANT


def workspace_name(who: Principal, given: str) -> str:
    """The stored name of the caller's workspace ``given``.

    Raises:
        ServiceError: 422, a name with ':' from a tenant's caller (it would read as another's).
    """
    if _own(who):
        return given
    if ":" in given:
        raise ServiceError(422, "invalid", "a workspace's name has no ':'")
    return f"{who.tenant}:{given}"


def workspace_visible(who: Principal, stored: str) -> bool:
    return _visible(who, stored, ":")


def workspace_shown(who: Principal, stored: str) -> str:
    """The name the caller knows a stored workspace by."""
    return _shown(who, stored, ":")


def pool_name(who: Principal, given: str) -> str:
    """The stored name of the caller's pool ``given`` (its own names have no '.'; an admin's
    may name any tenant's pool in full).

    Raises:
        ServiceError: 404, a name the caller's pools cannot have.
    """
    stored = given if _own(who) else f"{who.tenant}.{given}"
    if not pool_visible(who, stored):
        raise ServiceError(404, "pool_not_found", f"no pool {given!r}")
    return stored


def pool_visible(who: Principal, stored: str) -> bool:
    return _visible(who, stored, ".")


def pool_shown(who: Principal, stored: str) -> str:
    """The name the caller knows a stored pool by."""
    return _shown(who, stored, ".")


def _visible(who: Principal, stored: str, separator: str) -> bool:
    """Whether a name stored with tenants' prefixes ending in ``separator`` is the caller's."""
    if who.allows("admin"):
        return True
    return separator not in stored if _own(who) else stored.startswith(f"{who.tenant}{separator}")


def _shown(who: Principal, stored: str, separator: str) -> str:
    prefix = f"{who.tenant}{separator}"
    return stored.removeprefix(prefix) if not _own(who) and stored.startswith(prefix) else stored


async def run_visible(store: Store, who: Principal, run_id: str) -> bool:
    """Whether run ``run_id`` (which exists) is within the caller's reach."""
    return who.sees(await store.owners.tenant_of("run", run_id))


async def node_tenant(store: Store, node_id: str) -> str | None:
    """The tenant the API made node ``node_id`` for; ``None``: the API made it for nobody."""
    owner = await store.owners.get("node", node_id)
    return owner.tenant if owner is not None else None


async def owns_node(store: Store, who: Principal, node_id: str) -> bool:
    """Whether node ``node_id`` is within the caller's reach: made for its tenant by the API,
    or any node for an admin."""
    if who.allows("admin"):
        return True
    return await node_tenant(store, node_id) == who.tenant
