"""``/v1/pools``: warm pools, made, listed, read and removed. A run claims a node from one
with ``POST /v1/runs`` and ``"pool": NAME``. The service keeps pools filled (``keep_pools``):
one replica holds each pool at a time, another takes it over when that one dies."""

from __future__ import annotations

from typing import Any

import anyio
from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from ..errors import ConfigError
from ..fleet import settings_from_env
from ..runs import Pool, PoolStatus
from .answers import PoolOut
from .audit import note
from .auth import Principal, forbid
from .policy import check_settings
from .problems import ServiceError
from .schemas import ErrorBody, PoolIn
from .state import Caller, service_of
from .tenancy import pool_name, pool_shown, pool_visible

__all__ = ["pool_body", "router"]

router = APIRouter(prefix="/v1", responses={401: {"model": ErrorBody}, 403: {"model": ErrorBody}})


def pool_body(who: Principal, status: PoolStatus) -> dict[str, Any]:
    """A pool as the API shows ``who`` it: its template (stored settings, never a secret),
    its state, and its name as the caller knows it."""
    config = status.pool.node_config
    return status.as_json() | {
        "name": pool_shown(who, status.pool.name),
        "settings": status.pool.provider_settings,
        "node": {
            "ttl_seconds": config.ttl.total_seconds() if config and config.ttl else None,
            "labels": dict(config.labels) if config else {},
            "env_names": sorted(config.env) if config else [],
        },
    }


@router.post(
    "/pools",
    status_code=201,
    response_model=None,
    responses={
        201: {"model": PoolOut, "description": "The pool, to be filled."},
        409: {"model": ErrorBody},
        422: {"model": ErrorBody},
    },
)
async def create_pool(request: Request, body: PoolIn, who: Caller) -> JSONResponse:
    """Make a warm pool; the service fills it in the background (follow ``ready``)."""
    forbid(who, "nodes")
    service = service_of(request)
    service.check_provider(body.provider)
    check_settings(body.provider, body.settings, service.config.allow_settings)
    name = pool_name(who, body.name)
    if await service.store.pools.get(name) is not None:
        raise ServiceError(409, "pool_exists", f"pool {body.name!r} exists already")
    await note(
        request,
        who,
        "pool.create",
        name,
        provider=body.provider,
        size=body.size,
        settings=sorted(body.settings),
    )
    settings = await anyio.to_thread.run_sync(settings_from_env, body.provider, body.settings)
    pool = Pool(
        name=name,
        provider=body.provider,
        provider_settings=settings,
        node_config=body.node.config(owner="pool", default_ttl=service.config.node_ttl),
        size=body.size,
        max_age=body.max_age,
        refill_concurrency=body.refill_concurrency,
    )
    return JSONResponse(pool_body(who, await service.orchestrator.pools.create(pool)), 201)


@router.get(
    "/pools", response_model=None, responses={200: {"model": list[PoolOut], "description": "The pools."}}
)
async def list_pools(request: Request, who: Caller) -> list[dict[str, Any]]:
    """The warm pools, by name."""
    forbid(who, "read")
    pools = await service_of(request).orchestrator.pools.list()
    return [pool_body(who, status) for status in pools if pool_visible(who, status.pool.name)]


@router.get(
    "/pools/{name}",
    response_model=None,
    responses={200: {"model": PoolOut, "description": "The pool."}, 404: {"model": ErrorBody}},
)
async def get_pool(request: Request, name: str, who: Caller) -> dict[str, Any]:
    """A warm pool: ready and starting nodes, who keeps it, and why a refill failed."""
    forbid(who, "read")
    try:
        return pool_body(who, await service_of(request).orchestrator.pools.get(pool_name(who, name)))
    except ConfigError:
        raise ServiceError(404, "pool_not_found", f"no pool {name!r}") from None


@router.delete("/pools/{name}", status_code=204, responses={202: {"model": None}, 404: {"model": ErrorBody}})
async def remove_pool(
    request: Request,
    name: str,
    who: Caller,
    wait: float = Query(default=30.0, ge=0, le=300, description="Seconds to wait for its nodes to go."),
) -> Response:
    """Remove a pool: no run claims from it any more, and its nodes are destroyed. 204 once
    they are; 202 while its keeper still destroys them."""
    forbid(who, "nodes")
    stored = pool_name(who, name)
    if await service_of(request).store.pools.get(stored) is None:
        raise ServiceError(404, "pool_not_found", f"no pool {name!r}")
    await note(request, who, "pool.remove", stored)
    try:
        gone = await service_of(request).orchestrator.pools.remove(stored, wait=wait)
    except ConfigError:
        raise ServiceError(404, "pool_not_found", f"no pool {name!r}") from None
    return Response(status_code=204 if gone else 202)
