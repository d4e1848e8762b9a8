"""Keeping warm pools filled: :class:`PoolKeeper`, run by a control plane with ``keep_pools``
(see :mod:`nodeprov.runs.pools`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from contextlib import suppress
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from ..errors import NodeGoneError, NodeprovError, first_line, log_failure
from ..node import NodeConfig, NodeHandle, NodeProvider
from ..store import PoolNodeRecord, PoolNodeState, PoolRecord, Store
from .lease import owner_check

if TYPE_CHECKING:
    from .plane import ControlPlane

__all__ = ["PoolKeeper", "end_pool_node"]

logger = logging.getLogger("nodeprov.pools")

_P = PoolNodeState
_MAX_BACKOFF = 300.0
_LIST_EVERY = 10  # rounds between asking the platform which nodes still exist
_AFTER_CLAIM = 0.2  # seconds a refill waits for a claimant's first spawn


class PoolKeeper:
    """Holds and tends the pools (``only`` those named, or all), one round every
    ``interval`` seconds or as soon as :meth:`wake` is called (a claim here, a new pool).
    Provisions and destroys run as tasks of ``spawn``, so a slow platform never holds a round
    up; a round's failure is logged and the next goes on."""

    def __init__(self, plane: ControlPlane, *, only: Collection[str] | None, interval: float) -> None:
        self._store, self._lease, self._nodes = plane.store, plane.lease, plane.nodes
        self._only = only
        self._interval = interval
        self._spawn = plane.spawn
        self._woken = anyio.Event()
        self._after_claim = False
        self._busy: set[str] = set()  # pool nodes a task here provisions or destroys
        self._made: dict[str, tuple[str, NodeHandle]] = {}  # ready nodes made here: id -> pool, handle
        self._rounds = 0
        self._told_unkept: set[str] = set()  # pools said to be unkept here, for want of secrets

    def wake(self, *, claimed: bool = False) -> None:
        """Tend the pools now: one was made or is being removed; or, once the claimant has
        started on its node (``claimed``), refill: a provision started at once would take the
        cores the claimant's first spawn needs (on docker, 70 ms to the first byte, not 50)."""
        self._after_claim = self._after_claim or claimed
        self._woken.set()

    def hand_over(self, node_id: str) -> NodeHandle | None:
        """The handle of a node claimed from a pool, if this control plane made it."""
        made = self._made.pop(node_id, None)
        return made[1] if made is not None else None

    async def keep_forever(self) -> None:
        try:
            while True:
                with anyio.move_on_after(self._interval):
                    await self._woken.wait()
                if self._after_claim:
                    await anyio.sleep(_AFTER_CLAIM)
                self._woken, self._after_claim = anyio.Event(), False
                try:
                    await self.keep_round()
                except Exception as error:  # noqa: BLE001 - logged (log_failure)
                    log_failure(
                        logger, error, "keeping the pools failed; trying again in %g s", self._interval
                    )
        finally:
            # The channels opened ahead on the nodes made here end with this control plane.
            made, self._made = list(self._made.values()), {}
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                for _, node in made:
                    await node.release_prepared()

    async def keep_round(self) -> None:
        """Take over the wanted pools nobody living holds, and tend those held here.

        Raises:
            StoreError: the store failed.
        """
        self._rounds += 1
        records = await self._store.pools.all()
        alive = await owner_check(self._store, [record.holder for record in records if record.holder])
        for record in records:
            wanted = self._only is None or record.name in self._only
            if wanted and self._can_keep(record) and await self._hold(record, alive):
                await self._tend(record)

    async def finish_removal(self, name: str) -> None:
        """Destroy a pool being removed here, if nobody living holds it (or this control plane does).

        Raises:
            StoreError: the store failed.
        """
        record = await self._store.pools.get(name)
        if record is None or not self._can_keep(record):
            return
        if await self._hold(record, await owner_check(self._store, [record.holder] if record.holder else [])):
            await self._tend(record)

    def _can_keep(self, record: PoolRecord) -> bool:
        """Whether this control plane was given the secret settings the pool was made with:
        without them it can neither make nor destroy the pool's nodes, so it leaves the pool
        to one that was (and says so, once)."""
        missing = self._nodes.not_given(record.provider, record.secret_fields)
        if missing and record.name not in self._told_unkept:
            self._told_unkept.add(record.name)
            logger.warning(
                "pool %s: not kept here: it was made with secret %s settings not given here: %s",
                record.name,
                record.provider,
                ", ".join(missing),
            )
        return not missing

    async def _hold(self, record: PoolRecord, alive: Callable[[str], bool | None]) -> bool:
        me = self._lease.owner
        if record.holder == me:
            return True
        if record.holder is not None and alive(record.holder) is not False:
            return False
        if not await self._store.pools.take(record.name, me, expect=record.holder):
            return False
        logger.info("pool %s: kept here now (was %s)", record.name, record.holder or "nobody's")
        return True

    async def _tend(self, record: PoolRecord) -> None:
        name = record.name
        try:
            provider = await self._nodes.provider(
                record.provider,
                self._nodes.laid_over(record.provider, record.provider_settings, record.secret_fields),
            )
        except NodeprovError as error:
            await self._store.pools.note_failure(name, first_line(error), _MAX_BACKOFF)
            return
        nodes = await self._store.pools.nodes(name)
        alive = await owner_check(self._store, [node.owner for node in nodes if node.state is _P.INTENT])
        ready = {node.id for node in nodes if node.state is _P.READY}
        for gone in [i for i, (pool, _) in self._made.items() if pool == name and i not in ready]:
            self._forget(gone)  # claimed elsewhere, or destroyed
        for node in nodes:  # one a task here provisions or destroys is left to it
            if node.state is _P.DESTROYING:
                self._destroy_soon(provider, node, "its destruction did not finish before")
            elif node.state is _P.INTENT and node.owner == self._lease.owner:
                self._destroy_soon(provider, node, "its provision here was not recorded ready")
            elif node.state is _P.INTENT and alive(node.owner) is False:
                self._destroy_soon(provider, node, "left by a control plane that died")
        if record.state != "active":
            for node in nodes:
                if node.state is _P.READY:
                    self._destroy_soon(provider, node, "its pool is removed")
            if not nodes:
                await self._store.pools.delete_if_empty(name)
                logger.info("pool %s: removed", name)
            return
        for node in await self._store.pools.expired(name, record.max_age):
            self._destroy_soon(provider, node, f"older than the pool's max_age ({record.max_age:g} s)")
        if self._rounds % _LIST_EVERY == 1:
            await self._forget_gone(provider, record)
        await self._refill(provider, record)

    async def _forget_gone(self, provider: NodeProvider[Any], record: PoolRecord) -> None:
        """Record destroyed the ready nodes the platform no longer has (deleted behind the pool's back)."""
        ready = await self._store.pools.nodes(record.name, (_P.READY,))  # before the list: each is in it
        try:
            listed = {info.node_id for info in await provider.list_nodes()}
        except NodeprovError as error:
            logger.warning("pool %s: cannot list the %s nodes: %s", record.name, provider.name, error)
            return
        for node in ready:
            if node.id not in listed and await self._store.pools.move(node.id, (_P.READY,), _P.DESTROYED):
                self._forget(node.id)
                logger.warning(
                    "pool %s: node %s is gone from %s; replacing it", record.name, node.id, provider.name
                )

    async def _refill(self, provider: NodeProvider[Any], record: PoolRecord) -> None:
        backing_off = record.error is not None and record.retry_at_ms is not None
        if backing_off and (record.retry_at_ms or 0) > await self._store.clock_ms():
            return
        held = await self._store.pools.nodes(record.name, (_P.INTENT, _P.READY))
        starting = sum(1 for n in held if n.state is _P.INTENT and n.id in self._busy)
        for _ in range(min(record.size - len(held), record.refill_concurrency - starting)):
            config = node_from_template(record.node_config, self._lease.owner)
            if not await self._store.pools.add_intent(record.name, config.node_id, self._lease.owner):
                return  # full, or no longer held here
            self._busy.add(config.node_id)
            self._spawn(partial(_logged, partial(self._provision, provider, record, config), record.name))

    async def _provision(self, provider: NodeProvider[Any], record: PoolRecord, config: NodeConfig) -> None:
        node_id = config.node_id
        try:
            try:
                node = await provider.provision(config)
            except BaseException as error:
                with anyio.CancelScope(shield=True):
                    await self._store.pools.move(node_id, (_P.INTENT,), _P.FAILED)
                    if isinstance(error, NodeprovError):
                        backoff = min(_MAX_BACKOFF, 2.0**record.failures)
                        await self._store.pools.note_failure(record.name, first_line(error), backoff)
                        logger.warning(
                            "pool %s: provisioning failed, trying again in %g s: %s",
                            record.name,
                            backoff,
                            error,
                        )
                if isinstance(error, NodeprovError):
                    return
                raise
            await _prepared(node, record.name)
            with anyio.CancelScope(shield=True):
                if await self._store.pools.made_ready(node_id):
                    self._made[node_id] = (record.name, node)
                    await self._store.pools.note_success(record.name)
                    logger.info("pool %s: node %s ready", record.name, node_id)
                    return
                with suppress(NodeprovError):  # the pool is being removed: the node is not wanted
                    await node.destroy()  # closes its prepared channel too
                await self._store.pools.move(node_id, (_P.INTENT,), _P.DESTROYED)
        finally:
            self._busy.discard(node_id)

    def _destroy_soon(self, provider: NodeProvider[Any], node: PoolNodeRecord, why: str) -> None:
        if node.id in self._busy:
            return  # a task here provisions or destroys it already
        self._busy.add(node.id)
        self._forget(node.id)
        self._spawn(partial(_logged, partial(self._destroy, provider, node, why), node.pool))

    async def _destroy(self, provider: NodeProvider[Any], node: PoolNodeRecord, why: str) -> None:
        try:
            await end_pool_node(self._store, provider, node, why)
        finally:
            self._busy.discard(node.id)

    def _forget(self, node_id: str) -> None:
        """Drop the handle of a node made here that is no longer this pool's to hand over,
        closing the channel it opened ahead (see :func:`_prepared`)."""
        made = self._made.pop(node_id, None)
        if made is not None and made[1].prepared:
            self._spawn(made[1].release_prepared)


