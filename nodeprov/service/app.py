"""The ASGI app of ``nodeprov serve``: :func:`create_app` (FastAPI), its lifespan (the
store, the orchestrator, the providers), the limits on request bodies, and ``/healthz``,
``/readyz``, ``/metrics``, ``/v1/agents``."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import version
from typing import Any

import anyio
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..agents.registry import agent_names, describe_agent
from ..errors import NodeprovError
from ..store import patience
from .answers import AgentOut, StatusOut
from .audit import router as audit_router
from .auth import forbid
from .checkpoints import router as checkpoints_router
from .config import ServiceConfig
from .nodes import FILE_ROUTE
from .nodes import router as nodes_router
from .openapi import document
from .pools import router as pools_router
from .problems import HANDLERS, problem_response
from .runs import router as runs_router
from .schemas import ErrorBody
from .state import Caller, Service, service_of

__all__ = ["CONFIG_VARIABLE", "app_from_environment", "create_app"]

logger = logging.getLogger("nodeprov.service")

CONFIG_VARIABLE = "NODEPROV_SERVE_CONFIG"
"""The environment variable a worker process reads its :class:`ServiceConfig` from (JSON)."""

_READY_TIMEOUT = 5.0

meta = APIRouter()


@meta.get(
    "/healthz", response_model=None, responses={200: {"model": StatusOut, "description": "It answers: ok."}}
)
async def healthz() -> dict[str, str]:
    """The process answers (no token needed)."""
    return {"status": "ok"}


@meta.get(
    "/readyz",
    response_model=None,
    responses={200: {"model": StatusOut, "description": "It can serve: ready."}, 503: {"model": ErrorBody}},
)
async def readyz(request: Request) -> JSONResponse:
    """The process can serve: its store answers, and it is not stopping (no token needed)."""
    service = service_of(request)
    if service.stopping.is_set():
        return problem_response(503, "stopping", "this replica is stopping")
    try:
        with anyio.fail_after(_READY_TIMEOUT):
            await service.store.clock_ms()
    except (NodeprovError, TimeoutError) as error:
        return problem_response(503, "store_unavailable", f"the store does not answer: {error or 'timeout'}")
    return JSONResponse({"status": "ready"})


@meta.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
async def metrics(request: Request, who: Caller) -> Response:
    """Prometheus' text format (an admin's: its labels name every tenant's pools)."""
    forbid(who, "admin")
    service = service_of(request)
    return Response(await service.metrics.render(service.store), media_type="text/plain; version=0.0.4")


@meta.get(
    "/v1/agents",
    response_model=None,
    responses={200: {"model": list[AgentOut], "description": "The agents."}},
)
async def list_agents(who: Caller) -> list[dict[str, Any]]:
    """The installed agents: their CLIs, the models routed to each, capabilities and models."""
    forbid(who, "read")
    return [describe_agent(name) for name in agent_names()]


@meta.get(
    "/v1/agents/{name}",
    response_model=None,
    responses={200: {"model": AgentOut, "description": "The agent."}, 404: {"model": ErrorBody}},
)
async def get_agent(name: str, who: Caller) -> dict[str, Any] | JSONResponse:
    """One agent."""
    forbid(who, "read")
    if name not in agent_names():
        return problem_response(404, "agent_not_found", f"no agent {name!r}")
    return describe_agent(name)


def create_app(config: ServiceConfig | None = None) -> FastAPI:
    """The service's app; it opens what it needs (see :class:`Service`) when served."""
    config = config or ServiceConfig()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with Service.running(config) as service:
            app.state.service = service
            yield

    app = FastAPI(
        title="nodeprov",
        version=version("nodeprov"),
        summary="Nodes for AI coding agents, and agents run on them, their events as server-sent events.",
        lifespan=lifespan,
        exception_handlers=HANDLERS,  # type: ignore[arg-type]
    )
    app.include_router(meta)
    app.include_router(nodes_router)
    app.include_router(runs_router)
    app.include_router(checkpoints_router)
    app.include_router(pools_router)
    app.include_router(audit_router)
    app.add_middleware(_BodyLimit, max_body=config.max_body, max_file=config.max_file)
    app.add_middleware(_Counted)
    app.add_middleware(_StorePatience, seconds=config.request_store_retry)
    app.openapi = lambda: document(app, config)  # type: ignore[method-assign]
    return app


def app_from_environment() -> FastAPI:
    """:func:`create_app` with the configuration in ``$NODEPROV_SERVE_CONFIG`` (a worker
    process of ``nodeprov serve --workers N``)."""
    return create_app(ServiceConfig.model_validate(json.loads(os.environ.get(CONFIG_VARIABLE) or "{}")))


class _Counted:
    """Counts requests by method, route (its template: ``/v1/runs/{run_id}``) and status."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def noted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noted)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            if (state := getattr(scope.get("app"), "state", None)) is not None and hasattr(state, "service"):
                state.service.metrics.requests.labels(scope["method"], route, str(status)).inc()


class _StorePatience:
    """A request waits for a store that stops answering ``seconds`` at most (then 503): the
    runs it starts set their own (:func:`nodeprov.store.patience`)."""

    def __init__(self, app: ASGIApp, *, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with patience(self.seconds if scope["type"] == "http" else None):
            await self.app(scope, receive, send)


class _TooLarge(HTTPException):
    """Raised by a request's ``receive`` past the limit: an HTTPException, so the body's
    reader (FastAPI's, or a streamed upload) lets it through to the 413 answer."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over this service's limit of {limit} bytes")


class _BodyLimit:
    """Refuses a request body over its limit with 413: at once when its Content-Length says
    so, else once that much has come (the file route has a limit of its own)."""

    def __init__(self, app: ASGIApp, *, max_body: int, max_file: int) -> None:
        self.app = app
        self.max_body = max_body
        self.max_file = max_file

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_file if FILE_ROUTE.match(scope["path"]) else self.max_body
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _refuse(send, limit)
            return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge(limit)
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except _TooLarge:
            if started:
                raise
            await _refuse(send, limit)


async def _refuse(send: Send, limit: int) -> None:
    response = problem_response(
        413, "too_large", f"the request body is over this service's limit of {limit} bytes"
    )
    await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}
