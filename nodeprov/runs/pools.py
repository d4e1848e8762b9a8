"""Warm pools: nodes provisioned before any run asks, so a run's node is claimed in
milliseconds instead of made in seconds.

A :class:`Pool` is a named node template (provider, settings, :class:`NodeConfig`) with a
``size``, a ``max_age`` and a ``refill_concurrency``, kept in the store. Its nodes are
ordinary nodes (labelled, with their lifetime, reaped by the same rules): provisioned by the
control plane that holds the pool (its lease owns them), and held by the store until a run
claims one.

**Claims** (:meth:`Pools.claim`, what ``Orchestrator.start(..., pool=...)`` does) take the
oldest ready node younger than ``max_age`` in one store transaction that also records it as
the run's node: two control planes never get one node, and a reaper never sees it held by
nobody. A node is used once: when its run is done it is destroyed like any run's node, never
returned. An empty pool gives nothing: the run provisions a node cold from the pool's
template, or waits for one (``pool_wait``).

**Keeping** (:class:`~nodeprov.runs.pool_keeping.PoolKeeper`, an ``Orchestrator`` with
``keep_pools``): one control plane holds each pool at a time (a compare-and-set in the store;
a holder whose lease is dead is taken over at the next round). It refills the pool to its
size (the size holds across control planes: the store counts before it records each new
node), replaces nodes past ``max_age`` or gone behind its back, backs off exponentially
(up to five minutes) when its provider fails and says why (:attr:`PoolStatus.error`), and
finishes a pool's removal.
"""

from __future__ import annotations

import builtins
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import ConfigError, NodeGoneError, RunStateError
from ..node import NodeConfig, NodeHandle, NodeProvider
from ..store import NodeRecordState, PoolRecord, dumps, now
from .lease import LEASE_PREFIX, owner_check
from .nodes import not_given

if TYPE_CHECKING:
    from .plane import ControlPlane
    from .pool_keeping import PoolKeeper

__all__ = ["Pool", "PoolStatus", "Pools"]

logger = logging.getLogger("nodeprov.pools")

_NAME = re.compile(r"([a-z0-9][a-z0-9-]{0,39}\.)?[a-z0-9][a-z0-9-]{0,39}")  # "TENANT." (the API's)