async def _prepared(node: NodeHandle, pool: str) -> None:
    """Open the channel of the node's first spawn ahead (:meth:`NodeHandle.prepare`): a
    claim here then starts its first process without the platform's exec round trips. A
    node that cannot be prepared is claimed all the same, and spawns the usual way."""
    try:
        await node.prepare()
    except NodeprovError as error:
        logger.info("pool %s: node %s not prepared (spawns go the usual way): %s", pool, node.node_id, error)


async def _logged(work: Callable[[], Awaitable[None]], pool: str) -> None:
    """A pool task whose failure (the store away) is logged: the next round tries again."""
    try:
        await work()
    except Exception as error:  # noqa: BLE001 - logged (log_failure)
        log_failure(logger, error, "pool %s: a task failed; the next round tries again", pool)


def node_from_template(stored: str, owner: str) -> NodeConfig:
    """A new node's config from a stored template: a node id and provision key of its own."""
    return NodeConfig.model_validate_json(stored).model_copy(update={"owner": owner})


async def end_pool_node(store: Store, provider: NodeProvider[Any], node: PoolNodeRecord, why: str) -> None:
    """Destroy a pool's ``node`` (``why``: for the log): recorded destroying first, unless it
    was claimed or taken meanwhile (then left be), destroyed once gone. Shielded; a destroy
    that fails is logged and left destroying, for the next round.

    Raises:
        StoreError: the store failed.
    """
    with anyio.CancelScope(shield=True):
        if node.state is not _P.DESTROYING and not await store.pools.move(
            node.id, (node.state,), _P.DESTROYING
        ):
            return
        try:
            with suppress(NodeGoneError):
                await (await provider.attach(node.id)).destroy()
        except NodeprovError as error:
            logger.warning("pool %s: could not destroy node %s: %s", node.pool, node.id, error)
            return
        await store.pools.move(node.id, (_P.DESTROYING,), _P.DESTROYED)
        logger.info("pool %s: destroyed node %s: %s", node.pool, node.id, why)
