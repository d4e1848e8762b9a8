"""What one service process holds while it serves: the store, the orchestrator (its lease,
runs and reconcile), the providers of nodes made through the API, the authenticator and the
metrics. Made and closed by the app's lifespan."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from typing import Annotated, Any

import anyio
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from .._heap import freeze_start_up
from ..agents.registry import agent_class, agent_names, import_soon
from ..errors import NodeprovError, log_failure
from ..fleet import Fleet, provider_settings_from_env
from ..node import NodeHandle
from ..registry import provider_class, provider_names
from ..runs import Orchestrator
from ..store import Store
from .auth import Authenticator, Principal
from .config import ServiceConfig
from .metrics import Metrics
from .problems import ServiceError

__all__ = ["Caller", "Service", "offered_providers", "service_of"]

logger = logging.getLogger("nodeprov.service")

_PURGE_INTERVAL = 3600.0  # forgetting old idempotency keys
_NODES_REMEMBERED = 10000


class Service:
    """One service process's parts (see the module)."""

    def __init__(self, config: ServiceConfig, store: Store, orchestrator: Orchestrator, fleet: Fleet) -> None:
        self.config = config
        self.store = store
        self.orchestrator = orchestrator
        self.fleet = fleet
        self.auth = Authenticator(
            store,
            open_on_no_tokens=config.loopback,
            failures=config.auth_failures,
            window=config.auth_failure_window,
        )
        self.metrics = Metrics()
        self.node_providers: dict[str, str] = {}
        """The provider of each node this replica made or found, by id (a bounded memo)."""
        self.stopping = anyio.Event()
        """Set as the app's lifespan ends: ``/readyz`` answers 503 from then on."""

    @property
    def owner(self) -> str:
        """The owner label of nodes made through the API: never judged gone by a reaper, so
        a node outlives the replica that made it, until it is destroyed or its lifetime ends."""
        return "service:nodeprov"

    def remember(self, node: NodeHandle) -> None:
        """Note where ``node`` is, so the next request for it asks that provider alone."""
        if len(self.node_providers) >= _NODES_REMEMBERED:
            self.node_providers.pop(next(iter(self.node_providers)))
        self.node_providers[node.node_id] = node.provider

    def check_provider(self, name: str) -> None:
        """Raises ServiceError (422) unless clients may use provider ``name``."""
        if name not in self.allowed_providers():
            raise ServiceError(422, "invalid", f"provider {name!r} is not offered by this service")

    def allowed_providers(self) -> list[str]:
        return offered_providers(self.config)

    @classmethod
    @asynccontextmanager
    async def running(cls, config: ServiceConfig) -> AsyncIterator[Service]:
        async with AsyncExitStack() as stack:
            await anyio.to_thread.run_sync(_import_agents_soon)
            store = await Store.open(config.store, retry_for=config.store_retry)
            stack.push_async_callback(store.aclose)
            orchestrator = Orchestrator(
                store,
                holder=f"nodeprov serve on {socket.gethostname()} pid {os.getpid()}",
                lease_ttl=config.lease_ttl,
                poll_interval=config.poll_interval,
                shutdown_timeout=config.shutdown_timeout,
                agent_grace=config.agent_grace,
                keep_pools=config.keep_pools,
                retention=config.retention,
                checkpoints=config.checkpoints,
                # What runs never store, for a dead replica's runs that this one reconciles.
                provider_settings=await anyio.to_thread.run_sync(provider_settings_from_env, None),
            )
            fleet = Fleet()
            stack.push_async_callback(fleet.aclose)
            await stack.enter_async_context(orchestrator)
            freeze_start_up()
            service = cls(config, store, orchestrator, fleet)
            stack.callback(service.stopping.set)  # first on the way out
            async with anyio.create_task_group() as tg:
                tg.start_soon(service._purge_keys)
                try:
                    yield service
                finally:
                    tg.cancel_scope.cancel()

    async def _purge_keys(self) -> None:
        while True:
            try:
                await self.store.idempotency.purge(self.config.idempotency_ttl)
            except Exception as error:  # noqa: BLE001 - logged (log_failure)
                log_failure(logger, error, "could not forget old idempotency keys; trying again later")
            await anyio.sleep(_PURGE_INTERVAL)


def offered_providers(config: ServiceConfig) -> list[str]:
    """The providers a service of ``config`` offers its callers."""
    if config.providers is not None:
        return [name for name in config.providers if name in provider_names()]
    if config.loopback:
        return provider_names()
    return [name for name in provider_names() if not _on_this_host(name)]


def _on_this_host(name: str) -> bool:
    try:
        return bool(getattr(provider_class(name), "on_this_host", False))
    except NodeprovError:  # not loadable here: not offered either way
        return True


def service_of(request: Request) -> Service:
    service: Any = request.app.state.service
    assert isinstance(service, Service)  # noqa: S101 - narrows a type: an invariant, never a check of input
    return service


def _import_agents_soon() -> None:
    """Every installed agent's slow imports, started beside the service's start: its first
    run does not wait for them. An agent that does not load is said when a run asks for it."""
    for name in agent_names():
        with suppress(NodeprovError):
            import_soon(agent_class(name))


_bearer = HTTPBearer(
    auto_error=False,
    description="A token from `nodeprov tokens create` (or a tokens file). A service on loopback "
    "with no token in its store needs none, from this machine alone.",
)


async def caller(
    request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    """Who sent ``request`` (see :mod:`.auth`; ``_`` documents the scheme in the OpenAPI
    document, the authenticator reads the header itself)."""
    return await service_of(request).auth.principal(request)


Caller = Annotated[Principal, Depends(caller)]
"""A route's parameter: the caller, authenticated."""
