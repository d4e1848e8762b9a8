"""This control plane's lease in the store (taken on entering, renewed by a heartbeat, taken
anew when lost), and whether the owner of a run or a node lives."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..node import owner_alive
from ..store import Store

__all__ = ["LEASE_PREFIX", "Lease", "owner_check"]

logger = logging.getLogger("nodeprov.runs")

LEASE_PREFIX = "lease:"
"""What an owner that is a lease of a store starts with: ``lease:ID``."""


class Lease:
    """A lease in the store: id, holder, heartbeat, expiry by the database's clock.

    ``on_lost`` is called when a renewal finds the lease lost (the store was unreachable
    for longer than the lease), before a new one is taken: another control plane may have
    taken over what the lost one owned.
    """

    def __init__(self, store: Store, holder: str, ttl: float, *, on_lost: Callable[[], None]) -> None:
        self._store = store
        self._holder = holder
        self._ttl = ttl
        self._on_lost = on_lost
        self.owner = ""
        """``lease:ID`` once taken: the owner of the runs and nodes this control plane makes."""

    async def take(self) -> None:
        """Take a new lease.

        Raises:
            StoreError: the store failed.
        """
        lease = await self._store.acquire_lease(self._holder, self._ttl)
        self.owner = LEASE_PREFIX + lease.id

    async def renew(self) -> None:
        """Renew the lease, or, when it was lost, call ``on_lost`` and take a new one.

        Raises:
            StoreError: the store failed.
        """
        if await self._store.renew_lease(self.owner.removeprefix(LEASE_PREFIX), self._ttl):
            return
        logger.error("control plane lease %s was lost: aborting its runs and taking a new lease", self.owner)
        self._on_lost()
        await self.take()

    async def release(self) -> None:
        """Release the lease: what it owned is orphaned at once, for any reconcile.

        Raises:
            StoreError: the store failed.
        """
        await self._store.release_lease(self.owner.removeprefix(LEASE_PREFIX))


async def owner_check(store: Store) -> Callable[[str], bool | None]:
    """Whether an owner lives: a lease by ``store`` (``None`` for a lease it does not know:
    another store's, whose holder may well live), other owners by :func:`owner_alive`.

    Raises:
        StoreError: the store failed.
    """
    leases = await store.lease_liveness()

    def alive(owner: str) -> bool | None:
        if owner.startswith(LEASE_PREFIX):
            return leases.get(owner.removeprefix(LEASE_PREFIX))
        return owner_alive(owner)

    return alive