class Pool(BaseModel):
    """A warm pool: a node template and how many of its nodes to keep ready."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        description="Lowercase letters, digits and '-', at most 40 characters (under a tenant's "
        "prefix, 'TENANT.', where the HTTP API keeps a tenant's pools)."
    )
    provider: str = Field(description="The provider of the pool's nodes.")
    provider_settings: dict[str, Any] = Field(
        default_factory=dict,
        description="The provider's settings. Secret ones are never stored: a control plane that "
        "keeps the pool is given them (its provider_settings), as a resume is.",
    )
    node_config: NodeConfig | None = Field(
        default=None,
        description="What each node is made with (lifetime, labels, env, workdir, tools); its "
        "node id, owner and provision key are each node's own.",
    )
    size: int = Field(default=2, ge=0, le=1000, description="Ready nodes to keep.")
    max_age: float = Field(
        default=3600.0, gt=0, description="Seconds a ready node waits at most; older ones are replaced."
    )
    refill_concurrency: int = Field(default=2, ge=1, le=64, description="Nodes provisioned at once.")

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError("must be lowercase letters, digits and '-', at most 40 characters")
        return value

    def template(self) -> NodeConfig:
        config = self.node_config or NodeConfig()
        if config.ttl is not None and config.ttl <= timedelta(seconds=self.max_age):
            raise ConfigError(
                f"pool {self.name!r}: its nodes' ttl ({config.ttl}) must be longer than max_age "
                f"({self.max_age:g} s), or a ready node would expire in the pool"
            )
        return config


@dataclass(frozen=True)
class PoolStatus:
    """A pool as the store holds it: its template, ``ready`` and ``starting`` nodes,
    ``holder`` (``lease:ID``, None before any control plane kept it), who that is
    (``holder_name``: the lease's holder, host and pid) and whether it lives (``held``: None
    when this store cannot tell), ``state`` (``active`` or ``removing``), and
    ``error`` (the last refill's failure, None once one succeeded) with ``retry_in`` seconds."""

    pool: Pool
    state: str
    ready: int
    starting: int
    holder: str | None
    holder_name: str | None
    held: bool | None
    error: str | None
    retry_in: float | None

    def as_json(self) -> dict[str, Any]:
        """The pool's figures and state as JSON values (not its settings or template)."""
        return {
            "name": self.pool.name,
            "provider": self.pool.provider,
            "size": self.pool.size,
            "max_age": self.pool.max_age,
            "refill_concurrency": self.pool.refill_concurrency,
            "state": self.state,
            "ready": self.ready,
            "starting": self.starting,
            "holder": self.holder,
            "holder_name": self.holder_name,
            "held": self.held,
            "error": self.error,
            "retry_in": self.retry_in,
        }


class Pools:
    """The pools of a store, as a control plane sees them (``orchestrator.pools``).

    Every method raises :class:`~nodeprov.errors.StoreError` when the store fails.
    """

    def __init__(self, plane: ControlPlane, keeper: PoolKeeper | None, *, poll_interval: float) -> None:
        self._store, self._nodes = plane.store, plane.nodes
        self._keeper = keeper  # None: this control plane keeps no pool
        self._poll = poll_interval

    async def create(self, pool: Pool) -> PoolStatus:
        """Add ``pool`` (empty: a control plane that keeps pools fills it).

        Raises:
            ProviderNotFoundError, ConfigError: the provider or its settings are wrong, the
                nodes' ttl is not longer than ``max_age``, or a pool of that name exists.
        """
        template = pool.template()
        settings = (await self._nodes.provider(pool.provider, pool.provider_settings)).resolved_settings()
        await self._store.pools.create(
            PoolRecord(
                name=pool.name,
                provider=pool.provider,
                provider_settings=dumps(settings.storable()),
                secret_fields=json.dumps(settings.secrets_set()),
                node_config=template.template_json(),
                size=pool.size,
                max_age=pool.max_age,
                refill_concurrency=pool.refill_concurrency,
                state="active",
                holder=None,
                error=None,
                retry_at_ms=None,
                failures=0,
                created_at=now(),
            )
        )
        if self._keeper is not None:
            self._keeper.wake()
        return await self.get(pool.name)

    async def get(self, name: str) -> PoolStatus:
        """Raises ConfigError: there is no such pool."""
        record = await self._store.pools.get(name)
        if record is None:
            raise ConfigError(f"no pool {name!r}")
        return (await self._statuses([record], await self._store.pools.counts(name)))[0]

    async def list(self) -> list[PoolStatus]:
        """Every pool, by name."""
        return await self._statuses(await self._store.pools.all(), await self._store.pools.counts())

    async def _statuses(
        self, records: Sequence[PoolRecord], counts: Mapping[str, dict[str, int]]
    ) -> builtins.list[PoolStatus]:
        holders = {record.holder for record in records if record.holder}
        alive = await owner_check(self._store, holders)
        clock = await self._store.clock_ms()
        names = {}
        for holder in holders:
            lease = await self._store.leases.get(holder.removeprefix(LEASE_PREFIX))
            names[holder] = lease.holder if lease is not None else None
        return [_status_of(record, counts.get(record.name, {}), alive, clock, names) for record in records]

    async def remove(self, name: str, *, wait: float = 60.0) -> bool:
        """Remove the pool: no claim takes its nodes any more, and they are destroyed (by
        this control plane when the pool's holder is gone or is this one, else by the holder,
        within its next round). Returns whether the pool is gone within ``wait`` seconds;
        if not, its removal goes on.

        Raises:
            ConfigError: there is no such pool.
        """
        if not await self._store.pools.mark_removing(name):
            raise ConfigError(f"no pool {name!r}")
        with anyio.move_on_after(wait):
            while await self._store.pools.get(name) is not None:
                if self._keeper is not None:
                    await self._keeper.finish_removal(name)
                await anyio.sleep(self._poll)
            return True
        return False

    async def template(self, name: str, given: Mapping[str, Any]) -> tuple[str, dict[str, Any], NodeConfig]:
        """The provider, settings and node template of pool ``name``, for a run that claims
        from it: the stored settings with this control plane's secrets for the provider laid
        over, and the run's ``given`` settings over those.

        Raises:
            ConfigError: there is no such pool, a secret setting it was made with is not
                given, or its provider does not load.
            ProviderNotFoundError: its provider is not installed here.
            RunStateError: the pool is being removed.
        """
        record = await self._store.pools.get(name)
        if record is None:
            raise ConfigError(f"no pool {name!r}")
        if record.state != "active":
            raise RunStateError(f"pool {name!r} is being removed")
        laid = {**await self._nodes.secrets(record.provider), **given}
        missing = not_given(record.secret_fields, laid)
        if missing:
            raise ConfigError(
                f"pool {name!r} was made with secret settings to give again: {', '.join(missing)}"
            )
        settings = {**json.loads(record.provider_settings), **laid}
        return record.provider, settings, NodeConfig.model_validate_json(record.node_config)

    async def claim(
        self, name: str, run_id: str, provider: NodeProvider[Any], *, wait: bool
    ) -> NodeHandle | None:
        """A ready node of pool ``name`` for run ``run_id``, recorded as the run's node (see
        the module's documentation); ``None`` when the pool has none ready, unless ``wait``:
        then it waits (checking every ``poll_interval``) until one is. A node found gone
        (deleted behind the pool's back) is recorded destroyed and another claimed.

        Raises:
            RunStateError: the pool does not exist or is being removed.
            ProviderError: the node could not be attached.
        """
        while True:
            node_id = await self._store.pools.claim(name, run_id, provider.name)
            if self._keeper is not None:
                self._keeper.wake(claimed=node_id is not None)
            if node_id is None:
                if not wait:
                    return None
                await anyio.sleep(self._poll)
                continue
            made_here = self._keeper.hand_over(node_id) if self._keeper is not None else None
            if made_here is not None:
                return made_here  # the handle it was made with: no round trip to the platform
            try:
                return await provider.attach(node_id)
            except NodeGoneError:
                logger.warning("pool %s: node %s was gone when claimed; claiming another", name, node_id)
                await self._store.set_node_state(node_id, NodeRecordState.DESTROYED)


def _status_of(
    record: PoolRecord,
    counts: Mapping[str, int],
    alive: Callable[[str], bool | None],
    clock: int,
    names: Mapping[str, str | None],
) -> PoolStatus:
    pool = Pool(
        name=record.name,
        provider=record.provider,
        provider_settings=json.loads(record.provider_settings),
        node_config=NodeConfig.model_validate_json(record.node_config),
        size=record.size,
        max_age=record.max_age,
        refill_concurrency=record.refill_concurrency,
    )
    retry = None if record.retry_at_ms is None else max(0.0, (record.retry_at_ms - clock) / 1000)
    return PoolStatus(
        pool=pool,
        state=record.state,
        ready=counts.get("ready", 0),
        starting=counts.get("intent", 0),
        holder=record.holder,
        holder_name=names.get(record.holder) if record.holder else None,
        held=None if record.holder is None else alive(record.holder),
        error=record.error,
        retry_in=retry if record.error else None,
    )
