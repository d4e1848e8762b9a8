"""This control plane's lease in the store (taken on entering, renewed by a heartbeat, taken
anew when lost), and whether the owner of a run or a node lives."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from ..node import owner_alive
from ..store import Store, lease_id_of

__all__ = ["LEASE_PREFIX", "Lease", "owner_check", "owner_lives"]

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
        lease = await self._store.leases.acquire(self._holder, self._ttl)
        self.owner = LEASE_PREFIX + lease.id

    async def renew(self) -> None:
        """Renew the lease, or, when it was lost, call ``on_lost`` and take a new one.

        Raises:
            StoreError: the store failed.
        """
        if await self._store.leases.renew(self.owner.removeprefix(LEASE_PREFIX), self._ttl):
            return
        logger.error("control plane lease %s was lost: aborting its runs and taking a new lease", self.owner)
        self._on_lost()
        await self.take()

    async def release(self) -> None:
        """Release the lease: what it owned is orphaned at once, for any reconcile.

        Raises:
            StoreError: the store failed.
        """
        await self._store.leases.release(self.owner.removeprefix(LEASE_PREFIX))


async def owner_check(store: Store, owners: Iterable[str] | None = None) -> Callable[[str], bool | None]:
    """Whether an owner lives: a lease by ``store`` (``None`` for a lease it does not know:
    another store's, or one compacted once nothing named it; whose holder may well live),
    other owners by :func:`owner_alive`. With ``owners``, only their leases are looked up
    (by key), and the check knows only them; without, every lease the store holds (to judge
    owners not known in advance, such as a platform's labels).

    Raises:
        StoreError: the store failed.
    """
    if owners is None:
        leases = await store.leases.liveness()
    else:
        leases = await store.leases.states({i for owner in owners if (i := lease_id_of(owner)) is not None})

    def alive(owner: str) -> bool | None:
        if (lease_id := lease_id_of(owner)) is not None:
            return leases.get(lease_id)
        return owner_alive(owner)

    return alive


async def owner_lives(store: Store, owner: str) -> bool | None:
    """Whether one owner lives (see :func:`owner_check`), looked up by key.

    Raises:
        StoreError: the store failed.
    """
    return (await owner_check(store, [owner]))(owner)
